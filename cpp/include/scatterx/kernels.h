// The kernels of ScatterElements and GatherElements over strided N-d arrays, free of Python.
//
// Geometry: the iteration space is the shape of `indices`. A *fiber* is the set of positions
// that share every coordinate except the axis one; all updates of a fiber target the same output
// fiber, in increasing axis order, which is their row-major order. Threads split the fibers, so
// each output element has one owner (no atomics) and results do not depend on the thread count.
// All offsets are 64-bit byte offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "parallel.h"
#include "reducers.h"

namespace scatterx {

inline constexpr int kMaxDims = 64;
// Below this many elements of work a call stays on the calling thread.
inline constexpr int64_t kParallelGrain = 1 << 15;

template <int NA> struct Strided {
    int ndim = 0;
    int64_t shape[kMaxDims];
    int64_t stride[NA][kMaxDims];  // byte strides, one row per array
};

// Drops unit dimensions (except `keep`) and merges neighbours whose strides chain for every
// array. Row-major order of the remaining positions equals that of the original ones, so flat
// positions (used in error messages) are preserved. Returns the new index of `keep` (-1 if none).
template <int NA> int coalesce(Strided<NA>& s, int keep) {
    int out = 0, new_keep = -1;
    for (int d = 0; d < s.ndim; ++d) {
        if (s.shape[d] == 1 && d != keep) continue;
        bool mergeable = out > 0 && d != keep && (out - 1) != new_keep;
        if (mergeable) {
            for (int a = 0; a < NA; ++a)
                if (s.stride[a][out - 1] != s.stride[a][d] * s.shape[d]) mergeable = false;
        }
        if (mergeable) {
            s.shape[out - 1] *= s.shape[d];
            for (int a = 0; a < NA; ++a) s.stride[a][out - 1] = s.stride[a][d];
            continue;
        }
        s.shape[out] = s.shape[d];
        for (int a = 0; a < NA; ++a) s.stride[a][out] = s.stride[a][d];
        if (d == keep) new_keep = out;
        ++out;
    }
    s.ndim = out;
    return new_keep;
}

inline int64_t volume(const int64_t* shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
}

// Visits the flat range [begin, end) of `s` in row-major order, calling
// body(ptrs, count, inner_strides) once per run along the last dimension.
template <int NA, class Body>
void for_each_run(const Strided<NA>& s, char* const base[NA], int64_t begin, int64_t end, Body&& body) {
    if (begin >= end) return;
    if (s.ndim == 0) {
        char* p[NA];
        for (int a = 0; a < NA; ++a) p[a] = base[a];
        body(p, int64_t(1), (const int64_t*)nullptr);
        return;
    }
    const int last = s.ndim - 1;
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
        idx[d] = rem % s.shape[d];
        rem /= s.shape[d];
    }
    int64_t inner[NA];
    for (int a = 0; a < NA; ++a) inner[a] = s.stride[a][last];
    int64_t pos = begin;
    while (pos < end) {
        char* p[NA];
        for (int a = 0; a < NA; ++a) {
            int64_t off = 0;
            for (int d = 0; d < s.ndim; ++d) off += idx[d] * s.stride[a][d];
            p[a] = base[a] + off;
        }
        int64_t count = std::min(s.shape[last] - idx[last], end - pos);
        body(p, count, inner);
        pos += count;
        idx[last] += count;
        for (int d = last; d > 0 && idx[d] >= s.shape[d]; --d) {
            idx[d] = 0;
            ++idx[d - 1];
        }
    }
}

template <class I> inline bool out_of_bounds(I v, int64_t size) {
    return int64_t(v) < -size || int64_t(v) >= size;
}

// First flat position (row-major over `shape`) whose index is outside [-size, size), or -1.
template <class I>
int64_t find_bad_index(const char* indices, const int64_t* shape, const int64_t* strides, int ndim,
                       int64_t size) {
    Strided<1> s;
    s.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
        s.shape[d] = shape[d];
        s.stride[0][d] = strides[d];
    }
    coalesce(s, -1);
    const int64_t n = volume(s.shape, s.ndim);
    if (n == 0) return -1;
    const int parts = int(std::min<int64_t>(64, std::max<int64_t>(1, n / kParallelGrain)));
    std::vector<int64_t> first(parts, -1);
    char* base[1] = {const_cast<char*>(indices)};
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        for (int part = w; part < parts; part += nw) {
            auto [lo, hi] = split_range(n, part, parts);
            int64_t pos = lo;
            bool found = false;
            for_each_run(s, base, lo, hi, [&](char* const* p, int64_t count, const int64_t* inner) {
                if (found) return;
                const int64_t st = inner ? inner[0] : 0;
                const char* q = p[0];
                if (st == int64_t(sizeof(I))) {
                    const I* v = reinterpret_cast<const I*>(q);
                    bool any = false;
                    for (int64_t k = 0; k < count; ++k) any |= out_of_bounds(v[k], size);
                    if (any) {
                        for (int64_t k = 0; k < count; ++k)
                            if (out_of_bounds(v[k], size)) { first[part] = pos + k; found = true; return; }
                    }
                } else {
                    for (int64_t k = 0; k < count; ++k) {
                        if (out_of_bounds(*reinterpret_cast<const I*>(q + k * st), size)) {
                            first[part] = pos + k; found = true; return;
                        }
                    }
                }
                pos += count;
            });
        }
    });
    for (int64_t f : first)
        if (f >= 0) return f;
    return -1;
}

// dst[...] = src[...] over `shape` for elements of `itemsize` bytes.
inline void copy_strided(char* dst, const int64_t* dst_strides, const char* src,
                         const int64_t* src_strides, const int64_t* shape, int ndim, int64_t itemsize) {
    Strided<2> s;
    s.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
        s.shape[d] = shape[d];
        s.stride[0][d] = dst_strides[d];
        s.stride[1][d] = src_strides[d];
    }
    coalesce(s, -1);
    const int64_t n = volume(s.shape, s.ndim);
    if (n == 0) return;
    const int parts = int(std::min<int64_t>(64, std::max<int64_t>(1, n * itemsize / (kParallelGrain * 8))));
    char* base[2] = {dst, const_cast<char*>(src)};
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        for (int part = w; part < parts; part += nw) {
            auto [lo, hi] = split_range(n, part, parts);
            for_each_run(s, base, lo, hi, [&](char* const* p, int64_t count, const int64_t* inner) {
                if (!inner || (inner[0] == itemsize && inner[1] == itemsize)) {
                    std::memcpy(p[0], p[1], size_t(count * itemsize));
                } else {
                    for (int64_t k = 0; k < count; ++k)
                        std::memcpy(p[0] + k * inner[0], p[1] + k * inner[1], size_t(itemsize));
                }
            });
        }
    });
}

// Geometry of one scatter or gather call, in the iteration space of `indices`.
// Arrays: 0 = the array indexed by the index values (scatter: out; gather: data),
//         1 = indices, 2 = the array walked in step (scatter: updates; gather: out).
struct Geometry {
    Strided<3> s;
    int axis;             // position of the axis in s (after coalescing)
    int64_t axis_stride;  // byte stride of array 0 along the axis
    int64_t axis_size;    // length of array 0 along the axis
};

inline Geometry make_geometry(const int64_t* ishape, int ndim, int axis, const int64_t* strides0,
                              const int64_t* istrides, const int64_t* strides2, int64_t axis_size) {
    Geometry g;
    g.s.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
        g.s.shape[d] = ishape[d];
        // Along the axis array 0 is addressed by the index value, not by the position.
        g.s.stride[0][d] = d == axis ? 0 : strides0[d];
        g.s.stride[1][d] = istrides[d];
        g.s.stride[2][d] = strides2[d];
    }
    g.axis_stride = strides0[axis];
    g.axis_size = axis_size;
    g.axis = coalesce(g.s, axis);
    return g;
}

template <class I> inline int64_t normalise(I v, int64_t size) {
    int64_t x = int64_t(v);
    return x < 0 ? x + size : x;
}

// Runs body(p0, pi, p2, count_inner, inner strides, axis_len, axis strides) over fibers split among
// threads. Each call covers a block of fibers: `count` consecutive positions of the inner
// non-axis dimension, for every axis position. Fibers are visited so that every fiber sees its
// axis positions in increasing order.
template <class Body> void for_each_fiber_block(const Geometry& g, char* const base[3], Body&& body) {
    const Strided<3>& s = g.s;
    const int a = g.axis;
    const int64_t na = s.shape[a];
    // The non-axis dimensions form the fiber space; its last one is walked in the inner loop.
    Strided<3> f;
    f.ndim = 0;
    for (int d = 0; d < s.ndim; ++d) {
        if (d == a) continue;
        f.shape[f.ndim] = s.shape[d];
        for (int k = 0; k < 3; ++k) f.stride[k][f.ndim] = s.stride[k][d];
        ++f.ndim;
    }
    const int64_t nfib = volume(f.shape, f.ndim);
    if (nfib == 0 || na == 0) return;
    const int64_t work = nfib * na;
    int parts = int(std::min<int64_t>({int64_t(256), nfib, std::max<int64_t>(1, work / kParallelGrain)}));
    const int64_t astr[3] = {0, s.stride[1][a], s.stride[2][a]};
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        for (int part = w; part < parts; part += nw) {
            auto [lo, hi] = split_range(nfib, part, parts);
            for_each_run(f, base, lo, hi, [&](char* const* p, int64_t count, const int64_t* inner) {
                static const int64_t zero[3] = {0, 0, 0};
                body(p, count, inner ? inner : zero, na, astr);
            });
        }
    });
}

template <class T, class I, Reduction R>
void scatter_kernel(const Geometry& g, char* out, const char* indices, const char* updates) {
    char* base[3] = {out, const_cast<char*>(indices), const_cast<char*>(updates)};
    const int64_t size = g.axis_size, ostr = g.axis_stride;
    // Axis before the inner fiber dimension: walk each axis position across the block of fibers
    // (contiguous inner loop). Axis after it: finish one fiber before the next.
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    for_each_fiber_block(g, base, [&](char* const* p, int64_t count, const int64_t* in,
                                      int64_t na, const int64_t* astr) {
        if (axis_outer) {
            for (int64_t j = 0; j < na; ++j) {
                const char* ip = p[1] + j * astr[1];
                const char* up = p[2] + j * astr[2];
                char* op = p[0];
                for (int64_t k = 0; k < count; ++k) {
                    int64_t v = normalise(*reinterpret_cast<const I*>(ip + k * in[1]), size);
                    T& dst = *reinterpret_cast<T*>(op + k * in[0] + v * ostr);
                    Reducer<R>::apply(dst, *reinterpret_cast<const T*>(up + k * in[2]));
                }
            }
        } else {
            for (int64_t k = 0; k < count; ++k) {
                const char* ip = p[1] + k * in[1];
                const char* up = p[2] + k * in[2];
                char* op = p[0] + k * in[0];
                for (int64_t j = 0; j < na; ++j) {
                    int64_t v = normalise(*reinterpret_cast<const I*>(ip + j * astr[1]), size);
                    T& dst = *reinterpret_cast<T*>(op + v * ostr);
                    Reducer<R>::apply(dst, *reinterpret_cast<const T*>(up + j * astr[2]));
                }
            }
        }
    });
}

// Element size only matters for a gather: it moves bytes.
template <int64_t N, class I> void gather_kernel(const Geometry& g, const char* data, const char* indices, char* out) {
    char* base[3] = {const_cast<char*>(data), const_cast<char*>(indices), out};
    const int64_t size = g.axis_size, dstr = g.axis_stride;
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    for_each_fiber_block(g, base, [&](char* const* p, int64_t count, const int64_t* in,
                                      int64_t na, const int64_t* astr) {
        auto move = [&](int64_t j, int64_t k) {
            int64_t v = normalise(*reinterpret_cast<const I*>(p[1] + j * astr[1] + k * in[1]), size);
            std::memcpy(p[2] + j * astr[2] + k * in[2], p[0] + k * in[0] + v * dstr, size_t(N));
        };
        if (axis_outer) {
            for (int64_t j = 0; j < na; ++j)
                for (int64_t k = 0; k < count; ++k) move(j, k);
        } else {
            for (int64_t k = 0; k < count; ++k)
                for (int64_t j = 0; j < na; ++j) move(j, k);
        }
    });
}

}  // namespace scatterx
