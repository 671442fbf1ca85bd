// The kernels of ScatterElements and GatherElements over strided N-d arrays, free of Python.
//
// Geometry: the iteration space is the shape of `indices`. A *fiber* is the set of positions
// that share every coordinate except the axis one; all updates of a fiber target the same output
// fiber, in increasing axis order, which is their row-major order. Threads split the fibers, so
// each output element has one owner (no atomics) and results do not depend on the thread count.
// All offsets are 64-bit byte offsets.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>

#if defined(__x86_64__)
#include <cpuid.h>
#include <emmintrin.h>
#endif

#include "parallel.h"
#include "paths.h"
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

// Whether any of v[0..count) is outside [-size, size), without a branch or a compare per value:
// with t = v + size (wrapping), a value is in bounds when t and 2 * size - 1 - t are both
// non-negative, so the OR of those over the run has its sign bit set when one is not. Adds,
// subtractions and ORs of 64-bit lanes exist in baseline x86-64 (SSE2), 64-bit compares do not:
// the compiler vectorises this loop. (A value near the int64 limits wraps t negative, or, when
// t does not wrap, makes 2 * size - 1 - t negative.)
template <class I> inline bool any_out_of_bounds(const I* v, int64_t count, int64_t size) {
    const uint64_t s = uint64_t(size), top = 2 * s - 1;
    uint64_t acc = 0;
    for (int64_t k = 0; k < count; ++k) {
        const uint64_t t = uint64_t(int64_t(v[k])) + s;
        acc |= t | (top - t);
    }
    return (acc >> 63) != 0;
}
// Runs of this many contiguous indices are checked by any_out_of_bounds; only a run that has a
// bad one is searched value by value.
inline constexpr int64_t kCheckRun = 1024;

// First flat position (row-major over `shape`) whose index is outside [-size, size), or -1.
template <class I>
int64_t find_bad_index(const char* indices, const int64_t* shape, const int64_t* strides, int ndim,
                       int64_t size) {
    // A stride-0 (broadcast) dimension repeats the same values: only its first position is
    // read, and that is also where the first bad value lies in row-major order.
    Strided<1> s;
    s.ndim = ndim;
    int64_t reduced[kMaxDims];
    for (int d = 0; d < ndim; ++d) {
        if (shape[d] == 0) return -1;
        reduced[d] = strides[d] == 0 ? 1 : shape[d];
        s.shape[d] = reduced[d];
        s.stride[0][d] = strides[d];
    }
    coalesce(s, -1);
    const int64_t n = volume(s.shape, s.ndim);
    if (n == 0) return -1;
    const int parts = int(std::min<int64_t>(64, std::max<int64_t>(1, n / kParallelGrain)));
    std::vector<int64_t> first(parts, -1);
    char* base[1] = {const_cast<char*>(indices)};
    parallel_parts(parts, [&](int part) {
        auto [lo, hi] = split_range(n, part, parts);
        int64_t pos = lo;
        bool found = false;
        for_each_run(s, base, lo, hi, [&](char* const* p, int64_t count, const int64_t* inner) {
            if (found) return;
            const int64_t st = inner ? inner[0] : 0;
            const char* q = p[0];
            if (st == int64_t(sizeof(I))) {
                const I* v = reinterpret_cast<const I*>(q);
                for (int64_t k0 = 0; k0 < count; k0 += kCheckRun) {
                    const int64_t k1 = std::min(count, k0 + kCheckRun);
                    if (!any_out_of_bounds(v + k0, k1 - k0, size)) continue;
                    for (int64_t k = k0; k < k1; ++k)
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
    });
    for (int64_t f : first) {
        if (f < 0) continue;
        // From the flat position over the reduced shape to the one over the full shape.
        int64_t full = 0, scale = 1;
        for (int d = ndim - 1; d >= 0; --d) {
            full += (f % reduced[d]) * scale;
            f /= reduced[d];
            scale *= shape[d];
        }
        return full;
    }
    return -1;
}

// Whether dst lies a little after src modulo 4 KiB, as when an output of the same size as the
// input is allocated right after it (glibc puts a 16-byte header between). The C library's
// memcpy then uses "rep movsb", which this CPU runs 3.5x slower at such a distance (measured:
// 4 KiB rows, dst = src + 16 MiB + 16: 8.8 ms vs 2.5 ms at + 0 or + 32; a plain vector loop:
// 2.8 ms). The fused scatter of a 16 MiB float32 array ran 2x slower because of it.
inline bool aliased_ahead(const char* dst, const char* src) {
    const uint64_t d = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
    return d != 0 && d < 64;
}

// A contiguous copy by 64-byte blocks (vector loads and stores, no "rep movsb").
inline void copy_blocks(char* dst, const char* src, int64_t bytes) {
    int64_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
        char block[64];
        std::memcpy(block, src + i, 64);
        std::memcpy(dst + i, block, 64);
    }
    if (i < bytes) std::memcpy(dst + i, src + i, size_t(bytes - i));
}

// Copies `count` elements of `itemsize` bytes from src (byte stride ss) to dst (stride ds).
inline void copy_run(char* dst, int64_t ds, const char* src, int64_t ss, int64_t count, int64_t itemsize) {
    if (count == 1 || (ds == itemsize && ss == itemsize)) {
        const int64_t bytes = count * itemsize;
        if (bytes >= 1024 && aliased_ahead(dst, src)) return copy_blocks(dst, src, bytes);
        std::memcpy(dst, src, size_t(bytes));
        return;
    }
    // Strided, or a fill: a fixed-size copy per element, not a call.
    auto strided = [&](auto n) {
        constexpr size_t N = decltype(n)::value;
        if (ss == 0) {
            // A stride-0 source (a broadcast value, such as the zeros that the backward of a
            // gather scatters into): its value read once. Read in the loop, it was read again
            // after every store (which, for all the compiler knows, may change it), an
            // element at a time (docs/performance.md, "Stop 34"). With no element to copy,
            // src need not point at one (an empty array's one-byte allocation).
            if (count <= 0) return;
            unsigned char v[N];
            std::memcpy(v, src, N);
            if (ds == int64_t(N) && std::all_of(v, v + N, [](unsigned char b) { return b == 0; })) {
                std::memset(dst, 0, size_t(count) * N);
                return;
            }
            for (int64_t k = 0; k < count; ++k) std::memcpy(dst + k * ds, v, N);
            return;
        }
        for (int64_t k = 0; k < count; ++k) std::memcpy(dst + k * ds, src + k * ss, N);
    };
    switch (itemsize) {
        case 1: return strided(std::integral_constant<size_t, 1>{});
        case 2: return strided(std::integral_constant<size_t, 2>{});
        case 4: return strided(std::integral_constant<size_t, 4>{});
        case 8: return strided(std::integral_constant<size_t, 8>{});
        case 16: return strided(std::integral_constant<size_t, 16>{});
        default:
            for (int64_t k = 0; k < count; ++k) std::memcpy(dst + k * ds, src + k * ss, size_t(itemsize));
    }
}

// fn(lo, hi) over contiguous ranges that cover [0, n) elements of `itemsize` bytes, on the
// kernels' threads: one range per 8 * kParallelGrain bytes, at most 64 (none when n is 0).
template <class Fn> void parallel_ranges(int64_t n, int64_t itemsize, Fn&& fn) {
    if (n == 0) return;
    const int parts = int(std::min<int64_t>(64, std::max<int64_t>(1, n * itemsize / (kParallelGrain * 8))));
    parallel_parts(parts, [&](int part) {
        auto [lo, hi] = split_range(n, part, parts);
        fn(lo, hi);
    });
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
    char* base[2] = {dst, const_cast<char*>(src)};
    parallel_ranges(volume(s.shape, s.ndim), itemsize, [&](int64_t lo, int64_t hi) {
        for_each_run(s, base, lo, hi, [&](char* const* p, int64_t count, const int64_t* inner) {
            copy_run(p[0], inner ? inner[0] : itemsize, p[1], inner ? inner[1] : itemsize, count, itemsize);
        });
    });
}

// n float32 values into float16 or bfloat16 (H), rounded to nearest even, as NumPy's and
// ml_dtypes' casts round them, NaNs included (float_to_half_numpy, float_to_bf16): the
// gradients of 16-bit data, computed in float32, end here. On the kernels' threads, with F16C
// or AVX2 where the CPU has them. Stop 48, a Zen 3 virtual machine: NumPy's cast to float16
// took 27-42 ms for 6.4M values (one element at a time), ml_dtypes' to bfloat16 7.7 ms. With
// widen below, in one process with NumPy's casts and these in turn, six rounds of medians of
// five, two threads, the vjp_max shapes (100 000 x 32 data, 200 000 x 32 random indices):
// float16 max 167.3 -> 88.9 ms, mul 321.7 -> 205.6, the gather's backward 66.8 -> 28.7 (each
// faster in 6 of 6); bfloat16 98.2 -> 80.6 (5 of 6), 256.8 -> 160.6 (6 of 6), 33.6 -> 25.9 (5
// of 6). Results bitwise the same.
template <class H> void narrow(H* dst, const float* src, int64_t n) {
    parallel_ranges(n, int64_t(sizeof(float)), [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi;) {
            int64_t done = 0;
#ifdef SCATTERX_HAVE_F16C_PATH
            if constexpr (std::is_same_v<H, float16>) {
                if (cpu_has_f16c()) done = narrow_f16_f16c(dst + k, src + k, hi - k);
            } else {
                if (cpu_has_avx2()) done = narrow_bf16_avx2(dst + k, src + k, hi - k);
            }
#endif
            k += done;
            // One by one: the tail, or sixteen values around a NaN.
            for (const int64_t end = std::min(hi, k + 16); k < end; ++k)
                dst[k].bits = std::is_same_v<H, float16> ? float_to_half_numpy(src[k]) : float_to_bf16(src[k]);
        }
    });
}

// n float16 or bfloat16 values (H) into float32, exactly, NaNs with their payload (as NumPy's and
// ml_dtypes' casts: half_to_float, bf16_to_float): the float32 compute type of their gradients
// starts here. On the kernels' threads; float16 with F16C where the CPU has it.
template <class H> void widen(float* dst, const H* src, int64_t n) {
    parallel_ranges(n, int64_t(sizeof(float)), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<H, bfloat16>) {
            for (int64_t k = lo; k < hi; ++k) dst[k] = bf16_to_float(src[k].bits);  // vectorised
        } else {
            for (int64_t k = lo; k < hi;) {
#ifdef SCATTERX_HAVE_F16C_PATH
                if (cpu_has_f16c()) k += widen_f16_f16c(dst + k, src + k, hi - k);
#endif
                for (const int64_t end = std::min(hi, k + 16); k < end; ++k) dst[k] = half_to_float(src[k].bits);
            }
        }
    });
}

// Geometry of one scatter or gather call, in the iteration space of `indices`.
// Arrays: 0 = the array indexed by the index values (scatter: out; gather: data),
//         1 = indices, 2 = the array walked in step (scatter: updates; gather: out),
//         3 = the source that array 0 is a copy of, when a kernel fuses that copy (scatter: data;
//             backward of "none": the output gradient); else array 0's own strides.
struct Geometry {
    Strided<4> s;
    int axis;             // position of the axis in s (after coalescing)
    int64_t axis_stride;  // byte stride of array 0 along the axis
    int64_t axis_size;    // length of array 0 along the axis
    int64_t src_axis_stride;  // byte stride of array 3 along the axis
};

inline Geometry make_geometry(const int64_t* ishape, int ndim, int axis, const int64_t* strides0,
                              const int64_t* istrides, const int64_t* strides2, int64_t axis_size,
                              const int64_t* strides3 = nullptr) {
    if (!strides3) strides3 = strides0;
    Geometry g;
    g.s.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
        g.s.shape[d] = ishape[d];
        // Along the axis arrays 0 and 3 are addressed by the index value, not by the position.
        g.s.stride[0][d] = d == axis ? 0 : strides0[d];
        g.s.stride[1][d] = istrides[d];
        g.s.stride[2][d] = strides2[d];
        g.s.stride[3][d] = d == axis ? 0 : strides3[d];
    }
    g.axis_stride = strides0[axis];
    g.src_axis_stride = strides3[axis];
    g.axis_size = axis_size;
    g.axis = coalesce(g.s, axis);
    return g;
}

// Whether every fiber of array 0 is visited by some fiber of `indices` (equal extents on every
// non-axis dimension): then a kernel can copy array 0 fiber by fiber as it goes.
inline bool covers_all_fibers(const int64_t* ishape, const int64_t* shape0, int ndim, int axis) {
    for (int d = 0; d < ndim; ++d)
        if (d != axis && ishape[d] != shape0[d]) return false;
    return true;
}

// One unsigned compare: v in [-size, size).
template <class I> inline bool in_bounds(I v, int64_t size) {
    return uint64_t(int64_t(v)) + uint64_t(size) < 2 * uint64_t(size);
}
template <class I> inline int64_t normalise(I v, int64_t size) {
    int64_t x = int64_t(v);
    return x < 0 ? x + size : x;
}

// Calls f(j, v) for each j in [0, n) with the normalised value v of index iv[j] in [0, size);
// an out-of-bounds index is skipped and sets `bad`. The check sits in the same loop as the
// work, as one predictable branch: a separate pass over the indices (or a vectorised reduction,
// which on baseline x86-64 has no 64-bit vector compare) measured slower.
template <class F> [[gnu::always_inline]] inline void on_index(int64_t j, int64_t v, int64_t size, bool& bad, F& f) {
    if (uint64_t(v) < uint64_t(size)) [[likely]]
        f(j, v);
    else if (v < 0 && v >= -size)
        f(j, v + size);
    else
        bad = true;
}
template <class I, class F> inline void each_index(const I* iv, int64_t n, int64_t size, bool& bad, F&& f) {
    for (int64_t j = 0; j < n; ++j) on_index(j, int64_t(iv[j]), size, bad, f);
}
// each_index, and with `ahead` (the indices of a later row, or null) also pf(j, w) for every
// in-bounds ahead[j], w normalised, just before f(j, ...): the later row's requests spread over
// this row's work. Issued as a burst, a row's requests at once, they fill the core's miss
// buffers and the walk waits on the prefetch instructions themselves (in a profile of vjp_max,
// whose walks still ask that way, a third of the samples fall just after them; the same spread
// there showed no gain, docs/performance.md).
template <class I, class F, class P>
inline void each_index_ahead(const I* iv, const I* ahead, int64_t n, int64_t size, bool& bad, F&& f, P&& pf) {
    if (!ahead) return each_index(iv, n, size, bad, f);
    for (int64_t j = 0; j < n; ++j) {
        int64_t w = int64_t(ahead[j]);
        w += w < 0 ? size : 0;
        if (uint64_t(w) < uint64_t(size)) pf(j, w);
        on_index(j, int64_t(iv[j]), size, bad, f);
    }
}
// The bits in which some of `width` contiguous indices at ip differs from the first: a loop
// without an exit, which the compiler vectorises (XOR with the first, OR of the results).
template <class I> inline std::make_unsigned_t<I> row_differ(const char* ip, int64_t width) {
    using U = std::make_unsigned_t<I>;
    const U* row = reinterpret_cast<const U*>(ip);
    const U first = row[0];
    U differ = 0;
    for (int64_t k = 1; k < width; ++k) differ |= row[k] ^ first;
    return differ;
}
// Whether `n` indices at byte stride `st` all equal the first (a row of the expanded index of
// message passing). A random row fails at its second element; the rest of a contiguous row is
// compared by row_differ, of a strided one element by element.
template <class I> inline bool all_equal(const char* ip, int64_t n, int64_t st) {
    if (n < 2) return true;
    const I first = *reinterpret_cast<const I*>(ip);
    if (*reinterpret_cast<const I*>(ip + st) != first) return false;
    if (st == int64_t(sizeof(I))) return row_differ<I>(ip, n) == 0;
    for (int64_t k = 2; k < n; ++k)
        if (*reinterpret_cast<const I*>(ip + k * st) != first) return false;
    return true;
}

// The fiber space of a geometry: the non-axis dimensions; its last one is the inner loop.
struct FiberSpace {
    Strided<4> f;
    int64_t nfib;
    int64_t na;       // length of every fiber (indices' axis length)
    int64_t astr[4];  // per-array byte strides along the axis (0 for arrays 0 and 3)
};

inline FiberSpace fiber_space(const Geometry& g) {
    FiberSpace fs;
    const Strided<4>& s = g.s;
    fs.f.ndim = 0;
    for (int d = 0; d < s.ndim; ++d) {
        if (d == g.axis) continue;
        fs.f.shape[fs.f.ndim] = s.shape[d];
        for (int k = 0; k < 4; ++k) fs.f.stride[k][fs.f.ndim] = s.stride[k][d];
        ++fs.f.ndim;
    }
    fs.nfib = volume(fs.f.shape, fs.f.ndim);
    fs.na = s.shape[g.axis];
    fs.astr[0] = 0;
    fs.astr[1] = s.stride[1][g.axis];
    fs.astr[2] = s.stride[2][g.axis];
    fs.astr[3] = 0;
    return fs;
}

// Pieces per thread that parallel_blocks cuts a call into, handed out as threads come free.
// (1: one piece per thread, the static split that scatterx used until stop 37.)
inline int& pieces_per_thread() {
    static int pieces = 8;
    return pieces;
}

// Runs body(p, count, inner_strides, xpart, xparts) over the fparts x xparts parts of a call
// (choose_parts: one per thread): fparts split the fibers into contiguous ranges, xparts the
// axis positions, which the body splits with split_range(na, xpart, xparts). Each part is cut
// into up to pieces_per_thread() pieces (never below one fiber, one axis position, or
// kParallelGrain elements of na x nfib), handed out by parallel_parts. A piece holds whole
// fibers or whole runs of axis positions, so it computes the same whichever thread runs it.
// Where neighbouring fibers share cache lines (an outer axis: the inner fiber dimension is
// the array's last), the pieces hold whole runs of that dimension, so that no two threads
// write one line and each call of body still covers a whole run; with fewer runs than parts,
// the parts are not cut (each further cut would walk the same rows of indices once more:
// vjp_max, 32 fibers of 200000 x 32, took 213 -> 313 ms cut into 16 pieces).
// Each call of body covers `count` consecutive fibers along the inner fiber dimension.
template <class Body>
void parallel_blocks(const FiberSpace& fs, char* const base[4], int fparts, int xparts, Body&& body) {
    const int last = fs.f.ndim - 1;
    const int64_t run = last >= 0 ? fs.f.shape[last] : 1;
    const bool adjacent =
        last >= 0 && (std::abs(fs.f.stride[0][last]) < 64 || std::abs(fs.f.stride[2][last]) < 64);
    const bool whole_runs = adjacent && fs.nfib / run >= fparts;
    const int64_t unit = whole_runs ? run : 1;  // fibers per unit
    const int64_t cap = std::max<int64_t>(1, fs.nfib * fs.na / kParallelGrain);
    auto cut = [&](int parts, int64_t most) {
        if (parts <= 1) return parts;
        const int64_t want = int64_t(parts) * std::max(1, pieces_per_thread());
        return int(std::max<int64_t>(parts, std::min({want, most, cap})));
    };
    const int64_t units = fs.nfib / unit;
    if (whole_runs || !adjacent) fparts = cut(fparts, units);
    xparts = cut(xparts, fs.na);
    static const int64_t zero[4] = {0, 0, 0, 0};
    parallel_parts(fparts * xparts, [&](int part) {
        const int fp = part / xparts, xp = part % xparts;
        auto [lo, hi] = split_range(units, fp, fparts);
        for_each_run(fs.f, base, lo * unit, hi * unit, [&](char* const* p, int64_t count, const int64_t* inner) {
            body(p, count, inner ? inner : zero, xp, xparts);
        });
    });
}

// How to split `work` elements over `nfib` fibers: by fibers when there are enough of them,
// otherwise along the second dimension (gather: axis positions are independent).
inline std::pair<int, int> choose_parts(int64_t nfib, int64_t work) {
    const int threads = ThreadPool::instance().num_threads();
    if (work < kParallelGrain || threads <= 1) return {1, 1};
    const int useful = int(std::min<int64_t>(threads, std::max<int64_t>(1, work / kParallelGrain)));
    if (nfib >= useful) return {useful, 1};
    return {1, useful};
}

// The fused copy alone (no updates along the axis): every fiber of array 3 into array 0.
inline void fused_copy_only(const Geometry& g, const FiberSpace& fs, char* const base[4], int64_t itemsize) {
    const int fparts = choose_parts(fs.nfib, fs.nfib * g.axis_size).first;
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        for (int64_t k = 0; k < count; ++k)
            copy_run(p[0] + k * in[0], g.axis_stride, p[3] + k * in[3], g.src_axis_stride, g.axis_size, itemsize);
    });
}

// How far ahead the kernels prefetch random targets: rows (row-wise walk) and elements (fiber walk).
inline constexpr int64_t kPrefetchRows = 8;
// Rows of indices and updates read ahead where a thread walks a part of each row (scatter_rows,
// the backward of max and min). 32 until stop 59; then, the Intel virtual machine (family 6
// model 167), one build with a switch, one process, two threads, rounds of medians of nine calls,
// bits the same: 32 / 12 / 16 rows, `max0` 21.02 / 19.50 / 19.75 ms, `max0_bf16` 19.50 / 18.01 /
// 18.48, `max0_i32` 18.72 / 18.32 / 18.02 (16 faster than 32 in 8 of 8 rounds each); `vjp_max`
// 59.85 -> 57.94, `vjp_min` 62.29 -> 61.35 (6 of 6 each). Not as close as kPrefetchRows: at 4
// or 8 rows, `max0` took 28.5 / 27.7 ms (our reading: the random targets of a row are then asked
// for before its indices have come).
inline constexpr int64_t kStreamRows = 16;
inline constexpr int64_t kOwnBlock = 256;  // rows whose own target rows a thread lists at a time
inline constexpr int64_t kOwnAhead = 16;   // a thread's own rows asked for ahead, at least
// Bytes of a thread's own rows asked for ahead (scatter_by_target_rows): narrower rows than
// 256 bytes go further than kOwnAhead rows, up to 4 * kOwnAhead. Stop 44, the Zen 5 machine,
// one build with a switch, one process, eight rounds of medians of seven calls, two threads:
// mp_add_f16 (rows of 128 bytes) 3.71 -> 3.08 ms (faster in 8 of 8) with 32 rows ahead, and
// 3.31 -> 2.87 (8 of 8; 6144 / 8192 / 12288 bytes 2.88 / 2.96 / 2.91); mp_add_bf16 3.77 -> 3.33
// (6 of 8), 3.30 -> 3.02 (6 of 8; 3.14 / 3.29 / 3.22); mp_add (256 bytes) 24 / 32 / 48 rows
// 4.91 / 4.97 / 4.90 against 4.96 with 16, within the rounds' spread (16 rows again: 4.96
// against 5.18, faster in 6 of 8). On Intel's CPUs half as far (own_ahead_bytes): stop 61, the
// Intel virtual machine (family 6 model 167), one build with a switch, one process, two
// threads, rounds of medians of nine calls, bits the same, 4096 / 2048 bytes: mp_add_f16 4.13 /
// 3.98 ms (faster in 7 of 8 rounds), mp_add_bf16 4.23 / 4.09 (6 of 6) and 3.89 / 3.83 (7 of 8);
// mp_add (rows of 256 bytes) 8 rows instead of 16: 9.86 / 9.85 (4 of 6) and 8.53 / 8.75 (4 of
// 8), so no fewer than kOwnAhead rows as before; 24 or 32 rows slower (10.56, 11.24; 1 of 6).
inline constexpr int64_t kOwnAheadBytes = 4096;
inline constexpr int64_t kPrefetchAhead = 16;
inline constexpr int64_t kCacheBytes = int64_t(2) << 20;
// Whether the CPU is Intel's: the prefetching of random targets measured differently on the
// Intel machines (stops 19-21 and 35) and the Zen 3 (stops 1-18, 22-34); see its uses.
inline bool cpu_is_intel() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    static const bool intel = __builtin_cpu_is("intel");
    return intel;
#else
    return false;
#endif
}

// Bytes of a thread's own rows asked for ahead (see kOwnAheadBytes).
inline int64_t own_ahead_bytes() { return cpu_is_intel() ? kOwnAheadBytes / 2 : kOwnAheadBytes; }

// Whether lines read once in a large call (a materialised index's rows and their update rows in
// scatter_by_target_rows, and its check, constant_rows) are asked for with the non-temporal hint:
// on CPUs other than Intel's (measured on the Zen 3; on the Intel machine of stop 57 it was
// slower, see scatter_by_target_rows). Tests and measurements set it.
inline bool& read_once_non_temporal() {
    static bool on = !cpu_is_intel();
    return on;
}

// The CPU family (CPUID leaf 1: the base family, plus the extended family when the base is 15),
// for AMD CPUs; 0 for others and where unknown. Zen 3 and Zen 4 are family 25, Zen 5 26.
inline int amd_cpu_family() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const int family = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
        const int base = int((a >> 8) & 15);
        return base == 15 ? base + int((a >> 20) & 255) : base;
    }();
    return family;
#else
    return 0;
#endif
}

// A fiber of array 0 up to this many bytes, dense along the axis, is prefetched whole while the
// fiber before it is worked on (its elements are then read in random order, but from cache).
inline constexpr int64_t kSpanBytes = int64_t(64) << 10;
inline constexpr int64_t kSpanAhead = 2;
// Without a fused copy (out=data), the target rows of a block of fibers are not in the cache
// when random updates reach them, one line at a time from memory. A region that fits in the
// cache and gets more updates than it has lines is read in first (a middle-axis mul,
// 64 slabs of 512 x 128 float32 with 256 x 128 updates each, out=data: 8.5-8.8 -> 6.0-6.5 ms;
// with a fresh output the fused copy does it: 5.7-7.3 ms). For one fiber of 4 KB (1024 float32,
// 256 updates) reading it in first gained nothing clear: its 64 misses overlap anyway. Read in
// order until stop 28, now as interleaved runs (read_rows_in, below).
inline constexpr int64_t kWarmBytes = int64_t(256) << 10;
inline bool warm_worthwhile(int64_t region_bytes, int64_t updates) {
    return region_bytes <= kWarmBytes && updates >= region_bytes / 64;
}
// Reads one byte of every cache line of [p, p + bytes) (none outside it).
inline void warm_lines(const char* p, int64_t bytes) {
    if (bytes <= 0) return;
    uint64_t sink = *reinterpret_cast<const volatile uint8_t*>(p);
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes);
    for (uintptr_t a = (reinterpret_cast<uintptr_t>(p) | 63) + 1; a < end; a += 64)
        sink += *reinterpret_cast<const volatile uint8_t*>(a);
    asm volatile("" : : "r"(sink));
}
// A region is read in as this many runs at once, a row of each in turn: on the Zen 3 machine one
// core reads one sequential run at 4.7-7.6 GB/s and four interleaved runs at 8.7-10.3 (two
// threads each reading 256 KB regions: 10.7-13.5 against 13.6-16.2 GB/s; stop 28, standalone,
// medians of seven). In scatterx, one process, the ways alternating, 40 rounds of medians of
// nine calls: gather_mid 4.28 -> 3.96 ms (faster in 25 rounds), mid_mul with out=data 7.85 ->
// 7.50 ms (31 rounds). The same order for the gather's rows of indices (gather_mid 5.30 -> 5.98
// ms, slower in 7 of 8 rounds) and for the pass over G of the mul backward (vjp_mul 11.78 ->
// 11.42, faster in 4 of 8), or G and D read in so before that pass (11.23 -> 12.00, slower in 17
// of 24), did not win.
// Eight runs instead of four: gather_mid 4.16 -> 4.51 ms (slower in 17 of 24 rounds), mid_mul
// with out=data 7.00 -> 6.83 (faster in 12 of 24).
inline constexpr int64_t kWarmRuns = 4;
// Reads in the `rows` rows of `row_bytes` at `stride` from p, kWarmRuns runs of rows at a time.
inline void read_rows_in(const char* p, int64_t rows, int64_t stride, int64_t row_bytes) {
    const int64_t per = (rows + kWarmRuns - 1) / kWarmRuns;  // rows of each run
    for (int64_t a = 0; a < per; ++a)
        for (int64_t r = a; r < rows; r += per) warm_lines(p + r * stride, row_bytes);
}
// The `rows` rows of `row_bytes` at `stride` from p, read in when worth it for `updates`
// random updates (see above); returns whether it did.
inline bool warm_rows(const char* p, int64_t rows, int64_t stride, int64_t row_bytes, int64_t updates) {
    if (!warm_worthwhile(rows * row_bytes, updates)) return false;
    read_rows_in(p, rows, stride, row_bytes);
    return true;
}

// Every cache line of [p, p + bytes). Always inlined: a function whose only effect is to
// prefetch counts for GCC 12 as one without side effects, and where it is not inlined early its
// calls are deleted as dead code (stop 33: the list walk of scatter_by_target_rows, moved into
// a template function of its own, lost every prefetch, and mp_add took 11-15 ms instead of 6;
// in the module as it is, every call was inlined: as many prefetch instructions either way).
// `Locality` is the hint: 3 into every level of the cache, kNonTemporal (prefetchnta) for lines
// read once that should not push others out of the cache (see scatter_by_target_rows).
inline constexpr int kNonTemporal = 0;
template <int Locality = 3> [[gnu::always_inline]] inline void prefetch_lines(const char* p, int64_t bytes) {
    if (bytes <= 0) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63);
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes);
    for (uintptr_t a = first; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, Locality);
}
// Lines read once, with the non-temporal hint where `non_temporal` (read_once_non_temporal), else
// into every level.
[[gnu::always_inline]] inline void prefetch_read_once(const char* p, int64_t bytes, bool non_temporal) {
    if (non_temporal) prefetch_lines<kNonTemporal>(p, bytes);
    else prefetch_lines(p, bytes);
}

// Frees a buffer of std::aligned_alloc.
struct FreeBuffer {
    void operator()(char* q) const { std::free(q); }
};

// Per-thread scratch of at least `bytes`, 64-byte aligned, kept for the thread's next calls (a
// pool worker's lives as long as the pool). Null when it cannot be allocated: it is called on
// the pool's workers, where an exception would end the process, so the caller falls back or
// reports it after the parallel region.
inline char* thread_scratch(int64_t bytes) {
    thread_local std::unique_ptr<char, FreeBuffer> buffer;
    thread_local int64_t held = 0;
    if (held < bytes) {
        const int64_t rounded = (bytes + 63) / 64 * 64;
        buffer.reset(static_cast<char*>(std::aligned_alloc(64, size_t(rounded))));
        held = buffer ? rounded : 0;
        if (!buffer) return nullptr;
    }
    return buffer.get();
}

// Streaming stores. A store to a line that is not in the cache first reads the line from
// memory (to own it), so writing an output larger than the cache moves its bytes twice; a
// non-temporal store writes the whole line without reading it, as the copy that measures the
// bandwidth (memcpy of large arrays) does. A call whose arrays together (the bytes it reads and
// writes) exceed the threshold below cannot keep its output in the cache through the call; it
// writes the output this way: a gather directly, in order; a scatter whose fused copy works a
// block of fibers at a time in a scratch (stage_rows). Measured in one process, the two ways
// alternating (two threads, medians of 11-15 samples): gathers of 1e7 float64 from 1e5,
// 14.7 / 16.4 / 18.0 -> 13.4 / 13.9 / 15.8 ms in three rounds; of the message-passing rows
// (400000 x 64 float32) 14.3 -> 11.8 ms, in a later round 8.8 -> 8.6, with int32 indices
// 13.5 -> 9.2 and 9.5 -> 8.8 ms; of 200000 x 32 from 100000 x 32 float32 (89 MB in all) a
// tie; of 64 x 256 x 128 from 64 x 512 x 128 float32 (42 MB, so it streams) 6.5 / 7.5 -> 6.8 /
// 7.6 ms when first measured, a tie in stop 17 (4.13 -> 4.01 ms, medians of eight rounds,
// plain stores against streaming ones in one process). 16-byte streaming stores gained
// nothing over 8-byte ones; elements of 1 or 2 bytes are stored as usual.
// The threshold is the smaller of the last-level cache that the first CPU shares, as Linux
// reports it (/sys/devices/system/cpu/cpu0/cache), and kStreamBytes (32 MiB): a call whose arrays
// together exceed it writes its output by streaming stores. On the Zen 3 machine where the
// figures above were measured the two agree (the L3 of its core complex; sysconf reports the
// whole socket's 256 MB). A virtual machine's reported L3 is its host socket's, shared with
// other guests, and what it is worth to a guest has gone both ways:
// - stop 19, an Emerald Rapids virtual machine (300 MB reported): arrays of 40-320 MB stayed
//   in the cache and streaming stores measured slower (gathers of the middle axis 2.71 -> 1.98
//   ms, of the message-passing rows 10.3 -> 9.0, of 1e7 from 1e5 11.2 -> 9.4; the update
//   gradient of "add" 11.0 -> 9.5; medians of five rounds, plain stores against streaming ones
//   in one process);
// - stops 35-36, an Intel virtual machine (105 MB reported): outputs of 16 MB went out faster by
//   streaming stores (one process, the two thresholds in turn, twelve rounds of medians of
//   seven calls, two threads: vjp_none 4.34 -> 3.57 ms and mid_mul 5.38 -> 4.88, faster in 12
//   of 12 each, vjp_mul 15.5 -> 12.5, 7 of 12), but gather_max0 (89 MB in all) was slower
//   streaming, 43.1 -> 47.3 ms, in 11 of 12, so until stop 57 the gathers kept the reported
//   cache and only the scatter side's bulk writes took the cap;
// - stop 57, an Intel virtual machine (family 6 model 167, AVX-512, 2 MB of L2 per core, 480 MB
//   of L3 reported): every gather faster streaming from 32 MB, medians of six rounds of medians
//   of nine calls, the thresholds in turn in one process, faster in 6 of 6 rounds each, bits
//   the same: gather_max0 25.49 -> 11.88 ms, gather_mp 8.99 -> 6.09, gather_mp_i32 8.76 ->
//   4.85, vjp_add 9.37 -> 6.12, gather_mp_dense 21.03 -> 16.34, gather_hist 6.68 -> 5.75,
//   gather_mid 1.33 -> 1.18, vjp_gather 10.28 -> 9.92.
// The losses measured where the reported cache held (10-40 %) are smaller than this gain, and a
// guest cannot tell how much of its host's cache is its own, so one threshold serves every write.
inline constexpr int64_t kStreamBytes = int64_t(32) << 20;
// The size in bytes of the highest-level data or unified cache of CPU 0, or 0 if unknown.
inline int64_t last_level_cache_bytes() {
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; ++i) {
        std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
        int level = 0;
        std::string type, size;
        if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
        if (type == "Instruction" || size.empty() || level < best_level) continue;
        char* end = nullptr;
        int64_t n = std::strtoll(size.c_str(), &end, 10);
        int64_t unit = *end == 'K' ? int64_t(1) << 10 : *end == 'M' ? int64_t(1) << 20 : *end == 'G' ? int64_t(1) << 30 : 1;
        if (n > 0) best = n * unit, best_level = level;
    }
    return best;
}
// The threshold in force (tests lower it to reach the streaming paths with small arrays).
inline int64_t& stream_bytes() {
    static int64_t bytes = [] {
        const int64_t llc = last_level_cache_bytes();
        return llc > 0 ? std::min(llc, kStreamBytes) : kStreamBytes;
    }();
    return bytes;
}
inline bool streams(int64_t footprint) { return footprint > stream_bytes(); }
// Whether streaming stores move whole 64-byte lines (AVX-512) where a line of the output is
// whole: a CPU with AVX-512F whose system saves its registers (what __builtin_cpu_supports
// checks), unless a test has turned it off. A write-combining buffer then fills by one store
// instead of four: standalone, two threads, 64 MB copied by 4 KB rows (dst 16 bytes past a
// line) on the Intel machine of stop 41 (AVX-512, 2 MB L2 per core): 16-byte stores 7.46 ms,
// 64-byte 5.66 (medians of eight rounds, faster in each). In scatterx, one process, the two
// ways in turn: gather_mp 14.30 -> 12.22 ms (faster in 12 of 12 rounds), vjp_add 14.15 ->
// 12.60 (10 of 12), mid_mul 4.94 -> 4.50 (16 of 20); the staged writes of rows_none and
// vjp_none no faster (docs/performance.md, stop 41). The module is built for baseline x86-64,
// so these stores are written in assembly (stream_line_wide) and chosen at run time.
inline bool wide_stores_supported() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return cpu_has_avx512f();
#else
    return false;
#endif
}
inline bool& wide_stores() {
    static bool on = wide_stores_supported();
    return on;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The 64 bytes at src to dst (64-byte aligned) by one streaming store, through zmm16, or (Part)
// 16 bytes through xmm17 (an EVEX encoding: no SSE instruction runs between the 64-byte stores
// of a row). Code compiled for baseline x86-64 has no use for registers 16-31; where the
// compiler may use them (a build for AVX-512), they are named as clobbered. After the 64-byte
// stores of a call, stream_lines_done zeroes zmm16's upper bits, so that no register is left
// with dirty upper bits for the SSE code that follows.
struct alignas(64) StreamLine {
    char b[64];
};
struct alignas(16) StreamPart {
    char b[16];
};
#if defined(__AVX512F__)
#define SCATTERX_WIDE_CLOBBER(r) : r
#else
#define SCATTERX_WIDE_CLOBBER(r)
#endif
[[gnu::always_inline]] inline void stream_line_wide(char* dst, const char* src) {
    asm volatile("vmovdqu64 %1, %%zmm16\n\tvmovntdq %%zmm16, %0"
                 : "=m"(*reinterpret_cast<StreamLine*>(dst))
                 : "m"(*reinterpret_cast<const StreamLine*>(src)) SCATTERX_WIDE_CLOBBER("xmm16"));
}
[[gnu::always_inline]] inline void stream_part_wide(char* dst, const char* src) {
    asm volatile("vmovdqu64 %1, %%xmm17\n\tvmovntdq %%xmm17, %0"
                 : "=m"(*reinterpret_cast<StreamPart*>(dst))
                 : "m"(*reinterpret_cast<const StreamPart*>(src)) SCATTERX_WIDE_CLOBBER("xmm17"));
}
[[gnu::always_inline]] inline void stream_lines_done() {
    asm volatile("vpxord %%xmm16, %%xmm16, %%xmm16" : : SCATTERX_WIDE_CLOBBER("xmm16"));
}
#undef SCATTERX_WIDE_CLOBBER
#endif
// `bytes` from src to dst, the 16-byte aligned part of dst by streaming stores, whole lines by
// 64-byte stores where wide_stores(). Always inlined,
// with no library call for an end that is already aligned: the gather of the message-passing rows
// (400000 x 64 float32 from 50000 x 64) calls it once per row, and out of line, with a call to
// memcpy for each (empty) end, it took 12.1-14.4 ms on two threads against 6.8-7.2 ms inlined
// (stop 31, three rounds of old and new builds in alternating processes, medians of seven); on
// one thread 20 ms, where a plain loop of 16-byte streaming stores over the same arrays, in the
// same process, took 12. The other row copies that use it gained too (docs/performance.md).
[[gnu::always_inline]] inline void stream_copy(char* dst, const char* src, int64_t bytes) {
#if defined(__x86_64__)
    const int64_t head = std::min<int64_t>(bytes, int64_t((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15));
    if (head > 0) std::memcpy(dst, src, size_t(head));
    int64_t b = head;
#if defined(__GNUC__) || defined(__clang__)
    if (wide_stores() && bytes - b >= 64) {
        // 16-byte parts up to the first whole line, the lines, the 16-byte parts after them.
        const int64_t lead = std::min<int64_t>((bytes - b) & ~int64_t(15),
                                               int64_t(-reinterpret_cast<uintptr_t>(dst + b) & 63));
        const int64_t lines = (bytes - b - lead) >> 6, parts = ((bytes - b - lead) & 63) >> 4;
        for (int64_t q = 0; q < lead; q += 16) stream_part_wide(dst + b + q, src + b + q);
        b += lead;
        for (int64_t q = 0; q < lines; ++q, b += 64) stream_line_wide(dst + b, src + b);
        for (int64_t q = 0; q < parts; ++q, b += 16) stream_part_wide(dst + b, src + b);
        stream_lines_done();
    }
#endif
    for (; b + 64 <= bytes; b += 64)
        for (int64_t q = 0; q < 64; q += 16)
            _mm_stream_si128(reinterpret_cast<__m128i*>(dst + b + q),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b + q)));
    for (; b + 16 <= bytes; b += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + b), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b)));
    if (b < bytes) std::memcpy(dst + b, src + b, size_t(bytes - b));
#else
    std::memcpy(dst, src, size_t(bytes));
#endif
}
// Orders a thread's streaming stores before what follows (the pool's completion signal).
inline void stream_fence() {
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

// One long contiguous fiber (a 1-D histogram) must run on one thread to keep its order. A second
// thread, when there is one, reads ahead of it instead: one element per cache line of the index
// and update streams, at most kReadLeadBytes ahead of the progress the first thread publishes,
// so those streams arrive from the other core's cache rather than from memory. It writes
// nothing, so results are exactly those of one thread. Measured on the 2-core machine (1e7
// float64 updates into 1e5 bins, 3 runs): 21-28 ms alone, 15-22 ms with the reader; leads of
// 512 KB and more gained less (the lines leave the reader's cache before they are used).
inline constexpr int64_t kReadAheadMin = int64_t(1) << 20;  // fiber length that gets a reader
inline constexpr int64_t kReadLeadBytes = int64_t(256) << 10;
inline constexpr int64_t kProgressStep = 8192;              // elements between progress stores

// A contiguous fiber whose targets fit in the cache (a 1-D histogram) asks for its index and
// update streams kFiberStreamAhead elements ahead, kFiberStreamBlock elements at a time: the
// hardware prefetcher alone let the ordered adds wait on the streams. Stop 43, a Zen 5 virtual
// machine (1 MB of L2 per core, 32 MB of L3; one thread reads the two streams of hist_add,
// 160 MB, in 7.5 ms), one build with a switch, three processes of three rounds, medians of five
// calls: hist_add on one thread 13.7 / 14.0 / 13.8 -> 8.2 / 8.2 / 7.7 ms at 256 elements ahead
// (128: 9.7-12.0, 512: 6.9-9.6, 1024: 7.1-9.3), on two threads (with the reader) 8.9 / 7.5 /
// 14.5 -> 6.4 / 6.5 / 8.6; hist_add_i32 on one thread 11.5-12.4 -> 6.9-7.0, on two 6.1-7.1 ->
// 6.1-6.2. The reader alone had given two threads 5.7-12.6 ms from one process to the next
// (on one thread always about 14). rows_none (fibers of 256, none asked for) unchanged: 1.00 /
// 1.00 ms, rows_none_i32 0.91 / 0.89, rows_none_f16 0.36 / 0.38 (eight rounds).
// That was on Zen 5. On Zen 3 asking is slower than leaving the streams to the hardware
// prefetcher: stop 49, a Zen 3 virtual machine (512 KB of L2 per core, no AVX-512), one build
// with a switch, one process, ten rounds of medians of five calls, hist_add: two threads (with
// the reader) 26.3 -> 20.7 ms without asking (faster in 10 of 10), one thread 28.8 -> 25.4 (10
// of 10); hist_add_i32 (eight rounds) 26.0 -> 22.9 (8 of 8) and 26.8 -> 24.2 (5 of 8); PyTorch
// 25.7 and 28.9 in the same rounds. Standalone, one thread, eight rounds: every form of asking
// tried was slower than none (21.1 ms): 64 / 256 / 512 elements ahead 23.9 / 24.4 / 26.5, only
// the index or only the updates 22.1 / 23.1, prefetchnta 23.5, prefetcht2 22.1 (256 ahead). So
// the fiber asks where it was measured faster, AMD family 26 and later (fiber_streams_ahead),
// and Intel's CPUs: stop 57, an Intel virtual machine (family 6 model 167, 2 MB of L2 per core),
// one process, the switch in turn, eight rounds of medians of nine calls, two threads, bits the
// same: hist_add 13.81 -> 12.73 ms, hist_add_i32 12.00 -> 11.63 (faster in 8 of 8 each),
// rows_none 1.06 / 1.05 (6 of 8). The distance is Zen 5's; others were not tried there.
inline constexpr int64_t kFiberStreamAhead = 256;
inline constexpr int64_t kFiberStreamBlock = 64;
// Asks for the index and update streams of a fiber of na elements (isize and usize bytes each,
// at ip and up) kFiberStreamAhead elements ahead of the block [b0, b1): the lines of
// [b0 + kFiberStreamAhead, b1 + kFiberStreamAhead), clipped to the fiber. The one-fiber scatter,
// its split by targets and the bench's walk of the streams (probe.h, read_streams_whole) ask so.
[[gnu::always_inline]] inline void ask_fiber_streams_ahead(const char* ip, int64_t isize, const char* up,
                                                          int64_t usize, int64_t b0, int64_t b1, int64_t na) {
    const int64_t a0 = b0 + kFiberStreamAhead, a1 = std::min(na, b1 + kFiberStreamAhead);
    if (a0 < a1) {
        prefetch_lines(ip + a0 * isize, (a1 - a0) * isize);
        prefetch_lines(up + a0 * usize, (a1 - a0) * usize);
    }
}
// The setting in force (tests set it to reach both ways on any machine).
inline bool& fiber_streams_ahead() {
    static bool ahead = amd_cpu_family() >= 26 || cpu_is_intel();
    return ahead;
}
// Whole rows of indices and updates walked along an outer axis (scatter_rows) ask for the rows
// that start about this many elements later, which the hardware prefetcher had left to arrive
// late as well: stop 43, the Zen 5 machine, one build with a switch, one process, eight rounds
// of medians of seven calls: mid_mul (rows of 128, through stage_rows) 2.04 ms -> 1.58 / 1.42 /
// 1.34 / 1.37 with rows 128 / 256 / 512 / 1024 elements ahead (each faster in 8 of 8).
inline constexpr int64_t kRowStreamAhead = 512;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Spins (yielding now and then) until ready() holds.
template <class Ready> inline void wait_until(Ready&& ready) {
    for (int spins = 0; !ready();)
        if (++spins % 1024 == 0) std::this_thread::yield();
        else cpu_relax();
}

inline void read_ahead(const char* ip, int64_t isize, const char* up, int64_t usize, int64_t na,
                       const std::atomic<int64_t>& progress) {
    const int64_t step = std::max<int64_t>(1, 64 / std::max(isize, usize));
    const int64_t lead = kReadLeadBytes / (isize + usize);
    uint64_t sink = 0;
    for (int64_t j = 0; j < na; j += step) {
        if ((j & (kProgressStep - 1)) < step) {
            int64_t done = progress.load(std::memory_order_acquire);
            if (done >= na) break;
            if (j < done) j = done - done % step;  // fallen behind: skip to the work
            if (j - done > lead) {
                wait_until([&] {
                    done = progress.load(std::memory_order_acquire);
                    return j - done <= lead || done >= na;
                });
                if (done >= na) return;
            }
        }
        uint64_t a = 0, b = 0;
        std::memcpy(&a, ip + j * isize, size_t(std::min<int64_t>(isize, 8)));
        std::memcpy(&b, up + j * usize, size_t(std::min<int64_t>(usize, 8)));
        sink ^= a ^ b;
    }
    asm volatile("" : : "r"(sink));
}

// One long contiguous fiber whose targets do not fit in L1 and whose indices spread over them (a
// 1-D histogram of random bins) is split by its targets instead: each of two threads owns half of
// the targets and walks the whole fiber, kOwnListBlock elements at a time, listing the elements
// whose target is its own (list_own_targets) and then applying them in order. Every target gets
// its updates in the fiber's order, on one thread, so the result is the one-thread loop's bit for
// bit. Each thread reads both streams whole (one core reads hist_add's 160 MB in about 9 ms here)
// but applies half the updates, whose read-modify-writes at random bins in L2, not the streams,
// held the one thread up: the loop alone, its positions and values in L1, took 10.6 ms for 1e7
// adds. Stop 62, the Intel virtual machine (family 6 model 167), one build with a switch, one
// process, two threads, eight rounds of medians of nine calls, bits the same, with the reader /
// split: hist_add 13.52 / 11.30 ms, hist_add_i32 12.23 / 9.76 (faster in 8 of 8 each). Six
// rounds of medians of seven: 1e7 float64 adds into 4e6 bins 67.9 / 32.4, float32 max into 1e5
// 13.3 / 11.3, float16 adds (int32 index) into 1e5 37.4 / 22.8 (6 of 6 each); into 1e7 sorted
// indices' 1e5 bins 19.9 / 17.1 (4 of 4). Slower: into 1000 bins (8 KB, in L1) 9.7 / 15.5, and a
// Zipf index (a = 1.3) into 1e5 bins, where one thread owns the busy bins, 11.3 / 15.8 (0 of 6
// each). So the split is taken for tables of more than kSplitFiberBytes whose first
// kSplitSample indices fall at least a quarter into each half (fiber_splits_evenly); the rest
// keep the reader (read_ahead). Blocks of 64 / 256 elements and streams asked for 128 / 512 /
// 1024 elements ahead instead of 128 and 256: hist_add 16.5 / 13.4 and 11.5 / 13.0 / 14.0 ms
// against 11.4 (six rounds). Two threads only: more would each read the whole streams again,
// which was not measured.
// Where the CPU lacks AVX-512 the split lists four elements at a time by AVX2 and is taken only
// where it measured faster than the reader (fiber_split_pays). Stop 66, a Zen 3 virtual machine
// (family 25 model 1, 512 KB of L2 per core, AVX2), one build with a switch, one process, two
// threads, six rounds of medians of seven calls, bits the same, 1e7 updates, reader / split with
// the one-at-a-time listing / split with AVX2's: float64 adds into 1e5 bins 14.54 / 23.17 /
// 16.23 ms (AVX2 faster than the reader in 0 of 6), the same with an int32 index 13.12 / 22.54 /
// 13.42 (1 of 6), float32 adds (int32 index) 11.60 / 21.29 / 11.37 (3 of 6), float16 adds (int32
// index) 16.25 / 23.68 / 13.57 (5 of 6), float32 max 21.23 / 24.76 / 16.12 (6 of 6), float64
// adds into 4e6 bins 88.76 / 95.36 / 73.80 (6 of 6). A second build, reader / AVX2: float64 max
// into 1e5 24.31 / 21.67 (4 of 6), float64 adds into 1e6 bins 24.11 / 19.39 (6 of 6), into 3e5
// 16.79 / 17.81 (0 of 6), float32 adds into 1e5 11.30 / 13.16 (0 of 6), uint8 adds 9.77 / 16.09
// (0 of 6). The module's setting, off / on, eight rounds: bfloat16 adds (int32 index) 21.60 /
// 16.51, float16 16.85 / 13.71 (8 of 8 each). So where a plain add or product into a table that
// fits in L3's share is all an element costs, the second thread reading ahead wins; where the
// step itself costs (max and min, a 16-bit float's conversions) or the table is large, the
// halves do.
// Where the listing is AVX-512's, an update of 8 bytes (float64, int64, uint64, complex64) is
// listed itself beside its target, by the compress that would list its element number: the adds
// then read it from the list rather than from the stream at that number. Stop 74, the Intel
// virtual machine (family 6 model 167), one build with a switch, one process, two threads, eight
// rounds of medians of nine calls, bits the same: hist_add 10.00 -> 9.73 ms (faster in 8 of 8
// rounds), hist_add_i32 8.56 -> 8.37 (5 of 8); an earlier set 10.52 -> 10.21 (7 of 8) and 8.95 ->
// 8.52 (8 of 8). With AVX2's listing (the split forced, six rounds) no gain, 11.57 / 11.49 and
// 9.79 / 9.74 ms, and one at a time a loss, 14.80 / 15.13 and 13.73 / 14.53 (0 of 6 each): those
// list the numbers. Standalone (C++, 1e7 float64 adds into 1e5 bins, two threads, medians of 15),
// two other shapes were slower than the listing as it is: adds of eight at a time by AVX-512
// gathers and scatters, with vpconflictq to send a vector with a repeated bin down the element
// loop (11.6-11.7 ms against 9.9-10.9), and each thread listing half of every chunk for both
// halves of the table, the threads then applying their own from both lists between barriers, so
// that each reads half the streams (11.1-13.8 ms for chunks of 8192 to 65536 elements; the lists
// listed alone, without the adds, took 6.6). docs/performance.md, "Stop 74", has the rest.
// An int32 index into at most INT32_MAX targets is listed sixteen at a time (list_own16_avx512), its
// targets as int32: one compress lists sixteen targets and one more their updates of 4 bytes or
// their element numbers (two their updates of 8 bytes), where eight at a time took two compresses
// for eight and widened each index. Stop 75, the same machine, one build with a switch, one process,
// two threads, 1e7 updates into 1e5 bins, rounds of medians of nine calls, bits the same, eight /
// sixteen at a time: float32 adds 7.84 / 6.61 ms (faster in 8 of 8 rounds), float16 11.20 / 9.75
// (8 of 8), uint8 8.59 / 6.93 (8 of 8), bfloat16 10.00 / 8.79 and float32 max 9.74 / 8.28 (6 of 6
// each); float64 adds no slower (9.19 / 9.28, 2 of 8; 8.99 / 8.66, 8 of 8; hist_add_i32 8.64 /
// 8.67, 4 of 8). An int64 index listed so (two vectors of eight cut to one of sixteen int32) was
// slower: hist_add 10.97 / 11.57 ms (0 of 8), float32 adds 9.00 / 9.33 (2 of 6); it kept eight
// until stop 80 (below).
// Sixteen at a time, updates of 8 bytes are not listed themselves but by their element numbers
// (one compress for sixteen, not two for eight each, and no load of the updates in the listing;
// the adds read them from the block's lines, asked for ahead). Stop 80, the same machine, one
// build with a switch, one process, two threads, 1e7 updates with an int32 index into 1e5 bins,
// rounds of medians of nine calls, bits the same, updates / numbers: hist_add_i32 8.78 / 8.42 ms
// (faster in 8 of 8 rounds), 8.64 / 8.32 (10 of 12), after a copy of 256 MiB 9.22 / 9.20 (6 of 8)
// and 8.67 / 8.69 (6 of 12); float64 max 9.53 / 8.98 (8 of 8), int64 adds 8.06 / 7.56 (6 of 8),
// float64 adds into 1e6 bins 16.51 / 15.67 (7 of 8).
// So listed, an int64 index into at most INT32_MAX targets goes sixteen at a time as well (two
// vectors of eight checked and compared as int64, their targets cut to sixteen int32: one compress
// for the targets and one for the element numbers or the updates of 4 bytes, where eight at a time
// took two for eight). Stop 80, as above, eight / sixteen at a time, 1e7 updates with an int64
// index (negative ones among them) into 1e5 bins: hist_add 10.06 / 9.70 ms (faster in 9 of 10
// rounds) and 9.58 / 9.31 (10 of 10), after a copy 10.82 / 10.65 (7 of 10) and 10.41 / 10.39 (6 of
// 10); float64 adds 10.06 / 9.54, float64 max 11.27 / 10.87, int64 adds 9.97 / 9.38, float32 adds
// 8.34 / 7.89, float64 adds into 1e6 bins 20.34 / 19.17 (8 of 8 rounds each). Beyond INT32_MAX
// targets the listing takes eight at a time (and list_sixteen() off, for tests).
inline constexpr int64_t kOwnListBlock = 128;
inline constexpr int64_t kSplitFiberBytes = int64_t(64) << 10;
inline constexpr int64_t kSplitSample = 4096;
inline constexpr int kSplitFiberParts = 2;
// Beyond this many bytes of targets the split pays without AVX-512 (see kOwnListBlock).
inline constexpr int64_t kSplitLargeBytes = int64_t(4) << 20;
// The setting in force: kSplitNever, kSplitAlways (where the table is beyond kSplitFiberBytes and
// the index spreads evenly), or kSplitByCpu, the default: always where the listing is AVX-512's,
// where fiber_split_pays with AVX2's, never one element at a time. Tests and measurements set it.
enum : int { kSplitNever = 0, kSplitAlways = 1, kSplitByCpu = 2 };
inline int& fiber_split() {
    static int mode = kSplitByCpu;
    return mode;
}
// The vector width, in bits, with which list_own_targets compares indices (eight at a time by
// AVX-512F, four by AVX2, or 0: one at a time) and ascends checks them (sixteen or eight at a time
// by AVX-512F; the elements loop otherwise). Whether the CPU can, and the default: the widest it
// can. Tests set narrower widths to reach every loop on the machine.
inline bool list_width_supported(int bits) {
#ifdef SCATTERX_HAVE_F16C_PATH
    return bits == 0 || (bits == 256 && cpu_has_avx2()) || (bits == 512 && cpu_has_avx512f());
#else
    return bits == 0;
#endif
}
inline int& list_width() {
    static int bits = list_width_supported(512) ? 512 : list_width_supported(256) ? 256 : 0;
    return bits;
}
// Whether AVX-512's listing takes sixteen indices at a time where the targets fit int32
// (list_own16_avx512; see kOwnListBlock); off, it takes eight, as it must beyond INT32_MAX
// targets. Tests turn it off to reach that listing.
inline bool& list_sixteen() {
    static bool on = true;
    return on;
}
// Whether a fiber into `bytes` of targets (beyond kSplitFiberBytes, its index spread) is split by
// its targets under the setting in force and the listing's width (see kOwnListBlock).
template <class T, Reduction R> inline bool fiber_split_pays(int64_t bytes) {
    if (fiber_split() != kSplitByCpu) return fiber_split() == kSplitAlways;
    if (list_width() == 512) return true;
    if (list_width() == 0) return false;
    return R == Reduction::max || R == Reduction::min || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16> ||
           bytes > kSplitLargeBytes;
}

#ifdef SCATTERX_HAVE_F16C_PATH
// list_own_targets eight indices at a time (compress); returns how many indices it did, `m` the
// elements listed. Where `Values`, pos gets the 8 bytes of each listed element's update from uv
// instead of its number.
template <class I, bool Values>
__attribute__((target("avx512f"))) inline int64_t list_own_avx512(const I* iv, const uint64_t* uv, int64_t j0,
                                                                  int64_t n, int64_t size, int64_t lo, int64_t hi,
                                                                  int64_t* tgt, uint64_t* pos, int64_t& m, bool& bad) {
    const __m512i vsize = _mm512_set1_epi64(size), vlo = _mm512_set1_epi64(lo), width = _mm512_set1_epi64(hi - lo);
    const __m512i zero = _mm512_setzero_si512(), eight = _mm512_set1_epi64(8);
    __m512i at = _mm512_add_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi64(j0));
    __mmask8 outside = 0;
    int64_t j = 0, k = m;
    for (; j + 8 <= n; j += 8) {
        __m512i r;
        if constexpr (sizeof(I) == 8) r = _mm512_loadu_si512(iv + j);
        else r = _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(iv + j)));
        r = _mm512_mask_add_epi64(r, _mm512_cmplt_epi64_mask(r, zero), r, vsize);
        outside |= _mm512_cmpge_epu64_mask(r, vsize);
        const __mmask8 own = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(r, vlo), width);
        // Whole-vector stores of the compressed lanes (the masked compress to memory was slower):
        // the lists have eight elements of room beyond kOwnListBlock.
        _mm512_storeu_si512(tgt + k, _mm512_maskz_compress_epi64(own, r));
        const __m512i second = Values ? _mm512_loadu_si512(uv + j) : at;
        _mm512_storeu_si512(pos + k, _mm512_maskz_compress_epi64(own, second));
        k += __builtin_popcount(unsigned(own));
        at = _mm512_add_epi64(at, eight);
    }
    bad |= outside != 0;
    m = k;
    return j;
}

// Appends the targets of `targets` that `own` marks (sixteen int32 lanes, elements j to j + 15),
// in order, to tgt from k on, and beside each, by S, its update of 4 bytes from uv or its element
// number from `at` (then advanced by sixteen; uv unused, null), by whole-vector stores of the
// compressed lanes (the lists need sixteen entries of room); returns the new count.
// list_own16_avx512's step.
template <class S>
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline int64_t append_own16(__mmask16 own, __m512i targets,
                                                                                    const S* uv, int64_t j, __m512i& at,
                                                                                    int32_t* tgt, S* second,
                                                                                    int64_t k) {
    _mm512_storeu_si512(tgt + k, _mm512_maskz_compress_epi32(own, targets));
    if constexpr (std::is_same_v<S, uint32_t>) {
        _mm512_storeu_si512(second + k, _mm512_maskz_compress_epi32(own, _mm512_loadu_si512(uv + j)));
    } else {
        _mm512_storeu_si512(second + k, _mm512_maskz_compress_epi32(own, at));
        at = _mm512_add_epi32(at, _mm512_set1_epi32(16));
    }
    return k + __builtin_popcount(unsigned(own));
}

// list_own_targets for an int32 index into at most INT32_MAX targets, sixteen indices at a time,
// the targets listed as int32 (one compress for sixteen, none widened to 64 bits). Beside them,
// by S: an update of 4 bytes (uint32_t, one compress of sixteen), or else (int32_t) the element's
// number within the block (updates of 8 bytes as well: see kOwnListBlock). Returns how many
// indices it did, `m` the elements listed; the lists need sixteen entries of room beyond the block.
template <class S>
__attribute__((target("avx512f"))) inline int64_t list_own16_avx512(const int32_t* iv, const S* uv, int64_t n,
                                                                    int32_t size, int32_t lo, int32_t hi,
                                                                    int32_t* tgt, S* second, int64_t& m, bool& bad) {
    const __m512i vsize = _mm512_set1_epi32(size), vlo = _mm512_set1_epi32(lo), width = _mm512_set1_epi32(hi - lo);
    const __m512i zero = _mm512_setzero_si512();
    __m512i at = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __mmask16 outside = 0;
    int64_t j = 0, k = m;
    for (; j + 16 <= n; j += 16) {
        __m512i r = _mm512_loadu_si512(iv + j);
        r = _mm512_mask_add_epi32(r, _mm512_cmplt_epi32_mask(r, zero), r, vsize);
        outside |= _mm512_cmpge_epu32_mask(r, vsize);
        const __mmask16 own = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(r, vlo), width);
        k = append_own16<S>(own, r, uv, j, at, tgt, second, k);
    }
    bad |= outside != 0;
    m = k;
    return j;
}

// list_own16_avx512 for an int64 index into at most INT32_MAX targets: two vectors of eight
// checked and compared as int64, their targets cut to one vector of sixteen int32 (one compress
// for the sixteen targets, one for their updates of 4 bytes or element numbers).
template <class S>
__attribute__((target("avx512f"))) inline int64_t list_own16_avx512(const int64_t* iv, const S* uv, int64_t n,
                                                                    int32_t size, int32_t lo, int32_t hi,
                                                                    int32_t* tgt, S* second, int64_t& m, bool& bad) {
    const __m512i vsize = _mm512_set1_epi64(size), vlo = _mm512_set1_epi64(lo), width = _mm512_set1_epi64(hi - lo);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i lows = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i at = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __mmask8 outside = 0;
    int64_t j = 0, k = m;
    for (; j + 16 <= n; j += 16) {
        __m512i a = _mm512_loadu_si512(iv + j), b = _mm512_loadu_si512(iv + j + 8);
        a = _mm512_mask_add_epi64(a, _mm512_cmplt_epi64_mask(a, zero), a, vsize);
        b = _mm512_mask_add_epi64(b, _mm512_cmplt_epi64_mask(b, zero), b, vsize);
        outside |= _mm512_cmpge_epu64_mask(a, vsize) | _mm512_cmpge_epu64_mask(b, vsize);
        const __mmask8 oa = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(a, vlo), width);
        const __mmask8 ob = _mm512_cmplt_epu64_mask(_mm512_sub_epi64(b, vlo), width);
        const __mmask16 own = _mm512_kunpackb(ob, oa);
        k = append_own16<S>(own, _mm512_permutex2var_epi32(a, lows, b), uv, j, at, tgt, second, k);
    }
    bad |= outside != 0;
    m = k;
    return j;
}

// For each mask of four kept 64-bit lanes, the 32-bit lanes that bring them to the front in order.
inline constexpr auto kCompress4 = [] {
    std::array<std::array<int32_t, 8>, 16> t{};
    for (int mask = 0; mask < 16; ++mask)
        for (int l = 0, k = 0; l < 4; ++l)
            if (mask >> l & 1) t[mask][2 * k] = 2 * l, t[mask][2 * k + 1] = 2 * l + 1, ++k;
    return t;
}();
// Four indices from iv as 64-bit lanes (int32 ones sign-extended).
template <class I> [[gnu::always_inline]] __attribute__((target("avx2"))) inline __m256i load4_as_int64(const I* iv) {
    if constexpr (sizeof(I) == 8) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(iv));
    else return _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iv)));
}
// Appends the 64-bit lanes of `values` and `numbers` that `keep` marks (a lane of ones), in order,
// to vs and ns from k on, by whole-vector stores through kCompress4 (the lists need room for four
// entries beyond the last one kept); returns the new count.
template <class V, class N>
[[gnu::always_inline]] __attribute__((target("avx2"))) inline int64_t append_kept4(__m256i keep, __m256i values,
                                                                                 __m256i numbers, V* vs, N* ns,
                                                                                 int64_t k) {
    const int mask = _mm256_movemask_pd(_mm256_castsi256_pd(keep));
    const __m256i perm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kCompress4[mask].data()));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(vs + k), _mm256_permutevar8x32_epi32(values, perm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ns + k), _mm256_permutevar8x32_epi32(numbers, perm));
    return k + __builtin_popcount(unsigned(mask));
}
// list_own_targets four indices at a time by AVX2 (the compress by a permutation from kCompress4);
// as list_own_avx512. AVX2 compares signed lanes: the unsigned ones flip their sign bits first.
template <class I>
__attribute__((target("avx2"))) inline int64_t list_own_avx2(const I* iv, int64_t j0, int64_t n, int64_t size,
                                                             int64_t lo, int64_t hi, int64_t* tgt, uint64_t* pos,
                                                             int64_t& m, bool& bad) {
    const __m256i sign = _mm256_set1_epi64x(INT64_MIN), zero = _mm256_setzero_si256();
    const __m256i vsize = _mm256_set1_epi64x(size), last = _mm256_set1_epi64x((size - 1) ^ INT64_MIN);
    const __m256i vlo = _mm256_set1_epi64x(lo), width = _mm256_set1_epi64x((hi - lo) ^ INT64_MIN);
    const __m256i four = _mm256_set1_epi64x(4);
    __m256i at = _mm256_add_epi64(_mm256_set_epi64x(3, 2, 1, 0), _mm256_set1_epi64x(j0));
    __m256i outside = zero;
    int64_t j = 0, k = m;
    for (; j + 4 <= n; j += 4) {
        __m256i r = load4_as_int64(iv + j);
        r = _mm256_add_epi64(r, _mm256_and_si256(_mm256_cmpgt_epi64(zero, r), vsize));
        outside = _mm256_or_si256(outside, _mm256_cmpgt_epi64(_mm256_xor_si256(r, sign), last));
        const __m256i own = _mm256_cmpgt_epi64(width, _mm256_xor_si256(_mm256_sub_epi64(r, vlo), sign));
        k = append_kept4(own, r, at, tgt, pos, k);
        at = _mm256_add_epi64(at, four);
    }
    bad |= !_mm256_testz_si256(outside, outside);
    m = k;
    return j;
}
#endif

// The listing's indices from j on, one at a time, appended to the m listed (list_own_targets): each
// target beside what `beside(j)` gives for its element; returns how many are listed.
template <class I, class Tgt, class S, class Beside>
inline int64_t list_rest(const I* iv, int64_t j, int64_t n, int64_t size, int64_t lo, int64_t hi, Tgt* tgt, S* second,
                         int64_t m, bool& bad, Beside beside) {
    for (; j < n; ++j) {
        const I raw = iv[j];
        const bool ok = in_bounds(raw, size);
        const int64_t v = ok ? normalise(raw, size) : -1;
        bad |= !ok;
        tgt[m] = Tgt(v), second[m] = beside(j);
        m += uint64_t(v - lo) < uint64_t(hi - lo);
    }
    return m;
}

// Lists, of the n indices at iv (elements j0, j0 + 1, ... of the fiber), those whose normalised
// target lies in [lo, hi): targets in tgt and element numbers in pos, in order, without a branch
// per element; returns how many. Where `Values` (by AVX-512F or one at a time, not by AVX2), pos
// gets instead the 8 bytes of each listed element's update, from uv (the block's n updates). An
// out-of-bounds index is left out and sets `bad`. tgt and pos hold n + 8.
template <class I, bool Values>
inline int64_t list_own_targets(const I* iv, const uint64_t* uv, int64_t j0, int64_t n, int64_t size, int64_t lo,
                                int64_t hi, int64_t* tgt, uint64_t* pos, bool& bad) {
    int64_t m = 0, j = 0;
#ifdef SCATTERX_HAVE_F16C_PATH
    if (list_width() == 512) j = list_own_avx512<I, Values>(iv, uv, j0, n, size, lo, hi, tgt, pos, m, bad);
    else if constexpr (!Values) {
        if (list_width() == 256) j = list_own_avx2<I>(iv, j0, n, size, lo, hi, tgt, pos, m, bad);
    }
#endif
    return list_rest(iv, j, n, size, lo, hi, tgt, pos, m, bad,
                     [&](int64_t e) { return Values ? uv[e] : uint64_t(j0 + e); });
}

// list_own_targets for an index (int32 or int64) into at most INT32_MAX targets where the listing
// is AVX-512's and sixteen at a time (list_own16_avx512; S as there), the rest one at a time.
template <class I, class S>
inline int64_t list_own_targets16(const I* iv, const S* uv, int64_t n, int64_t size, int64_t lo, int64_t hi,
                                  int32_t* tgt, S* second, bool& bad) {
    int64_t m = 0, j = 0;
#ifdef SCATTERX_HAVE_F16C_PATH
    j = list_own16_avx512<S>(iv, uv, n, int32_t(size), int32_t(lo), int32_t(hi), tgt, second, m, bad);
#endif
    return list_rest(iv, j, n, size, lo, hi, tgt, second, m, bad, [&](int64_t e) {
        if constexpr (std::is_same_v<S, int32_t>) return int32_t(e);
        else return uv[e];
    });
}

// Whether the first kSplitSample indices of a fiber give each of `parts` equal ranges of the
// targets at least a quarter of them (half an even share, for two parts): a random index does, a
// sorted one or one whose updates crowd into a few bins does not.
template <class I> inline bool fiber_splits_evenly(const I* iv, int64_t na, int64_t size, int parts) {
    const int64_t n = std::min(na, kSplitSample);
    int64_t count[kSplitFiberParts] = {}, lo[kSplitFiberParts], hi[kSplitFiberParts];
    for (int w = 0; w < parts; ++w) std::tie(lo[w], hi[w]) = split_range(size, w, parts);
    for (int64_t j = 0; j < n; ++j) {
        const I raw = iv[j];
        if (!in_bounds(raw, size)) continue;
        const int64_t v = normalise(raw, size);
        for (int w = 0; w < parts; ++w) count[w] += v >= lo[w] && v < hi[w];
    }
    for (int w = 0; w < parts; ++w)
        if (2 * parts * count[w] < n) return false;
    return true;
}

// One contiguous fiber (na elements) into `size` contiguous targets, split by targets between
// `parts` threads (see kOwnListBlock); `src` (`sstr` bytes apart, 0 for a broadcast value), when
// given, is copied into ov first, each thread its own targets. Returns false when an
// out-of-bounds index was met (it was skipped).
template <class T, class I, Reduction R>
bool scatter_fiber_by_targets(int parts, T* ov, const I* iv, const T* uv, int64_t na, int64_t size, const char* src,
                              int64_t sstr) {
    constexpr int64_t N = sizeof(T);
    // Updates of 8 bytes are listed themselves beside their targets where the listing is AVX-512's
    // and eight at a time (beyond INT32_MAX targets; see kOwnListBlock).
    const bool values = N == 8 && list_width() == 512;
    // An index into at most INT32_MAX targets is listed sixteen at a time where the listing is
    // AVX-512's, its targets as int32, beside them an update of 4 bytes or else the element's
    // number (see kOwnListBlock).
    const bool by16 = list_width() == 512 && list_sixteen() && size <= INT32_MAX;
    using S = std::conditional_t<N == 4, uint32_t, int32_t>;
    took(Path::fiber_by_targets);
    took(by16     ? Path::list_avx512_int32
         : values ? Path::list_avx512_values
                  : list_width() == 512 ? Path::list_avx512
                  : list_width() == 256 ? Path::list_avx2
                                        : Path::list_one);
    std::atomic<bool> bad{false};
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        const auto [lo, hi] = split_range(size, w, nw);
        if (src) copy_run(reinterpret_cast<char*>(ov + lo), N, src + lo * sstr, sstr, hi - lo, N);
        alignas(64) int64_t tgt[kOwnListBlock + 8];
        alignas(64) uint64_t pos[kOwnListBlock + 8];
        bool local_bad = false;
        for (int64_t b0 = 0; b0 < na; b0 += kOwnListBlock) {
            const int64_t b1 = std::min(na, b0 + kOwnListBlock);
            ask_fiber_streams_ahead(reinterpret_cast<const char*>(iv), sizeof(I), reinterpret_cast<const char*>(uv),
                                    sizeof(T), b0, b1, na);
            if (by16) {
                alignas(64) int32_t t16[kOwnListBlock + 16];
                alignas(64) S s16[kOwnListBlock + 16];
                const S* listed = std::is_same_v<S, int32_t> ? nullptr : reinterpret_cast<const S*>(uv + b0);
                const int64_t m =
                    list_own_targets16<I, S>(iv + b0, listed, b1 - b0, size, lo, hi, t16, s16, local_bad);
                if constexpr (std::is_same_v<S, int32_t>)
                    for (int64_t k = 0; k < m; ++k) Reducer<R>::apply(ov[t16[k]], uv[b0 + s16[k]]);
                else
                    for (int64_t k = 0; k < m; ++k) Reducer<R>::apply(ov[t16[k]], std::bit_cast<T>(s16[k]));
            } else if (values) {
                if constexpr (N == 8) {
                    const int64_t m = list_own_targets<I, true>(iv + b0, reinterpret_cast<const uint64_t*>(uv + b0),
                                                                b0, b1 - b0, size, lo, hi, tgt, pos, local_bad);
                    for (int64_t k = 0; k < m; ++k) Reducer<R>::apply(ov[tgt[k]], std::bit_cast<T>(pos[k]));
                }
            } else {
                const int64_t m = list_own_targets<I, false>(iv + b0, nullptr, b0, b1 - b0, size, lo, hi, tgt, pos,
                                                             local_bad);
                for (int64_t k = 0; k < m; ++k) Reducer<R>::apply(ov[tgt[k]], uv[pos[k]]);
            }
        }
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    return !bad.load();
}

// A sorted index (segment sums) brings runs of equal indices, whose updates the element loop
// applies through memory: each reads the target that the one before it has just stored, so the
// fiber waits on a store and a load per element besides the arithmetic. A block of a contiguous
// fiber that looks like runs (in_runs) is applied a run at a time instead, the target in a
// register while its run lasts (apply_runs): the same operations in the same order, so the same
// bits. Stop 62, the Intel virtual machine (family 6 model 167), one build with a switch, one
// process, two threads (one fiber keeps one thread here), rounds of medians of seven calls, bits
// the same: 1e7 sorted float64 adds into 1e5 bins 20.6 -> 11.4 ms (6 of 6 rounds), into 1000
// bins 23.7 -> 11.3 (10 of 10); random indices into 1000 bins 11.8 / 11.2 (faster in 4 of 10),
// a Zipf index (a = 1.3) into 1e5 bins 13.0 / 13.4 (4 of 10), pairs of equal indices 15.1 /
// 14.1 (4 of 6). Counting every equal neighbour of a block by AVX2 instead of looking at four
// pairs cost the random indices 2.5 ms (8.9 -> 11.5, 0 of 6). PyTorch's scatter_add_ took 43.6
// ms for the sorted 1e5 bins.
template <class I> inline bool in_runs(const I* iv, int64_t n) {
    if (n < 8) return false;
    const int64_t q = n / 4;
    return iv[0] == iv[1] && iv[q] == iv[q + 1] && iv[2 * q] == iv[2 * q + 1] && iv[n - 1] == iv[n - 2];
}
// Whether R's step regroups bit for bit: ((a R b) R c) has the bits of (a R (b R c)) for every
// a, b, c. max and min keep the first NaN, else the first extreme (a tie keeps the earlier): a
// choice of one operand by a total preorder, which regroups; so do wrapping integer adds and
// products, and boolean or and and. Float adds and products round at each step and do not.
template <class T, Reduction R>
inline constexpr bool regroups_v = R == Reduction::max || R == Reduction::min ||
                                   ((R == Reduction::add || R == Reduction::mul) &&
                                    (std::is_integral_v<T> || std::is_same_v<T, boolean>));
// A run this long (at most a block of kFiberStreamBlock) is folded apart (fold_run) and the
// result applied to the target once. Element by element a run's max waits on each compare and
// select before the next; apart, a float or double max or min goes by vectors (fold_extreme),
// the other reductions that regroup in kRunChains chains (fold_in_chains). Stop 63, the Intel
// virtual machine (family 6 model 167), one build with a switch, one process, two threads (one
// fiber keeps one thread), six rounds of medians of seven calls, 1e7 sorted updates into 1e5
// targets, bits the same, element by element / chains / vectors: float32 max 40.1 / 19.8 /
// 13.0 ms, float64 min 32.9 / 18.1 / 16.5, float32 max into 1000 targets 40.4 / 18.0 / 11.2;
// float16 max 35.7 / 21.7, bfloat16 max 48.9 / 22.4, int64 adds 13.2 / 10.5, int32 products
// 13.4 / 10.1 (faster in 6 of 6 each). Random targets 11.6 / 11.5 / 11.7 and runs of 8 15.3 /
// 15.2 / 15.3, which this leaves alone. PyTorch's scatter_reduce_ (amax) took 39.4 ms for the
// sorted float32 max, 18.5 for the random one.
inline constexpr int kRunChains = 4;
inline constexpr int64_t kRunChainsFrom = 16;
// The fold of uv[0..n) under R, n >= kRunChains: each of kRunChains consecutive parts folded in
// its own chain, the chains side by side, then the parts' results in order. Where R regroups
// (regroups_v) these are the bits of the fold one element after another, whose every step waits
// on the one before: a max's compare and select, an integer product.
template <class T, Reduction R> inline T fold_in_chains(const T* uv, int64_t n) {
    const int64_t m = n / kRunChains;
    T part[kRunChains];
    for (int c = 0; c < kRunChains; ++c) part[c] = uv[c * m];
    for (int64_t k = 1; k < m; ++k)
        for (int c = 0; c < kRunChains; ++c) Reducer<R>::apply(part[c], uv[c * m + k]);
    for (int64_t k = kRunChains * m; k < n; ++k) Reducer<R>::apply(part[kRunChains - 1], uv[k]);
    for (int c = 1; c < kRunChains; ++c) Reducer<R>::apply(part[0], part[c]);
    return part[0];
}
// lane[c] = the extreme (Max: the greatest) of uv[c], uv[c + 64 / sizeof(T)], ... up to a
// returned multiple of 64 / sizeof(T) elements, at least one, for float and double without NaNs,
// whichever of equal values: by SSE2's max and min where the build has it (plain x86-64), which
// the compiler does not make of the loop as C++ writes it.
template <class T, bool Max> inline int64_t extreme_lanes(const T* uv, int64_t n, T* lane) {
    constexpr int kLanes = 64 / int(sizeof(T));
#if defined(__SSE2__)
    constexpr bool single = std::is_same_v<T, float>;
    constexpr int kPer = 16 / int(sizeof(T));
    const auto load = [](const T* p) {
        if constexpr (single) return _mm_loadu_ps(p);
        else return _mm_loadu_pd(p);
    };
    using V = decltype(load(uv));
    const auto pick = [](V b, V a) {  // b where it wins, else a
        if constexpr (single) return Max ? _mm_max_ps(b, a) : _mm_min_ps(b, a);
        else return Max ? _mm_max_pd(b, a) : _mm_min_pd(b, a);
    };
    V v[4] = {load(uv), load(uv + kPer), load(uv + 2 * kPer), load(uv + 3 * kPer)};
    int64_t k = kLanes;
    for (; k + kLanes <= n; k += kLanes)
        for (int c = 0; c < 4; ++c) v[c] = pick(load(uv + k + c * kPer), v[c]);
    for (int c = 0; c < 4; ++c) std::memcpy(lane + c * kPer, &v[c], 16);
#else
    for (int c = 0; c < kLanes; ++c) lane[c] = uv[c];
    int64_t k = kLanes;
    for (; k + kLanes <= n; k += kLanes)
        for (int c = 0; c < kLanes; ++c)
            lane[c] = (Max ? uv[k + c] > lane[c] : uv[k + c] < lane[c]) ? uv[k + c] : lane[c];
#endif
    return k;
}
// The same fold for a float or double max (Max) or min, n >= 64 / sizeof(T), by what decides it:
// the first NaN if there is one; else the extreme value, taken lane by lane in any order, whose
// bits are the first such element's unless it is a zero, when the first zero of either sign is
// the answer.
template <class T, bool Max> inline T fold_extreme(const T* uv, int64_t n) {
    int nan = 0;
    for (int64_t k = 0; k < n; ++k) nan |= uv[k] != uv[k];
    if (nan) {
        int64_t k = 0;
        while (uv[k] == uv[k]) ++k;
        return uv[k];
    }
    const auto wins = [](T b, T a) { return Max ? b > a : b < a; };
    T lane[64 / sizeof(T)];
    int64_t k = extreme_lanes<T, Max>(uv, n, lane);
    T best = lane[0];
    for (T x : lane) best = wins(x, best) ? x : best;
    for (; k < n; ++k) best = wins(uv[k], best) ? uv[k] : best;
    if (best != T(0)) return best;
    k = 0;
    while (uv[k] != T(0)) ++k;
    return uv[k];
}
// The fold of a run of n >= kRunChainsFrom updates where R regroups.
template <class T, Reduction R> inline T fold_run(const T* uv, int64_t n) {
    if constexpr ((std::is_same_v<T, float> || std::is_same_v<T, double>) &&
                  (R == Reduction::max || R == Reduction::min))
        return fold_extreme<T, R == Reduction::max>(uv, n);
    else
        return fold_in_chains<T, R>(uv, n);
}
// ov[iv[j]] = R(ov[iv[j]], uv[j]) for j < n in order, a run of equal indices at a time.
template <class T, class I, Reduction R>
inline void apply_runs(T* ov, const I* iv, const T* uv, int64_t n, int64_t size, bool& bad) {
    for (int64_t j = 0; j < n;) {
        const I raw = iv[j];
        if (!in_bounds(raw, size)) {
            bad = true;
            ++j;
            continue;
        }
        T* target = ov + normalise(raw, size);
        T acc = *target;
        if constexpr (regroups_v<T, R>) {
            int64_t e = j + 1;
            while (e < n && iv[e] == raw) ++e;
            if (e - j >= kRunChainsFrom) {
                Reducer<R>::apply(acc, fold_run<T, R>(uv + j, e - j));
                *target = acc;
                j = e;
                continue;
            }
        }
        do Reducer<R>::apply(acc, uv[j]);
        while (++j < n && iv[j] == raw);
        *target = acc;
    }
}
// A block of n elements of a contiguous fiber into contiguous targets ov, in order.
template <class T, class I, Reduction R>
inline void apply_fiber_block(T* ov, const I* iv, const T* uv, int64_t n, int64_t size, bool& bad) {
    if (in_runs<I>(iv, n)) return apply_runs<T, I, R>(ov, iv, uv, n, size, bad);
    each_index(iv, n, size, bad, [&](int64_t j, int64_t v) { Reducer<R>::apply(ov[v], uv[j]); });
}

// Scatter of one block of fibers. Out-of-bounds indices are never applied; they raise `bad`.
template <class T, class I, Reduction R> struct ScatterBlock {
    int64_t size, ostr;
    bool* bad;
    std::atomic<int64_t>* progress = nullptr;  // see read_ahead

    bool contiguous(int64_t is, int64_t us) const {
        return is == int64_t(sizeof(I)) && us == int64_t(sizeof(T)) && ostr == int64_t(sizeof(T));
    }

    void fiber(char* op, const char* ip, const char* up, int64_t na, int64_t is, int64_t us) const {
        if (contiguous(is, us)) {
            // Contiguous fibers (a 1-D histogram, say): typed addressing, no stride products.
            const I* iv = reinterpret_cast<const I*>(ip);
            const T* uv = reinterpret_cast<const T*>(up);
            T* ov = reinterpret_cast<T*>(op);
            // Prefetching pays only when the fiber does not fit in the cache anyway.
            const bool far = size * int64_t(sizeof(T)) > kCacheBytes;
            const bool ahead = fiber_streams_ahead();
            const int64_t step = progress ? kProgressStep : na;
            for (int64_t c0 = 0; c0 < na; c0 += step) {
                const int64_t c1 = std::min(na, c0 + step);
                if (!far && !ahead) {
                    for (int64_t b0 = c0; b0 < c1; b0 += kFiberStreamBlock)
                        apply_fiber_block<T, I, R>(ov, iv + b0, uv + b0, std::min(c1, b0 + kFiberStreamBlock) - b0,
                                                   size, *bad);
                } else if (!far) {
                    // The streams asked for ahead (kFiberStreamAhead), a block at a time.
                    for (int64_t b0 = c0; b0 < c1; b0 += kFiberStreamBlock) {
                        const int64_t b1 = std::min(c1, b0 + kFiberStreamBlock);
                        ask_fiber_streams_ahead(reinterpret_cast<const char*>(iv), sizeof(I),
                                                reinterpret_cast<const char*>(uv), sizeof(T), b0, b1, na);
                        apply_fiber_block<T, I, R>(ov, iv + b0, uv + b0, b1 - b0, size, *bad);
                    }
                } else {
                    // Targets beyond the cache: each element's asked for kPrefetchAhead ahead,
                    // but a block in runs (a sorted index: its targets in sequence) goes as above.
                    // Stop 63, one build with a switch, one process, five rounds of medians of
                    // seven, 1e7 updates, bits the same, element by element / this: sorted
                    // float64 adds into 1e6 targets 23.3 / 18.2 ms, into 4e6 23.7 / 23.3, float32
                    // max into 1e6 29.4 / 27.5 (faster in 5 of 5 each); random targets 23.6 /
                    // 23.7, runs of two 20.0 / 19.9. Without the streams asked for in blocks not
                    // in runs, 4e6 took 26.5; with runs chosen by three pairs of four, the max 29.6.
                    for (int64_t b0 = c0; b0 < c1; b0 += kFiberStreamBlock) {
                        const int64_t b1 = std::min(c1, b0 + kFiberStreamBlock);
                        if (ahead)
                            ask_fiber_streams_ahead(reinterpret_cast<const char*>(iv), sizeof(I),
                                                    reinterpret_cast<const char*>(uv), sizeof(T), b0, b1, na);
                        if (in_runs<I>(iv + b0, b1 - b0)) {
                            apply_runs<T, I, R>(ov, iv + b0, uv + b0, b1 - b0, size, *bad);
                            continue;
                        }
                        for (int64_t j = b0; j < b1; ++j) {
                            if (j + kPrefetchAhead < na && in_bounds(iv[j + kPrefetchAhead], size))
                                __builtin_prefetch(ov + normalise(iv[j + kPrefetchAhead], size), 1);
                            const I raw = iv[j];
                            if (!in_bounds(raw, size)) { *bad = true; continue; }
                            Reducer<R>::apply(ov[normalise(raw, size)], uv[j]);
                        }
                    }
                }
                if (progress) progress->store(c1, std::memory_order_release);
            }
            return;
        }
        for (int64_t j = 0; j < na; ++j) {
            const I raw = *reinterpret_cast<const I*>(ip + j * is);
            if (!in_bounds(raw, size)) { *bad = true; continue; }
            T* dst = reinterpret_cast<T*>(op + normalise(raw, size) * ostr);
            Reducer<R>::apply(*dst, *reinterpret_cast<const T*>(up + j * us));
        }
    }
};

// dst[k] = R(dst[k], up[k]) for k < count: one target row, contiguous (vectorisable). Float
// adds and products go by 64- or 32-byte vectors where the CPU has them (arith_row_avx512,
// arith_row_avx2), float16 and bfloat16 adds and products by their own vector code (types.h; with
// the CPU's 16-bit float instructions where it has them, half_rows_on), the rest by the compiler's
// baseline vectorisation. Stop 60, the Intel virtual
// machine (family 6 model 167), one build with a switch, one process, two threads, eight rounds
// of medians of nine calls, bits the same: baseline / AVX-512 / AVX2 mp_add 11.35 / 10.59 /
// 10.42 ms, mp_add_i32 11.14 / 10.19 / 10.33, vjp_gather 11.30 / 10.32 / 10.55 (each vector
// width faster than baseline in 8 of 8 rounds), mp_add_dense 20.97 / 20.92 / 20.94.
// A narrower width is called only for what the wider left: each is a call (a function built for
// another target does not inline here), and a row of 64 that the widest did whole had paid two
// empty ones. Stop 78, the same machine, one build with a switch, one process, two threads, eight
// rounds of medians of nine calls, bits the same, with them / without: mp_add_f16 3.36 / 3.07 ms
// and 3.58 / 3.23, mp_add_bf16 4.24 / 3.67 and 4.15 / 3.57 (faster in 8 of 8 each).
template <class T, Reduction R> inline void apply_row(T* __restrict dst, const T* up, int64_t count) {
    int64_t done = 0;
#ifdef SCATTERX_HAVE_F16C_PATH
    constexpr bool Mul = R == Reduction::mul;
    if constexpr (std::is_same_v<T, float16> && (R == Reduction::add || Mul)) {
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
        if (half_rows_on && cpu_has_avx512fp16()) done = arith_f16_avx512fp16<Mul>(dst, up, count);
#endif
        if (done < count && cpu_has_avx512f()) done += arith_f16_avx512<Mul>(dst + done, up + done, count - done);
        if (done < count && cpu_has_f16c()) done += arith_f16_f16c<Mul>(dst + done, up + done, count - done);
    }
    if constexpr (std::is_same_v<T, bfloat16> && (R == Reduction::add || Mul)) {
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
        if (half_rows_on && cpu_has_avx512bf16()) done = arith_bf16_avx512bf16<Mul>(dst, up, count);
#endif
        if (done < count && cpu_has_avx512bw()) done += arith_bf16_avx512<Mul>(dst + done, up + done, count - done);
        if (done < count && cpu_has_avx2()) done += arith_bf16_avx2<Mul>(dst + done, up + done, count - done);
    }
    if constexpr ((std::is_same_v<T, float> || std::is_same_v<T, double>) &&
                  (R == Reduction::add || R == Reduction::mul)) {
        if (cpu_has_avx512f()) done = arith_row_avx512<T, Mul>(dst, up, count);
        else if (cpu_has_avx2()) done = arith_row_avx2<T, Mul>(dst, up, count);
    }
#endif
    for (int64_t k = done; k < count; ++k) Reducer<R>::apply(dst[k], up[k]);
}

template <class T, class I, Reduction R>
void scatter_rows(const ScatterBlock<T, I, R>& sb, char* const* p, int64_t count,
                  const int64_t* in, int64_t na, const int64_t* astr) {
    const bool contiguous = in[0] == int64_t(sizeof(T)) && in[2] == int64_t(sizeof(T));
    const bool typed = contiguous && in[1] == int64_t(sizeof(I));
    // Prefetching pays only when the rows targeted do not fit in the cache anyway.
    const bool far = sb.size * sb.ostr > kCacheBytes;
    // This block's share of a later row of indices and updates, when it is only a part of the
    // row: when threads share out the fibers of wide rows, each reads a part of every row, a
    // pattern the hardware prefetcher does not follow (standalone, 6.4M random max updates into
    // 100000x32, two threads sharing out the columns: 61-79 ms without, 41-54 ms with, 34-45 ms
    // with rows of their own). Whole rows are one contiguous stream, asked for ahead as well
    // (kRowStreamAhead).
    auto share = [&](int64_t inner, int64_t item, int64_t row) {
        return inner == item && row != count * item ? count * item : int64_t(0);
    };
    const int64_t ibytes = share(in[1], int64_t(sizeof(I)), astr[1]);
    const int64_t ubytes = share(in[2], int64_t(sizeof(T)), astr[2]);
    // Whole contiguous rows: the two streams asked for kRowStreamAhead elements ahead.
    const bool whole = !(ibytes | ubytes) && in[1] == int64_t(sizeof(I)) && in[2] == int64_t(sizeof(T));
    const int64_t whole_ahead = whole ? std::max<int64_t>(1, kRowStreamAhead / count) : 0;
    for (int64_t j = 0; j < na; ++j) {
        const char* ip = p[1] + j * astr[1];
        const I* iv = reinterpret_cast<const I*>(ip);
        const T* up = reinterpret_cast<const T*>(p[2] + j * astr[2]);
        if ((ibytes | ubytes) && j + kStreamRows < na) {
            prefetch_lines(ip + kStreamRows * astr[1], ibytes);
            prefetch_lines(p[2] + (j + kStreamRows) * astr[2], ubytes);
        }
        if (whole && j + whole_ahead < na) {
            prefetch_lines(ip + whole_ahead * astr[1], count * int64_t(sizeof(I)));
            prefetch_lines(p[2] + (j + whole_ahead) * astr[2], count * int64_t(sizeof(T)));
        }
        if (contiguous) {
            // The expanded index of message passing: one target for the whole row of fibers,
            // so the row is combined as one contiguous (vectorisable) span.
            const I first = iv[0];
            if (in[1] == 0 || all_equal<I>(ip, count, in[1])) {
                if (!in_bounds(first, sb.size)) { *sb.bad = true; continue; }
                if (far && j + kPrefetchRows < na) {
                    const I ahead = *reinterpret_cast<const I*>(ip + kPrefetchRows * astr[1]);
                    if (in_bounds(ahead, sb.size)) {
                        const char* row = p[0] + normalise(ahead, sb.size) * sb.ostr;
                        for (int64_t b = 0; b < count * int64_t(sizeof(T)); b += 64) __builtin_prefetch(row + b, 1);
                    }
                }
                apply_row<T, R>(reinterpret_cast<T*>(p[0] + normalise(first, sb.size) * sb.ostr), up, count);
                continue;
            }
        }
        // Targets are random rows: ask for the lines of a later row, so that many cache misses
        // are in flight at once instead of one after another; along the row being worked on,
        // not as a burst before it (alternating processes, 13 of 13 rounds faster: max0
        // 28.8-37.7 -> 27.1-33.8 ms, max0_i32 32.4-34.3 -> 26.7-28.7, max0_f16 45.6-48.4 ->
        // 36.9-44.8).
        const bool ask = far && j + kPrefetchRows < na;
        if (typed) {
            T* ov = reinterpret_cast<T*>(p[0]);
            const I* ahead = ask ? reinterpret_cast<const I*>(ip + kPrefetchRows * astr[1]) : nullptr;
            each_index_ahead(
                iv, ahead, count, sb.size, *sb.bad,
                [&](int64_t k, int64_t v) {
                    Reducer<R>::apply(*reinterpret_cast<T*>(reinterpret_cast<char*>(ov + k) + v * sb.ostr), up[k]);
                },
                [&](int64_t k, int64_t w) { __builtin_prefetch(reinterpret_cast<char*>(ov + k) + w * sb.ostr, 1); });
            continue;
        }
        if (ask) {
            const char* pip = ip + kPrefetchRows * astr[1];
            for (int64_t k = 0; k < count; ++k) {
                const I raw = *reinterpret_cast<const I*>(pip + k * in[1]);
                if (in_bounds(raw, sb.size))
                    __builtin_prefetch(p[0] + k * in[0] + normalise(raw, sb.size) * sb.ostr, 1);
            }
        }
        for (int64_t k = 0; k < count; ++k) {
            const I raw = *reinterpret_cast<const I*>(ip + k * in[1]);
            if (!in_bounds(raw, sb.size)) { *sb.bad = true; continue; }
            T* dst = reinterpret_cast<T*>(p[0] + k * in[0] + normalise(raw, sb.size) * sb.ostr);
            Reducer<R>::apply(*dst, *reinterpret_cast<const T*>(p[2] + j * astr[2] + k * in[2]));
        }
    }
}

// The fused copy of a large call (see kStreamBytes), a block of fibers at a time when its target
// rows (axis_size rows of `count` elements, contiguous in out) take at most kStageBytes: the rows
// are copied from src into a per-thread scratch, the updates applied there (scatter_rows, in the
// same order), and the rows written to out by streaming stores, so out's lines are never read.
// Measured in one process, alternating with the fused copy into out (64 slabs of 512 x 128
// float32, a mul of 256 x 128 updates each, two threads, medians of 15 samples): 6.1 / 5.5 / 5.3
// / 4.8 -> 4.7 / 4.5 / 4.4 / 5.0 ms in four rounds; in six more 4.4 / 5.4 / 4.6 / 5.7 / 4.4 /
// 5.6 -> 4.5 / 4.3 / 4.5 / 4.6 / 4.7 / 4.7 (a loss of up to 6 % in some rounds). For single
// fibers (4096 rows of 1024 float32, 256 updates each) the same stage gained nothing (2.6 /
// 2.4 -> 2.7 / 2.4 ms): not used there. The source rows are read in first, as interleaved runs
// (read_rows_in), and copied from the cache (stop 28, one process, the ways alternating, rounds
// of medians of nine calls: mid_mul 5.87 -> 5.68 ms, faster in 20 of 24 rounds, then 5.97 ->
// 5.47, 27 of 40); copying the rows in that interleaved order instead was slower (5.20 -> 6.55
// ms, 8 of 8 rounds).
inline constexpr int64_t kStageBytes = int64_t(256) << 10;

// Returns false, having done nothing, when the scratch cannot be allocated.
template <class T, class I, Reduction R>
bool stage_rows(const ScatterBlock<T, I, R>& sb, char* const* p, int64_t count, const int64_t* in, int64_t na,
                const int64_t* astr, int64_t src_axis_stride) {
    constexpr int64_t N = sizeof(T);
    const int64_t row = count * N, size = sb.size;
    char* scratch = thread_scratch(size * row);
    if (!scratch) return false;
    if (in[3] == N) read_rows_in(p[3], size, src_axis_stride, row);
    for (int64_t a = 0; a < size; ++a) copy_run(scratch + a * row, N, p[3] + a * src_axis_stride, in[3], count, N);
    char* const q[4] = {scratch, p[1], p[2], p[3]};
    const int64_t inner[4] = {N, in[1], in[2], in[3]};
    scatter_rows(ScatterBlock<T, I, R>{size, row, sb.bad}, q, count, inner, na, astr);
    for (int64_t a = 0; a < size; ++a) stream_copy(p[0] + a * sb.ostr, scratch + a * row, row);
    stream_fence();
    return true;
}

// Rows of a contiguous index that scatter_by_target_rows checks at a time (a chunk), the rows
// whose own target rows a thread lists at a time (a block) too.
inline constexpr int64_t kVerifyRows = kOwnBlock;
// Rows asked for ahead of the check. Against 2 / 8 / 16 (stop 29, one process alternating,
// ten rounds of medians of five, mp_add_dense's arrays): 35.7 ms with 4 against 38.7 / 36.9 /
// 38.4, the others faster in 2, 2 and 1 of 10 rounds.
inline constexpr int64_t kVerifyAhead = 4;
// Chunks after the one a thread is about to apply that it makes sure are claimed for the check.
inline constexpr int64_t kCheckAhead = 2;
// What is known of a chunk of a contiguous index: nothing yet (it may be being checked), every
// row holds one value, or a row holds several.
enum class Chunk : uint8_t { unchecked, one_value, several };

// Whether each of rows [0, n) of `width` contiguous indices, `istr` bytes apart from ip, holds
// one value (a row of the expanded index of message passing). Every row is read, with no exit
// at a row of several values, so that the rows can be asked for ahead: rows up to `reach` (n
// when negative; more when these rows are a part of a chunk checked a few rows at a time), with
// the non-temporal hint where the CPU takes it so (read once; see read_once_non_temporal).
template <class I> inline bool constant_rows(const char* ip, int64_t n, int64_t istr, int64_t width, int64_t reach = -1) {
    std::make_unsigned_t<I> differ = 0;
    if (reach < 0) reach = n;
    const bool nta = read_once_non_temporal();
    for (int64_t j = 0; j < n; ++j) {
        if (j + kVerifyAhead < reach) prefetch_read_once(ip + (j + kVerifyAhead) * istr, width * int64_t(sizeof(I)), nta);
        differ |= row_differ<I>(ip + j * istr, width);
    }
    return differ == 0;
}

// A thread that has applied its rows asks the thread with the most work left for more: `asked`
// (the asking thread, -1 none, kGone when this thread has left), which the owner reads between
// blocks of rows; it answers in the asker's `answer` (1: granted the rows from `row` on for
// target rows [lo, hi), which it gives up; 2: refused), and keeps `left` (rows left times
// target rows owned; 0 when too little to split) for askers to compare.
struct alignas(64) Handover {
    std::atomic<int> asked{-1};
    std::atomic<int> answer{0};
    std::atomic<int64_t> left{0};
    int64_t row = 0, lo = 0, hi = 0;
};
inline constexpr int kGone = -2;

// The first column of a checked chunk of a materialised index (its rows' targets), written by
// the thread that checked it, which has the rows in its cache then, for the threads that list
// their own rows of the chunk: read from the index, the first index of each row is a cache line
// per row (512 bytes apart for 64 int64), often from the other core's cache; here it is 2 KB in
// a row. A sequence lock: `seq` is odd while the one thread that has taken the slot writes; a
// reader takes the column only when `seq` is even and the same after it has read, and otherwise
// reads the index (slots are reused by later chunks, and a thread may be chunks behind). Its
// stores release and its loads acquire (plain moves on x86): a reader that loads a value stored
// by a later writer then sees that writer's odd `seq`.
template <class I> struct alignas(64) FirstColumn {
    std::atomic<uint64_t> seq{0};
    std::atomic<int64_t> chunk{-1};
    std::atomic<I> value[kVerifyRows];

    // Chunk c's column from its `rows` rows, `istr` bytes apart from ip; nothing when another
    // thread is writing the slot.
    void put(int64_t c, const char* ip, int64_t rows, int64_t istr) {
        uint64_t q = seq.load(std::memory_order_relaxed);
        if ((q & 1) || !seq.compare_exchange_strong(q, q + 1, std::memory_order_relaxed)) return;
        chunk.store(c, std::memory_order_release);
        for (int64_t j = 0; j < rows; ++j)
            value[j].store(*reinterpret_cast<const I*>(ip + j * istr), std::memory_order_release);
        seq.store(q + 2, std::memory_order_release);
    }
    // Whether chunk c's column was read into out[0, rows).
    bool get(int64_t c, I* out, int64_t rows) const {
        const uint64_t q = seq.load(std::memory_order_acquire);
        if ((q & 1) || chunk.load(std::memory_order_acquire) != c) return false;
        for (int64_t j = 0; j < rows; ++j) out[j] = value[j].load(std::memory_order_acquire);
        return seq.load(std::memory_order_relaxed) == q;
    }
};
// Chunks whose first column is kept at a time (chunk c in slot c % kFirstColumnSlots).
inline constexpr int64_t kFirstColumnSlots = 8;
// Rows left below which a thread keeps its target rows rather than split them.
inline constexpr int64_t kHandoverRows = 4 * kOwnBlock;

// A 2-D scatter along axis 0 whose rows of updates each go to one target row: an index row of
// stride 0 (the expanded index of message passing, passed as a broadcast view), or a contiguous
// index whose rows turn out to hold one value each (that index materialised, as an ONNX Expand
// produces it). Every element of a target row is updated by the same rows of updates, so the
// threads split the target rows instead of the columns: each reads the first index of every
// row and applies, whole and in order, the rows that land in its own range. Split by columns,
// both threads missed on every random row (standalone, 400000 rows of 64 float32 into 50000:
// 29-32 ms -> 21-24 ms with the broadcast view).
// A contiguous index is checked a chunk of kVerifyRows rows at a time. Before it lists its rows
// of a chunk, a thread makes sure that it and the kCheckAhead chunks after it are claimed (from
// a counter, so each chunk is checked once while the threads keep pace) and reads what the check
// found; a chunk claimed by a thread that has not finished checking it, it checks itself rather
// than wait (a thread whose CPU the host has taken holds no other up). The chunks it claims
// beyond that one it checks a few rows at a time between the rows of the block it applies, and
// the checker of a chunk keeps its first column (FirstColumn) for the others to list their rows
// from. Stop 40, old and new builds in alternating processes, medians of seven calls, two
// threads, eight rounds: mp_add_dense 37.75 -> 27.75 ms (faster in 8 of 8); standalone, the
// two parts apart: 31.8 ms as before, 29.9 with the column kept and the chunk checked before
// its rows are listed, 27.5 with the checks between the rows as well (faster than before in 7
// and 8 of 8 rounds); the column kept without that check first was missing for 13 % of the
// blocks and gained nothing (31.4 / 31.5), nor did the checks between the rows alone (38.3 /
// 37.8, faster in 4 of 8) or asking for the rows' first lines ahead. A chunk with a row of
// several values is applied element by element instead, each thread the elements whose target
// row it owns, so every target element still gets its updates in the order of the rows, on one
// thread: results do not depend on the thread count.
// Before (stop 29), a materialised index went the columns' way, each thread checking its half
// of every row: one process alternating, rounds of medians of five calls, 400000 x 64 int64
// into 50000 x 64 float32, add: 59.4 -> 37.0 ms (faster in 6 of 6 rounds), 75.5 -> 40.2 (8 of
// 8). Checking rows by a scalar loop that stopped at the first difference took about 40 % of
// the samples of a profile; the check by XOR (constant_rows) vectorises (standalone, 205 MB of
// such rows on two threads: 24 -> 18 ms, 14-17 with the rows asked for ahead). Each thread
// lists its own rows of a block without a branch and then applies the list (stop 33; before, a
// branch per row, taken for a random half of them): alternating processes, five rounds of
// medians of seven, two threads, mp_add 9.4 -> 7.0 ms (medians of the rounds), mp_add_i32 9.8
// -> 6.1, mp_add_f16 8.7 -> 4.5, mp_add_dense 16.0 -> 13.8, faster in 5 of 5 rounds each; 16
// own rows asked for ahead against 4 / 8 / 24 / 32 (one build, five rounds): 4 the slowest, 16
// faster than 8 in most rounds (rows of 256 bytes; narrower ones go further, kOwnAheadBytes).
// A thread that has applied all its rows takes over the upper half of the target rows of the
// thread with the most work left (Handover), from that thread's next block of rows on, and
// again as long as a thread has enough left to split: a thread whose CPU the host has taken for
// a while no longer holds the call up by a share fixed in advance. Every target row still gets
// its rows in order, on one thread at a time: the rows before the block from the old owner,
// which answers only once it has applied them, the rest from the new one. Stop 38, broadcast
// index, old and new builds in alternating processes, medians of seven calls, two threads, with
// the host taking 14 % of the CPUs' time (eight rounds): mp_add 38.0 -> 20.1 ms (faster in 7 of
// 8), mp_add_i32 40.1 -> 20.6 (7), mp_add_f16 19.6 -> 11.9 (8); with a CPU-bound process beside
// (six rounds): mp_add 42.4 -> 34.2 (6 of 6), mp_add_i32 42.8 -> 38.1 (5), mp_add_f16 20.8 /
// 21.0 (2); on a quiet minute the same (standalone: 19.2 / 19.3, 18.1 / 17.4 ms). Until stop 39
// a materialised index kept its split fixed: its threads checked each chunk in halves, in step,
// and passed its target rows on in a ring of four chunks (against reading them again from the
// index, 31.0 -> 29.8 ms, stop 29), so a thread that lost its CPU stopped the other within a
// chunk (stop 38: mp_add_dense 114 ms at 16 % steal against 37.6 quiet).
// Cutting the target rows into many ranges handed out from a counter (rows sorted by range a
// batch at a time) measured slower (docs/performance.md, stop 38): a range's rows are a thin,
// scattered part of the update stream.
// A materialised index's rows (ahead of their check) and its update rows are asked for with the
// non-temporal hint (prefetchnta) on CPUs other than Intel's (read_once_non_temporal). Our
// reading, not measured apart: on Zen the L3 holds what the L2 evicts, so the 307 MB of index
// and update rows that pass through it otherwise push out the target rows (12.8 MB in message
// passing, which the L3 of 32 MB could hold), and the rows applied then miss in memory.
// Stop 54, the Zen 3 machine, one build with a switch, one process, two threads, rounds of
// medians of nine calls, bits the same: mp_add_dense 24.39 -> 20.82 ms (faster in 9 of 10
// rounds), 23.48 -> 21.23 (9 of 10), 20.11 -> 18.68 (6 of 8), 21.73 -> 18.66 (9 of 10); the
// check's rows asked for 1, 2 or 8 rows ahead instead of 4 with the hint: no better. The update
// rows of a stride-0 index (mp_add: 3.2 MB of index, 102 MB of updates) keep the plain request:
// with the hint, 8.20 -> 8.34 and 9.55 -> 10.03 ms (stop 52). The same hint on the whole rows of
// the middle-axis product (scatter_rows: mid_mul 3.86 -> 3.76 ms, faster in 7 of 10 rounds,
// then 3.38 -> 3.50, 7 of 12) and of the axis-0 max (max0 28.6 -> 33.9, 1 of 8) was not kept.
// On Intel's the hint puts such a line in L1 alone, and the rows came slower: stop 57, the Intel
// virtual machine (family 6 model 167, 2 MB of L2 per core), one build with a switch, one
// process, two threads, six rounds of medians of nine calls, bits the same: mp_add_dense 36.70
// ms with the hint on both, 27.64 with the plain request for the index rows, 31.79 for the update
// rows, 20.15 for both (faster in 6 of 6 rounds each).
template <class T, class I, Reduction R>
bool scatter_by_target_rows(const Geometry& g, const FiberSpace& fs, int parts, char* out, const char* indices,
                            const char* updates, const char* src) {
    constexpr int64_t N = sizeof(T);
    const int64_t width = fs.nfib, istr = fs.astr[1], ustr = fs.astr[2], size = g.axis_size, na = fs.na;
    const bool verify = fs.f.stride[1][0] != 0, nta = read_once_non_temporal();
    const int64_t chunks = verify ? (na + kVerifyRows - 1) / kVerifyRows : 0;
    std::unique_ptr<std::atomic<Chunk>[]> known(verify ? new (std::nothrow) std::atomic<Chunk>[size_t(chunks)] : nullptr);
    std::unique_ptr<Handover[]> hand(new (std::nothrow) Handover[size_t(parts)]);
    std::unique_ptr<FirstColumn<I>[]> column(verify ? new (std::nothrow) FirstColumn<I>[kFirstColumnSlots] : nullptr);
    if ((verify && (!known || !column)) || !hand) throw std::bad_alloc();
    for (int64_t c = 0; c < chunks; ++c) known[c].store(Chunk::unchecked, std::memory_order_relaxed);
    std::atomic<int64_t> claimed{0};  // chunks [0, claimed) are claimed for the check
    std::atomic<bool> bad{false};
    const int64_t ahead =
        std::clamp<int64_t>(own_ahead_bytes() / std::max<int64_t>(1, width * N), kOwnAhead, 4 * kOwnAhead);
    ThreadPool::instance().run(parts, [&](int w, int nw) {
        int64_t lo, hi;
        std::tie(lo, hi) = split_range(size, w, nw);
        bool local_bad = false;
        int64_t own[2 * kOwnBlock], own_target[2 * kOwnBlock];
        // This thread's rows of data first: one copy where the rows of both lie end to end (stop
        // 61, one build with a switch, one process, two threads, eight rounds of medians of nine
        // calls, bits the same, row by row / one copy: mp_add 9.15 / 8.92 ms, faster in 6 of 8
        // rounds; mp_add_bf16 4.25 / 4.13, 8 of 8; mp_add_f16 3.94 / 3.83, 5 of 8).
        if (src && fs.f.stride[3][0] == N && g.axis_stride == width * N && g.src_axis_stride == width * N)
            copy_run(out + lo * g.axis_stride, N, src + lo * g.src_axis_stride, N, (hi - lo) * width, N);
        else if (src)
            for (int64_t a = lo; a < hi; ++a)
                copy_run(out + a * g.axis_stride, N, src + a * g.src_axis_stride, fs.f.stride[3][0], width, N);
        // Whether this thread's work from row j on is enough to split.
        auto splittable = [&](int64_t j) { return hi - lo >= 2 && na - j >= kHandoverRows; };
        // This thread's work left, rows from j on: what a thread looking for work compares.
        auto publish = [&](int64_t j) {
            hand[w].left.store(splittable(j) ? (na - j) * (hi - lo) : 0, std::memory_order_relaxed);
        };
        // Answers "no" to a thread asking this one for work while this one has none to give.
        auto refuse_asks = [&] {
            const int asking = hand[w].asked.load(std::memory_order_acquire);
            if (asking < 0) return;
            hand[w].asked.store(-1, std::memory_order_relaxed);
            hand[asking].answer.store(2, std::memory_order_release);
        };
        // Publishes what the check of chunk c found (and its first column, for the others).
        auto checked = [&](int64_t c, bool several) {
            const int64_t j0 = c * kVerifyRows;
            column[c % kFirstColumnSlots].put(c, indices + j0 * istr, std::min(kVerifyRows, na - j0), istr);
            known[c].store(several ? Chunk::several : Chunk::one_value, std::memory_order_release);
            return several;
        };
        // Checks chunk c and publishes what it found: whether a row holds several values.
        auto check = [&](int64_t c) {
            const int64_t j0 = c * kVerifyRows;
            return checked(c, !constant_rows<I>(indices + j0 * istr, std::min(kVerifyRows, na - j0), istr, width));
        };
        // The chunks this thread has claimed beyond the one it is about to list, pend[pnext,
        // npend): checked a few rows at a time between the rows of the block it applies
        // (check_some), so that the index streams in while the rows' random targets are waited
        // for, rather than in a burst between blocks; all of them by the end of the block.
        int64_t pend[kCheckAhead + 1];
        int npend = 0, pnext = 0;
        int64_t prow = 0;       // rows of pend[pnext] checked
        bool pseveral = false;  // whether one of them holds several values
        auto pending_rows = [&] {
            int64_t rows = -prow;
            for (int q = pnext; q < npend; ++q) rows += std::min(kVerifyRows, na - pend[q] * kVerifyRows);
            return rows;
        };
        // Checks up to m more rows of the pending chunks, publishing each once all its rows are.
        // A pending chunk already checked when its turn comes is passed over: by another thread
        // that found it unchecked, or by this one, whose next block's look at it (several_in)
        // came first (at the start of a walk, the chunk after the first).
        auto check_some = [&](int64_t m) {
            while (m > 0 && pnext < npend) {
                const int64_t k = pend[pnext], j0 = k * kVerifyRows, rows = std::min(kVerifyRows, na - j0);
                if (prow == 0 && known[k].load(std::memory_order_acquire) != Chunk::unchecked) {
                    ++pnext;
                    continue;
                }
                const int64_t r = std::min(m, rows - prow);
                pseveral |= !constant_rows<I>(indices + (j0 + prow) * istr, r, istr, width, rows - prow);
                prow += r, m -= r;
                if (prow == rows) checked(k, pseveral), ++pnext, prow = 0, pseveral = false;
            }
            if (pnext == npend) pnext = npend = 0;
        };
        // Whether chunk c holds a row of several values, once chunks up to kCheckAhead after
        // it are claimed (those after c pending, see pend); claimed by another thread and not
        // yet checked, checked here as well.
        auto several_in = [&](int64_t c) {
            const int64_t last = std::min(chunks - 1, c + kCheckAhead);
            for (int64_t k = claimed.load(std::memory_order_relaxed); k <= last;)
                if (claimed.compare_exchange_weak(k, k + 1, std::memory_order_relaxed)) {
                    if (k <= c || npend == kCheckAhead + 1) check(k);
                    else pend[npend++] = k;
                    ++k;
                }
            const Chunk found = known[c].load(std::memory_order_acquire);
            return found == Chunk::unchecked ? check(c) : found == Chunk::several;
        };
        // Rows [b0, b1) element by element, the elements whose target row is this thread's.
        auto apply_elements = [&](int64_t b0, int64_t b1) {
            for (int64_t j = b0; j < b1; ++j) {
                const I* iv = reinterpret_cast<const I*>(indices + j * istr);
                const T* up = reinterpret_cast<const T*>(updates + j * ustr);
                for (int64_t k = 0; k < width; ++k) {
                    const I raw = iv[k];
                    if (!in_bounds(raw, size)) {
                        local_bad = true;
                        continue;
                    }
                    const int64_t v = normalise(raw, size);
                    if (v >= lo && v < hi) Reducer<R>::apply(reinterpret_cast<T*>(out + v * g.axis_stride)[k], up[k]);
                }
            }
        };
        // This thread's rows of the block [b0, b1) (their row numbers and target rows, -1 out of
        // bounds) appended at `at` without a branch: whether a random row is this thread's own
        // is a coin toss that a branch per row would mispredict half the time, on every thread.
        // A materialised index's block is a chunk, checked by now: its targets from the column
        // its checker kept, when still there.
        auto own_rows = [&](int64_t b0, int64_t b1, int64_t at) -> int64_t {
            I first[kVerifyRows];
            const char* col = indices + b0 * istr;
            int64_t cstr = istr;
            if (verify && b1 > b0 && column[(b0 / kVerifyRows) % kFirstColumnSlots].get(b0 / kVerifyRows, first, b1 - b0))
                col = reinterpret_cast<const char*>(first), cstr = int64_t(sizeof(I));
            for (int64_t j = b0; j < b1; ++j) {
                const I raw = *reinterpret_cast<const I*>(col + (j - b0) * cstr);
                const int64_t v = in_bounds(raw, size) ? normalise(raw, size) : -1;
                own[at] = j;
                own_target[at] = v;
                local_bad |= v < 0;
                at += uint64_t(v - lo) < uint64_t(hi - lo);
            }
            return at;
        };
        // Rows from j0 (the first row of a block) on, applied to this thread's target rows, block
        // by block: the own rows of this block and of the next, so that the rows asked for ahead
        // run on past the block. A materialised index's chunk is checked before its rows are
        // listed.
        auto apply_from = [&](int64_t j0) {
            bool several = verify && several_in(j0 / kVerifyRows);
            int64_t n = own_rows(j0, std::min(na, j0 + kOwnBlock), 0);
            for (int64_t b0 = j0; b0 < na; b0 += kOwnBlock) {
                const int64_t b1 = std::min(na, b0 + kOwnBlock);
                // A thread asking for work gets the upper half of this one's target rows, and the
                // rows from b0 on, once this one has applied the rows before b0 and dropped the
                // listed rows of [b0, b1) that it gives away.
                const int asking = hand[w].asked.load(std::memory_order_acquire);
                if (asking >= 0) {
                    const bool give = splittable(b0);
                    if (give) {
                        const int64_t mid = lo + (hi - lo) / 2;
                        int64_t kept = 0;
                        for (int64_t i = 0; i < n; ++i) {
                            own[kept] = own[i], own_target[kept] = own_target[i];
                            kept += own_target[i] < mid;
                        }
                        n = kept;
                        hand[asking].row = b0, hand[asking].lo = mid, hand[asking].hi = hi;
                        hi = mid;
                    }
                    hand[w].asked.store(-1, std::memory_order_relaxed);
                    hand[asking].answer.store(give ? 1 : 2, std::memory_order_release);
                }
                publish(b0);
                const bool next_several = verify && b1 < na && several_in(b1 / kVerifyRows);
                const int64_t m = own_rows(b1, std::min(na, b1 + kOwnBlock), n);
                if (several) {
                    apply_elements(b0, b1);
                } else {
                    const int64_t step = npend && n ? (pending_rows() + n - 1) / n : 0;
                    for (int64_t i = 0; i < n; ++i) {
                        if (step) check_some(step);
                        if (i + ahead < m) {
                            prefetch_lines(out + own_target[i + ahead] * g.axis_stride, width * N);
                            if (verify) prefetch_read_once(updates + own[i + ahead] * ustr, width * N, nta);
                            else prefetch_lines(updates + own[i + ahead] * ustr, width * N);
                        }
                        apply_row<T, R>(reinterpret_cast<T*>(out + own_target[i] * g.axis_stride),
                                        reinterpret_cast<const T*>(updates + own[i] * ustr), width);
                    }
                }
                check_some(na);
                std::copy(own + n, own + m, own);
                std::copy(own_target + n, own_target + m, own_target);
                n = m - n;
                several = next_several;
            }
        };
        apply_from(0);
        // Rows applied: take the upper half of the target rows of the thread with the most work
        // left (see Handover), until no thread has enough left to split.
        for (;;) {
            hand[w].left.store(0, std::memory_order_relaxed);
            int victim = -1;
            int64_t most = 0;
            for (int x = 0; x < nw; ++x) {
                const int64_t left = hand[x].left.load(std::memory_order_relaxed);
                if (x != w && left > most) most = left, victim = x;
            }
            if (victim < 0) break;
            hand[w].answer.store(0, std::memory_order_relaxed);
            int expected = -1;
            if (!hand[victim].asked.compare_exchange_strong(expected, w, std::memory_order_acq_rel)) {
                refuse_asks();
                cpu_relax();
                continue;
            }
            int answer;
            wait_until([&] {
                refuse_asks();
                return (answer = hand[w].answer.load(std::memory_order_acquire)) != 0;
            });
            if (answer != 1) continue;
            lo = hand[w].lo, hi = hand[w].hi;
            publish(hand[w].row);
            apply_from(hand[w].row);
        }
        // Gone (its `left` is 0 since the loop's last turn): no thread waits for this one's
        // answer any more.
        const int asking = hand[w].asked.exchange(kGone, std::memory_order_acq_rel);
        if (asking >= 0) hand[asking].answer.store(2, std::memory_order_release);
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    return !bad.load();
}

// A fiber whose targets ascend with its positions (a sorted index: segment sums, in order) is
// split by positions between two threads, at a change of target: the first thread's targets all
// lie below the second's, so every target still gets its updates in order on one thread, and each
// thread reads only its half of the streams. Each thread first checks its half (in bounds, never
// descending, the second half's first target above the first half's last) and nothing is written
// until both halves have passed; a fiber that fails goes the other ways, having cost one read of
// its index at most. Tried only when the first kSplitSample indices ascend. Stop 63, the Intel
// virtual machine (family 6 model 167), `_core.set_fiber_by_positions`, one process, five rounds
// of medians of seven calls, bits the same, 1e7 sorted updates, off / on: float64 adds into 1e5
// targets 11.73 / 8.13 ms, with an int32 index 9.06 / 6.19, float32 max 12.50 / 8.78, float64
// adds into 1e6 targets 17.50 / 11.77, float32 max into 1e6 27.72 / 17.17 (faster in 5 of 5
// each); random targets 13.04 / 12.94. The price, an index sorted for its first half and random
// after it: 13.61 / 15.62 (0 of 5). The check went one index at a time at first: 3.6 ns an index
// (standalone, 1e7 int64 on huge pages; a sum of the same 0.5), and the sorted adds took 15.08 ms;
// by AVX-512, sixteen or eight at a time, it reads as fast as the sum.
inline constexpr int64_t kAscendsBlock = 4096;
#ifdef SCATTERX_HAVE_F16C_PATH
// ascends for iv[j0..j1), j0 >= 1, sixteen (int32) or eight (int64) indices at a time; returns
// how far it got (a multiple of the width), 0 when it found one out of order or out of bounds.
template <class I>
__attribute__((target("avx512f"))) inline int64_t ascends_avx512(const I* iv, int64_t j0, int64_t j1, int64_t size) {
    constexpr int64_t W = 64 / sizeof(I);
    // (An int32 index is below 2^31: a larger size cannot be reached, a negative one is refused.)
    const __m512i vsize = sizeof(I) == 8 ? _mm512_set1_epi64(size)
                                         : _mm512_set1_epi32(int(uint32_t(std::min<int64_t>(size, int64_t(1) << 31))));
    int64_t j = j0;
    for (int64_t b0 = j0; b0 + W <= j1; b0 = j) {
        uint32_t bad = 0;  // lanes below the one before them, or at or beyond size (unsigned)
        for (const int64_t e = std::min(j1, b0 + kAscendsBlock); j + W <= e; j += W) {
            const __m512i a = _mm512_loadu_si512(iv + j - 1), b = _mm512_loadu_si512(iv + j);
            if constexpr (sizeof(I) == 8)
                bad |= _mm512_cmplt_epi64_mask(b, a) | _mm512_cmpge_epu64_mask(b, vsize);
            else
                bad |= _mm512_cmplt_epi32_mask(b, a) | _mm512_cmpge_epu32_mask(b, vsize);
        }
        if (bad) return 0;
    }
    return j;
}
#endif
// Whether iv[j0..j1) lie in [0, size) and never descend, the first not below `floor` (negative
// indices, which could name the same targets as others, are not taken); stops at the first block
// of kAscendsBlock that fails.
template <class I> inline bool ascends(const I* iv, int64_t j0, int64_t j1, int64_t size, int64_t floor) {
    if (j0 >= j1) return true;
    if (int64_t(iv[j0]) < floor || uint64_t(int64_t(iv[j0])) >= uint64_t(size)) return false;
    int64_t j = j0 + 1;
#ifdef SCATTERX_HAVE_F16C_PATH
    if (list_width() == 512) {
        const int64_t done = ascends_avx512<I>(iv, j, j1, size);
        if (done == 0) return false;
        j = done;
    }
#endif
    for (int64_t b0 = j; b0 < j1; b0 += kAscendsBlock) {
        int ok = 1;
        for (int64_t k = b0; k < std::min(j1, b0 + kAscendsBlock); ++k)
            ok &= int(uint64_t(int64_t(iv[k])) < uint64_t(size)) & int(iv[k] >= iv[k - 1]);
        if (!ok) return false;
    }
    return true;
}
// The setting in force (tests and measurements turn it off).
inline bool& fiber_by_positions() {
    static bool on = true;
    return on;
}
// An ascending fiber's runs of 16-bit float adds or products (each half of the split by
// positions), in kAscChains chains side by side: each window of kAscWindow updates is cut into
// kAscChains parts at changes of target, and the parts are walked together, each with its
// target's running value in a register. The index ascends, so no two parts share a target, and
// every target still gets its updates in order: the element loop's bits. A float16 or bfloat16
// step converts, adds and rounds, and element by element each waits on the one before. A cut
// looks kAscCutReach updates on for the change of target; a run that goes on further is left
// whole in one part. Stop 64, the Intel virtual machine (family 6 model 167), one process, two
// threads, the setting (ascending_chains) in turn, six rounds of medians of seven calls, 1e7
// sorted updates into 1e5 targets, bits the same, one chain / four: bfloat16 adds 21.25 / 14.87
// ms, float16 adds 33.35 / 26.05, bfloat16 products 21.49 / 14.50 (faster in 6 of 6 each); into
// 1000 targets, whose runs of 10 000 leave every cut to fail, 21.47 / 22.19 (1 of 6). Float32
// and float64 adds and products were slower in four chains (one build with a switch, float64
// adds 7.83 / 10.48, float32 6.59 / 7.05; docs/performance.md, "Stop 64").
inline constexpr int kAscChains = 4;
inline constexpr int64_t kAscWindow = 1024;
inline constexpr int64_t kAscCutReach = 64;
template <class T, class I, Reduction R>
inline void apply_ascending_in_chains(T* ov, const I* iv, const T* uv, int64_t n) {
    static_assert(kAscChains == 4);
    for (int64_t w0 = 0; w0 < n; w0 += kAscWindow) {
        const int64_t w1 = std::min(n, w0 + kAscWindow);
        int64_t cut[kAscChains + 1];
        cut[0] = w0, cut[kAscChains] = w1;
        for (int c = 1; c < kAscChains; ++c) {
            int64_t p = std::max(cut[c - 1], w0 + (w1 - w0) * c / kAscChains);
            const int64_t reach = std::min(w1, p + kAscCutReach);
            while (p > w0 && p < reach && iv[p] == iv[p - 1]) ++p;
            cut[c] = p == reach && p < w1 ? cut[c - 1] : p;
        }
        int64_t s[kAscChains], len[kAscChains], least = w1 - w0, most = 0;
        I at[kAscChains];
        T acc[kAscChains];
        for (int c = 0; c < kAscChains; ++c) {
            s[c] = cut[c], len[c] = cut[c + 1] - cut[c];
            least = std::min(least, len[c]), most = std::max(most, len[c]);
            at[c] = len[c] ? iv[s[c]] : I(0);
            acc[c] = len[c] ? ov[at[c]] : T{};
        }
        // Named, so that the chains can stay in registers: two earlier versions that stepped
        // them in the arrays ran slower still (docs/performance.md, "Stop 64").
        I at0 = at[0], at1 = at[1], at2 = at[2], at3 = at[3];
        T a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
        auto step = [&](T& a, I& t, int64_t j) __attribute__((always_inline)) {
            const I x = iv[j];
            if (x != t) ov[t] = a, t = x, a = ov[x];
            Reducer<R>::apply(a, uv[j]);
        };
        // The next window's streams, asked for four updates a step.
        auto ask = [&](int64_t k) __attribute__((always_inline)) {
            if (w1 + kAscChains * k < n) {
                __builtin_prefetch(iv + w1 + kAscChains * k);
                __builtin_prefetch(uv + w1 + kAscChains * k);
            }
        };
        int64_t k = 0;
        for (; k < least; ++k) {
            ask(k);
            step(a0, at0, s[0] + k), step(a1, at1, s[1] + k), step(a2, at2, s[2] + k), step(a3, at3, s[3] + k);
        }
        for (; k < most; ++k) {
            ask(k);
            if (k < len[0]) step(a0, at0, s[0] + k);
            if (k < len[1]) step(a1, at1, s[1] + k);
            if (k < len[2]) step(a2, at2, s[2] + k);
            if (k < len[3]) step(a3, at3, s[3] + k);
        }
        if (len[0]) ov[at0] = a0;
        if (len[1]) ov[at1] = a1;
        if (len[2]) ov[at2] = a2;
        if (len[3]) ov[at3] = a3;
    }
}
// Whether apply_ascending_in_chains takes T and R: the 16-bit floats' adds and products.
template <class T, Reduction R>
inline constexpr bool ascends_in_chains_v = (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) &&
                                            (R == Reduction::add || R == Reduction::mul);
// The setting in force (tests turn it off to compare with the element loop).
inline bool& ascending_chains() {
    static bool on = true;
    return on;
}
// One contiguous fiber (na elements) into `size` contiguous targets, split by positions as above
// when its index ascends; `src` as in scatter_fiber_by_targets. Returns whether it was taken (and
// then every index was in bounds).
template <class T, class I, Reduction R>
bool scatter_fiber_by_positions(T* ov, const I* iv, const T* uv, int64_t na, int64_t size, const char* src,
                                int64_t sstr) {
    constexpr int64_t N = sizeof(T);
    if (!ascends<I>(iv, 0, std::min(na, kSplitSample), size, 0)) return false;
    int64_t cut = na / 2;
    while (cut < na && iv[cut] == iv[cut - 1]) ++cut;
    if (cut == na || !in_bounds(iv[cut - 1], size)) return false;
    const int64_t last0 = normalise(iv[cut - 1], size);
    std::atomic<int> passed{0}, checked{0};
    ThreadPool::instance().run(2, [&](int w, int nw) {
        if (nw < 2) return;  // the pool is busy: not taken
        const int64_t j0 = w == 0 ? 0 : cut, j1 = w == 0 ? cut : na;
        passed.fetch_add(int(ascends<I>(iv, j0, j1, size, w == 0 ? 0 : last0 + 1)), std::memory_order_relaxed);
        checked.fetch_add(1, std::memory_order_acq_rel);
        wait_until([&] { return checked.load(std::memory_order_acquire) == 2; });
        if (passed.load(std::memory_order_relaxed) < 2) return;
        const int64_t lo = w == 0 ? 0 : last0 + 1, hi = w == 0 ? last0 + 1 : size;
        if (src) copy_run(reinterpret_cast<char*>(ov + lo), N, src + lo * sstr, sstr, hi - lo, N);
        if constexpr (ascends_in_chains_v<T, R>)
            if (ascending_chains()) {
                if (w == 0) took(Path::ascending_chains);
                return apply_ascending_in_chains<T, I, R>(ov, iv + j0, uv + j0, j1 - j0);
            }
        bool bad = false;  // every index was checked
        ScatterBlock<T, I, R>{size, N, &bad}.fiber(reinterpret_cast<char*>(ov), reinterpret_cast<const char*>(iv + j0),
                                                   reinterpret_cast<const char*>(uv + j0), j1 - j0,
                                                   int64_t(sizeof(I)), N);
    });
    if (passed.load() < 2) return false;
    took(Path::fiber_by_positions);
    return true;
}

// Returns false when an out-of-bounds index was met (it was skipped; the caller reports it).
// With `src` (array 3 of the geometry, which must cover all fibers), each block of fibers first
// copies its fibers of src into out, so the copy of data is fused with the scatter: the rows are
// still in cache when the updates reach them, and the copy is split like the fibers.
template <class T, class I, Reduction R>
bool scatter_kernel(const Geometry& g, char* out, const char* indices, const char* updates,
                    const char* src = nullptr) {
    char* base[4] = {out, const_cast<char*>(indices), const_cast<char*>(updates), const_cast<char*>(src ? src : out)};
    const FiberSpace fs = fiber_space(g);
    if (fs.nfib == 0 || fs.na == 0) {
        if (src && fs.nfib > 0) fused_copy_only(g, fs, base, int64_t(sizeof(T)));
        return true;
    }
    // Axis before the inner fiber dimension: walk each axis position across the block of fibers
    // (contiguous inner loop). Axis after it: finish one fiber before the next.
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    // Only fibers are split: one fiber's updates stay in order on one thread. (Splitting a few
    // long fibers by destination range was measured: each thread then pays a filter on every
    // update, about twice the cost of applying it, so two threads gain nothing.)
    const int fparts = choose_parts(fs.nfib, fs.nfib * std::max(fs.na, src ? g.axis_size : 0)).first;
    std::atomic<bool> bad{false};
    if (fs.nfib == 1 && fs.na >= kReadAheadMin && ThreadPool::instance().num_threads() > 1 &&
        ScatterBlock<T, I, R>{g.axis_size, g.axis_stride, nullptr}.contiguous(fs.astr[1], fs.astr[2])) {
        if (fiber_by_positions()) {
            bool taken = false;
            for_each_run(fs.f, base, 0, 1, [&](char* const* p, int64_t, const int64_t*) {
                taken = scatter_fiber_by_positions<T, I, R>(
                    reinterpret_cast<T*>(p[0]), reinterpret_cast<const I*>(p[1]), reinterpret_cast<const T*>(p[2]),
                    fs.na, g.axis_size, src ? p[3] : nullptr, g.src_axis_stride);
            });
            if (taken) return true;
        }
        const int64_t table = g.axis_size * int64_t(sizeof(T));
        if (table > kSplitFiberBytes && fiber_split_pays<T, R>(table)) {
            bool split = false, ok = true;
            for_each_run(fs.f, base, 0, 1, [&](char* const* p, int64_t, const int64_t*) {
                const I* iv = reinterpret_cast<const I*>(p[1]);
                if (!fiber_splits_evenly<I>(iv, fs.na, g.axis_size, kSplitFiberParts)) return;
                split = true;
                ok = scatter_fiber_by_targets<T, I, R>(kSplitFiberParts, reinterpret_cast<T*>(p[0]), iv,
                                                       reinterpret_cast<const T*>(p[2]), fs.na, g.axis_size,
                                                       src ? p[3] : nullptr, g.src_axis_stride);
            });
            if (split) return ok;
        }
        std::atomic<int64_t> progress{0};
        ThreadPool::instance().run(2, [&](int w, int) {
            for_each_run(fs.f, base, 0, 1, [&](char* const* p, int64_t, const int64_t*) {
                if (w == 1) {  // counted where the reader runs (not on a busy pool's one thread)
                    took(Path::fiber_reader);
                    return read_ahead(p[1], sizeof(I), p[2], sizeof(T), fs.na, progress);
                }
                bool local_bad = false;
                ScatterBlock<T, I, R> sb{g.axis_size, g.axis_stride, &local_bad, &progress};
                if (src) copy_run(p[0], g.axis_stride, p[3], g.src_axis_stride, g.axis_size, int64_t(sizeof(T)));
                sb.fiber(p[0], p[1], p[2], fs.na, fs.astr[1], fs.astr[2]);
                progress.store(fs.na, std::memory_order_release);
                if (local_bad) bad.store(true, std::memory_order_relaxed);
            });
        });
        return !bad.load();
    }
    constexpr int64_t N = sizeof(T);
    // Rows of one target each: a stride-0 index row, or a contiguous index whose first chunk of
    // rows holds one value a row (a random index fails at its first row's second element).
    // On one thread too, for a large call with a stride-0 index row: the one thread then lists
    // and applies every row, asking for them own_ahead_bytes() ahead, as each of several threads
    // does for its own. Stop 61, the Intel virtual machine (family 6 model 167), one build with
    // a switch, one process, one thread, eight rounds of medians of nine calls, bits the same:
    // scatter_rows' walk (below) / this one: mp_add_bf16 17.20 / 11.36 ms, mp_add 18.71 / 17.62,
    // mp_add_i32 18.38 / 16.43, vjp_gather 18.11 / 16.94 (faster in 8 of 8 each); six rounds:
    // mp_add_f16 10.97 / 8.02. mp_add_dense, a contiguous index, 33.80 / 34.08 (0 of 8) keeps
    // the walk below. (An earlier set of eight rounds had mp_add at 16.68 / 16.92, 0 of 8.)
    const bool list_rows = fparts > 1 || (fs.f.stride[1][0] == 0 && fs.nfib * fs.na >= kParallelGrain);
    if (axis_outer && g.s.ndim == 2 && list_rows && fs.f.stride[0][0] == N && fs.f.stride[2][0] == N &&
        (fs.f.stride[1][0] == 0 ||
         (fs.f.stride[1][0] == int64_t(sizeof(I)) &&
          all_equal<I>(indices, fs.nfib, int64_t(sizeof(I))) &&
          constant_rows<I>(indices, std::min(fs.na, kVerifyRows), fs.astr[1], fs.nfib)))) {
        took(Path::rows_by_target);
        return scatter_by_target_rows<T, I, R>(g, fs, fparts, out, indices, updates, src);
    }
    // A large call whose blocks of target rows fit the stage works in a scratch (stage_rows).
    const int64_t footprint = 2 * fs.nfib * g.axis_size * N + volume(g.s.shape, g.s.ndim) * (N + int64_t(sizeof(I)));
    const bool stage = src && axis_outer && streams(footprint);
    PathsSeen seen;
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        bool local_bad = false;
        ScatterBlock<T, I, R> sb{g.axis_size, g.axis_stride, &local_bad};
        if (stage && count > 1 && in[0] == N && g.axis_size * count * N <= kStageBytes &&
            stage_rows(sb, p, count, in, fs.na, fs.astr, g.src_axis_stride)) {
            seen.add(PathsSeen::bit(Path::stage_rows));
        } else if (count == 1 || !axis_outer) {
            // Without a fused copy (out=data), a short fiber dense along the axis is asked for
            // whole kSpanAhead fibers ahead, as the gather does: its lines are then in the cache
            // when the updates reach them at random. Stop 35, the Intel machine, one build with
            // a switch, alternating processes, eight rounds of medians of nine calls, out=data:
            // rows_none 3.48 -> 1.33 ms, rows_none_f16 2.49 -> 1.44, rows_none_i32 2.97 -> 1.40
            // (a new output took 2.4-3.6 ms there: out=data had been the slower); asking also
            // for the first fibers before the walk, 1.72 / 1.53 / 1.58.
            const bool span = !src && g.axis_stride == N && g.axis_size * N <= kSpanBytes;
            for (int64_t k = 0; k < count; ++k) {
                if (span && k + kSpanAhead < count) prefetch_lines(p[0] + (k + kSpanAhead) * in[0], g.axis_size * N);
                if (src) copy_run(p[0] + k * in[0], g.axis_stride, p[3] + k * in[3], g.src_axis_stride, g.axis_size, N);
                sb.fiber(p[0] + k * in[0], p[1] + k * in[1], p[2] + k * in[2], fs.na, fs.astr[1], fs.astr[2]);
            }
        } else {
            if (src) {
                for (int64_t a = 0; a < g.axis_size; ++a)
                    copy_run(p[0] + a * g.axis_stride, in[0], p[3] + a * g.src_axis_stride, in[3], count, N);
            } else if (in[0] == N) {
                // No copy brings the block's target rows in (out=data): read them in
                // (read_rows_in) before the updates reach them at random.
                warm_rows(p[0], g.axis_size, g.axis_stride, count * N, fs.na * count);
            }
            scatter_rows(sb, p, count, in, fs.na, fs.astr);
        }
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    return !bad.load();
}

// gather_elements_at asks for its index stream this many bytes ahead, although it is read in order:
// on the Zen 3 machine the hardware prefetcher alone left the walk waiting on it (stop 24, one
// process alternating, two threads, medians of seven calls: gather 1e7 float64 from 1e5
// (gather_hist) 13.4 -> 11.0 ms, faster in 9 of 10 rounds; 256 / 512 / 2048 bytes ahead 12.6 /
// 11.3 / 11.2 ms; gather_rows 0.96 -> 0.84 ms, 7 of 8; gather_rows_bf16 0.66 -> 0.62, 6 of 8).
// Old and new builds in alternating processes: gather_hist 11.95 -> 9.55 ms, 6 of 6 rounds;
// gather_rows 1.30 -> 1.35 ms, 3 of 8 (no difference shown). The same request in the
// middle-axis gather (512 to 2048 bytes ahead) and in the scatter's and the mul backward's row
// walks measured no gain.
inline constexpr int64_t kGatherIndexAheadBytes = 1024;

// Elements of a gather: out[j] = the N bytes at src + j * step + v * stride, v the normalised
// value of iv[j], for j in [0, n) (step 0: the elements of one fiber, a contiguous one along the
// axis; step N: a row of fibers gathered along an outer axis, element j from fiber j); an
// out-of-bounds index is skipped and makes it return false. The lines [next, next + 64 * lines)
// of a later fiber are prefetched along the way, spread over the elements; with `later` (the
// indices of a later row of fibers, step N, or of the same fiber's elements further on, step 0),
// so are their random source elements, four with each four of these (see gather_ahead and
// kFiberGatherAhead). Four indices share one branch. Its callers are functions of their own, not
// inlined: in the module's large translation unit the loop written inline in the kernel ran 1.4x
// slower than compiled alone (last-axis gather of 4096 x 256 from 4096 x 1024 float16, two threads:
// 1.05-1.10 ms inline, 0.73-0.76 ms with the compiler's inlining limits raised, 0.64-0.72 ms as
// one).
template <int64_t N, class I, class Stride, class Step>
inline bool gather_elements_at(const I* iv, int64_t n, const char* src, Stride stride, Step step, char* out,
                               int64_t size, const char* next, int64_t lines, const I* later = nullptr) {
    const uint64_t limit = uint64_t(size);
    const int64_t per = lines > 0 ? std::max<int64_t>(1, (4 * lines + n - 1) / std::max<int64_t>(n, 1)) : 0;
    int64_t line = 0;
    bool bad = false;
    auto put = [&](int64_t j, int64_t v) { std::memcpy(out + j * N, src + j * step + v * stride, size_t(N)); };
    // Indices [j, j + count) one by one, negative ones and bad ones included.
    auto each = [&](int64_t j, int64_t count) {
        each_index(iv + j, count, size, bad, [&](int64_t q, int64_t v) { put(j + q, v); });
    };
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        for (int64_t q = 0; q < per && line < lines; ++q) __builtin_prefetch(next + 64 * line++);
        __builtin_prefetch(reinterpret_cast<const char*>(iv + j) + kGatherIndexAheadBytes);
        if (later) {
            for (int64_t q = j; q < j + 4; ++q) {
                if constexpr (Step{} == 0) {
                    // A fiber's own elements further on (kFiberGatherAhead), without a branch: a
                    // negative index normalised, one out of bounds asking for the first element.
                    // With the branch below, which indices of random sign mispredict, 1e6 of them
                    // into 8 MB of float64 took 5.9 / 8.8 ms none / 32 ahead, without it 5.6 / 4.0
                    // (stop 71, one process, five rounds of medians of seven, two threads).
                    int64_t w = int64_t(later[q]);
                    w += size & (w >> 63);
                    w = uint64_t(w) < limit ? w : 0;
                    __builtin_prefetch(src + w * stride);
                } else {
                    // A later row's: its negative indices are not asked for. Without the branch
                    // (as above) gather_max0 took 19.6 -> 22.7 and 18.4 -> 22.9 ms (two samples
                    // in each process, faster in 4 and 1 of 10 rounds of alternating processes,
                    // stop 71).
                    const uint64_t w = uint64_t(int64_t(later[q]));
                    if (w < limit) __builtin_prefetch(src + q * step + int64_t(w) * stride);
                }
            }
        }
        const uint64_t a = uint64_t(int64_t(iv[j])), b = uint64_t(int64_t(iv[j + 1]));
        const uint64_t c = uint64_t(int64_t(iv[j + 2])), d = uint64_t(int64_t(iv[j + 3]));
        if ((a < limit) & (b < limit) & (c < limit) & (d < limit)) [[likely]] {
            put(j, int64_t(a)), put(j + 1, int64_t(b)), put(j + 2, int64_t(c)), put(j + 3, int64_t(d));
        } else {
            each(j, 4);
        }
    }
    each(j, n - j);
    if (line < lines) prefetch_lines(next + 64 * line, 64 * (lines - line));
    return !bad;
}

// A gather of one contiguous fiber from a source beyond kFiberGatherFarBytes asks for the source
// element of the index this many elements on while it reads the one at hand (gather_fiber,
// through gather_elements_at's `later`): its reads land at random in a table that the cache does
// not hold, and the core alone keeps too few of those misses in flight (our reading). Until stop
// 71 only the index stream was asked for ahead. Stop 71, the Zen 3 machine (32 MB of L3), two
// threads, 1e7 random indices. One build with a switch, one process, rounds of medians of nine
// calls, int64 indices into float64 tables, none / 16 / 24 / 32 ahead (five rounds): 8 MB 32.1 /
// 22.5 / 23.7 / 20.9 ms, 32 MB 87.1 / 60.3 / 58.3 / 51.4, 80 MB 94.7 / 71.1 / 67.0 / 70.2, 2 MB
// 12.5 / 13.0 / 12.9 / 13.1; none / 8 / 16 / 24 (six rounds): 3.2 MB 13.5 / 13.1 / 14.1 / 12.8,
// 0.8 MB (`gather_hist`'s) 12.2 / 12.5 / 13.5 / 11.9. Old and new builds in alternating
// processes (ten rounds of medians of seven, 32 ahead from 2 MB on): 32 MB 78.7 -> 48.8 ms and
// 16 MB of float32 by int32 indices 56.4 -> 40.6 (faster in 9 of 10 each), but 8 MB 16.0 ->
// 19.5 (4 of 10) and 2.4 MB 12.1 -> 14.0 (0 of 10); hence the threshold, between 8 and 16 MB
// here (the switch's "none" had run the new code without the requests: our guess is that it
// did not stand for the old code's loop).
inline constexpr int64_t kFiberGatherFarBytes = int64_t(8) << 20;
inline constexpr int64_t kFiberGatherAhead = 32;

// A gather whose output is written by streaming stores gathers its elements a run of this many
// bytes at a time into a buffer (in L1), which stream_copy writes out: whole lines by one 64-byte
// store each where the CPU has them, instead of one streaming store per element. Standalone, two
// threads, 1e7 float64 gathered from 1e5 (gather_hist), medians of nine calls, eight rounds in
// one process (stop 42, the Intel machine): one 8-byte store per element 18.8-19.4 ms; runs of
// 64 elements 14.6-14.8 with 64-byte stores, 16.8-17.0 with 16-byte ones; runs of 32 elements
// 14.1-16.0, of 256 15.3-16.3.
inline constexpr int64_t kGatherRunBytes = 512;
// Elements [0, n) of a gather into out by streaming stores (the caller fences), a run at a time:
// fill(j0, m, buf) gathers elements [j0, j0 + m) into buf and returns false when one of their
// indices was out of bounds; such a run is not written (the call fails, and its output is
// either new and dropped or never written: a caller's `out` has every index checked first).
// The runs after the first start on a line of out where the element size allows
// (first_run_bytes).
template <int64_t N> inline int64_t first_run_bytes(const char* out) {
    const int64_t offset = int64_t(reinterpret_cast<uintptr_t>(out) & 63);
    return offset % N == 0 ? kGatherRunBytes - offset : kGatherRunBytes;
}
template <int64_t N, class Fill> inline bool stream_runs(int64_t n, char* out, Fill&& fill) {
    alignas(64) char buf[kGatherRunBytes];
    constexpr int64_t run = kGatherRunBytes / N;
    bool ok = true;
    for (int64_t j0 = 0, m = std::min(n, first_run_bytes<N>(out) / N); j0 < n;
         j0 += m, m = std::min(run, n - j0)) {
        if (fill(j0, m, buf))
            stream_copy(out + j0 * N, buf, m * N);
        else
            ok = false;
    }
    return ok;
}

// One contiguous fiber of a gather (gather_elements_at, step 0); with `Stream`, out is written by
// streaming stores, a run at a time (stream_runs; the caller fences), and the prefetch of the
// later fiber's lines is shared out over the runs.
template <int64_t N, class I, bool Stream, bool Far>
[[gnu::noinline]] bool gather_fiber(const I* iv, int64_t n, const char* src, int64_t stride, char* out,
                                    int64_t size, const char* next, int64_t lines) {
    constexpr std::integral_constant<int64_t, 0> along;
    // A source beyond kFiberGatherFarBytes (`Far`): its elements asked for ahead
    // (kFiberGatherAhead). A template parameter, so that other fibers run the loop without it:
    // as a run-time choice it made the last-axis gather of 4096 x 256 from 4096 x 1024 float32
    // slower, 0.81 -> 1.03 ms (faster in 1 of 6 rounds of alternating processes), where as a
    // template parameter 1.06 / 0.98 ms (7 of 10; our reading: the loop's code).
    constexpr int64_t ahead = Far ? kFiberGatherAhead : 0;
    // Elements [j, j + m) to `to`; those ahead asked for while they lie within the fiber.
    auto fiber = [&](int64_t j, int64_t m, char* to, const char* nx, int64_t nl) {
        const I* later = Far && j + m + ahead <= n ? iv + j + ahead : nullptr;
        // Adjacent elements (a last-axis gather): the stride as a constant, which the addressing
        // folds into a scaled index instead of a multiplication per element.
        if (stride == N)
            return gather_elements_at<N, I>(iv + j, m, src, std::integral_constant<int64_t, N>{}, along, to, size, nx,
                                            nl, later);
        return gather_elements_at<N, I>(iv + j, m, src, stride, along, to, size, nx, nl, later);
    };
    if constexpr (!Stream && !Far) {
        return fiber(0, n, out, next, lines);
    } else if constexpr (!Stream) {
        // The last `ahead` elements without asking (none lies ahead of them).
        const int64_t cut = std::max<int64_t>(0, n - ahead);
        const bool ok = fiber(0, cut, out, next, lines);
        return fiber(cut, n - cut, out + cut * N, nullptr, 0) && ok;
    } else {
        return stream_runs<N>(n, out, [&](int64_t j0, int64_t m, char* buf) {
            const int64_t l0 = lines * j0 / n, l1 = lines * (j0 + m) / n;
            return fiber(j0, m, buf, next ? next + 64 * l0 : next, l1 - l0);
        });
    }
}

// Rows of fibers gathered along an outer axis by streaming stores (the caller fences): row r of
// `rows`, its n indices at ip + r * istr, gives out[r * n + k] = the N bytes at src + k * N + v *
// stride, v the normalised value of its k-th index. out's rows follow one another (the caller
// passes one row when they do not), so the rows go out as one run of elements, gathered
// kGatherRunBytes at a time into a buffer that stream_copy writes out (the runs after the first
// start on a line of out where the element size allows, as in stream_runs), not a buffer and its
// stores per row. A row after the first whose indices hold one value ends the call (all_equal:
// such rows go to gather_whole_rows); returns the rows gathered. The first `with_later` rows ask
// for the random source elements of the row `ahead` rows later along the way
// (gather_elements_at). An out-of-bounds index clears `ok`, and the run it is in is not written.
// Used by the gather along an outer axis since stop 24 (then by 16-byte stores of four
// elements: gather_mid 4.45 -> 3.30 ms against one store per element), a row per call until
// stop 44.
template <int64_t N, class I>
[[gnu::noinline]] int64_t stream_gather_rows(const char* ip, int64_t istr, int64_t rows, int64_t n, int64_t size,
                                             char* out, const char* src, int64_t stride, int64_t ahead,
                                             int64_t with_later, bool& ok) {
    constexpr std::integral_constant<int64_t, N> step;
    alignas(64) char buf[kGatherRunBytes];
    int64_t cap = first_run_bytes<N>(out);  // the run being filled
    int64_t have = 0;   // its bytes gathered so far
    bool good = true;   // no bad index among them
    auto flush = [&] {
        if (good)
            stream_copy(out, buf, have);
        else
            ok = false;
        out += have, have = 0, good = true, cap = kGatherRunBytes;
    };
    int64_t r = 0;
    for (; r < rows; ++r) {
        if (r > 0 && all_equal<I>(ip + r * istr, n, int64_t(sizeof(I)))) break;
        const I* iv = reinterpret_cast<const I*>(ip + r * istr);
        const I* later = r < with_later ? reinterpret_cast<const I*>(ip + (r + ahead) * istr) : nullptr;
        for (int64_t k0 = 0; k0 < n;) {
            const int64_t m = std::min(n - k0, (cap - have) / N);
            if (!gather_elements_at<N, I>(iv + k0, m, src + k0 * N, stride, step, buf + have, size, nullptr, 0,
                                          later ? later + k0 : nullptr))
                good = false;
            have += m * N, k0 += m;
            if (have == cap) flush();
        }
    }
    if (have > 0) flush();
    return r;
}

// A gather along an outer axis from rows beyond the cache (`far`) asks for the random source
// elements of the row that starts about this many elements later. Stop 19, on Emerald Rapids
// (2 MB of L2, 300 MB of L3), did without: prefetching 8 rows (256 elements) ahead made
// gather_max0 (200000 x 32 from 100000 x 32 float32) slower, 16.2 -> 20.5 and 21.0 -> 22.5 ms
// in alternating processes, 10 of 11 rounds; the out-of-order core alone overlapped enough of
// the misses. On the Zen 3 machine (512 KB of L2, 32 MB of L3 filled only by what L2 evicts, so
// the table's lines come from memory) it is the other way round (stop 23, one process
// alternating, two threads, medians of six rounds of five calls): none 58.3 ms, 64 elements
// ahead 19.0, 128 ahead 20.6, 256 ahead 22.2, every round; in a slower hour, 32 / 64 / 96
// ahead 46.2 / 42.2 / 42.9. Rows in the cache are not prefetched: gather_mid, whose slabs are
// read in first (warm_rows), took 4.6 -> 6.7 ms with the prefetch. On the Intel machine of stop
// 35 (48 KB L1, 2 MB L2 per core, 105 MB L3) Emerald Rapids' finding held again (one build with
// a switch, alternating processes, medians of seven calls): gather_max0 with 64 ahead / none /
// 32 ahead 21.8 / 17.2 / 17.5 ms (six rounds), 22.1 / 19.2 / 20.1 (eight rounds; none faster
// than 64 in 5 of 8), while the backward of max/min, whose walks also take rows_ahead, needs
// it there (vjp_max 74.7 / 102.0 / 75.7, vjp_min 81.0 / 127.3 / 79.5). So on Intel CPUs the
// gather along an outer axis asks for no random source elements ahead (until stop 42, below; the
// rows of one target of message passing are still asked for, kPrefetchRows ahead). Old and new
// builds in alternating processes, eight rounds: gather_max0 20.1 -> 17.1 ms (faster in 8 of 8),
// gather_mid 1.35 / 1.40 (4 of 8; its rows are in the cache, not asked for either way). Stop 42,
// the same Intel machine, with a row's elements gathered into a buffer (stream_runs), one build
// with a switch, one process, ten rounds twice: none / 32 / 64 / 128 / 256 elements ahead 46.4 /
// 29.1 / 35.2 / 34.5 / 35.1 ms and 42.6 / 29.0 / 31.3 / 31.1 / 32.1, 32 ahead faster than none
// in 20 of 20 rounds (in stop 35's measurement 32 ahead had cost nothing). So Intel CPUs ask for
// the elements kGatherAheadIntel ahead (gather_ahead), other CPUs kGatherAhead ahead (until
// stop 44, below). Stop 43,
// on a Zen 5 virtual machine (1 MB of L2 per core, 32 MB of L3), one build with a switch, one
// process: none / 32 / 64 elements ahead 4.88 / 5.01 / 5.00 ms (sixteen rounds; none faster
// than 64 in 10, 32 in 8), 128 / 256 / 512 ahead 6.11 / 12.2 / 12.5 against 5.78 (ten rounds):
// kGatherAhead stays. Stop 44, with the rows gathered up to kWholeRows per call
// (stream_gather_rows), the same machine and way, medians of seven calls: 64 / 96 / 128
// elements ahead (2 / 3 / 4 rows of 32) 5.71 / 5.38 / 5.96, 4.76 / 4.53 / 5.57, 4.92 / 4.49 /
// 5.36 ms (eight rounds each; 96 faster than 64 in 7, 6, 7 of 8; 128 in 2, 1, 2), and 5.59 /
// 4.50 / 5.17 (8 rounds; 96 in 8 of 8), 5.69 / 5.01 / 5.84 (7 of 8); one thread 9.49 / 8.22 /
// 9.52 (5 of 6): other CPUs than Intel's ask kGatherAheadOther ahead since.
inline constexpr int64_t kGatherAhead = 64;
inline constexpr int64_t kGatherAheadIntel = 32;
inline constexpr int64_t kGatherAheadOther = 96;
inline int64_t gather_ahead() { return cpu_is_intel() ? kGatherAheadIntel : kGatherAheadOther; }
// The rows ahead that hold about `elements` random targets, for a walk of rows of `per_row`
// of them: kGatherAhead for the backward of max/min's (since stop 32), gather_ahead() for the
// gather's.
inline int64_t rows_ahead(int64_t per_row, int64_t elements = kGatherAhead) {
    return std::max<int64_t>(1, elements / per_row);
}

// Rows [j0, j1) of a gather along an outer axis whose index rows each hold one value (a
// stride-0 index row: message passing; or a materialised one whose rows were found so): out's
// row j (row_bytes at out + j * ostr) is src's row v (at src + v * sstr), v the normalised
// index at ip + j * istr; with `far`, the row of the index kPrefetchRows later is asked for
// (while before ahead_end: the rows after j1 may hold several values, and then the row of
// their first is asked for in vain). Returns false when an index was out of bounds (its row is
// not written). A function of its own whose arguments are values: in the kernel's loop, where
// they were captured variables, the compiler read them again after every store into a row (a
// store of bytes may alias them). Standalone (two threads, 400000 x 64 float32 rows from 50000
// x 64, medians of nine calls, ten rounds in alternating processes, stop 41): 17.2 ms in the
// loop, 15.4 here; 14.6 with 64-byte streaming stores as well (faster in 9 of 10).
template <class I, bool Stream>
[[gnu::noinline]] bool gather_whole_rows(const char* ip, int64_t istr, int64_t j0, int64_t j1, const char* src,
                                         int64_t sstr, int64_t size, char* out, int64_t ostr, int64_t row_bytes,
                                         bool far, int64_t ahead_end) {
    bool ok = true;
    for (int64_t j = j0; j < j1; ++j) {
        if (far && j + kPrefetchRows < ahead_end) {
            const I ahead = *reinterpret_cast<const I*>(ip + (j + kPrefetchRows) * istr);
            if (in_bounds(ahead, size)) prefetch_lines(src + normalise(ahead, size) * sstr, row_bytes);
        }
        const I raw = *reinterpret_cast<const I*>(ip + j * istr);
        if (!in_bounds(raw, size)) [[unlikely]] {
            ok = false;
            continue;
        }
        const char* row = src + normalise(raw, size) * sstr;
        if constexpr (Stream) stream_copy(out + j * ostr, row, row_bytes);
        else std::memcpy(out + j * ostr, row, size_t(row_bytes));
    }
    return ok;
}

// Rows of a materialised index that the gather checks for one value at a time before it copies
// them (gather_whole_rows).
inline constexpr int64_t kWholeRows = 32;

// Element size only matters for a gather: it moves bytes. Returns false when an out-of-bounds
// index was met (its element was not read).
template <int64_t N, class I> bool gather_kernel(const Geometry& g, const char* data, const char* indices, char* out) {
    char* base[4] = {const_cast<char*>(data), const_cast<char*>(indices), out, const_cast<char*>(data)};
    const FiberSpace fs = fiber_space(g);
    if (fs.nfib == 0 || fs.na == 0) return true;
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    auto [fparts, xparts] = choose_parts(fs.nfib, fs.nfib * fs.na);
    const int64_t inner = fs.f.ndim > 0 ? fs.f.shape[fs.f.ndim - 1] : 1;
    if (axis_outer && fparts > 1 && fs.na >= fparts && fs.nfib / inner < fparts) {
        // Outputs are independent: split the axis positions, so each thread keeps whole rows.
        // (With enough blocks of fibers, splitting those keeps each thread's source region, a
        // slab of a middle-axis call, in its own cache instead of both threads reading all.)
        std::swap(fparts, xparts);
    }
    // The output of a large call is written by streaming stores (see kStreamBytes).
    const int64_t positions = volume(g.s.shape, g.s.ndim);
    const bool stream = streams(positions * (N + int64_t(sizeof(I))) + fs.nfib * g.axis_size * N);
    std::atomic<bool> bad{false};
    PathsSeen seen;
    parallel_blocks(fs, base, fparts, xparts, [&](char* const* p, int64_t count, const int64_t* in,
                                                  int xp, int xn) {
        uint32_t paths = 0;  // the gated paths this block took (see PathsSeen)
        auto [j0, j1] = split_range(fs.na, xp, xn);
        const int64_t* astr = fs.astr;
        // Locals, not captured variables: the byte stores below may alias those, and the
        // compiler would reload them after every store.
        const int64_t size = g.axis_size, dstr = g.axis_stride;
        bool local_bad = false;
        auto move = [&](int64_t j, int64_t k) {
            const I raw = *reinterpret_cast<const I*>(p[1] + j * astr[1] + k * in[1]);
            if (!in_bounds(raw, size)) { local_bad = true; return; }
            const int64_t v = normalise(raw, size);
            std::memcpy(p[2] + j * astr[2] + k * in[2], p[0] + k * in[0] + v * dstr, size_t(N));
        };
        if (count == 1 || !axis_outer) {
            if (astr[1] == int64_t(sizeof(I)) && astr[2] == N) {
                // Contiguous fibers: typed addressing, no stride products.
                const bool span = dstr == N && size * N <= kSpanBytes;
                const bool far_source = size * dstr > kFiberGatherFarBytes;  // see kFiberGatherAhead
                const int64_t lines = (size * N + 63) / 64;
                paths |= (stream ? PathsSeen::bit(Path::gather_stream) : 0) |
                         (far_source ? PathsSeen::bit(Path::gather_far_fiber) : 0);
                for (int64_t k = 0; k < count; ++k) {
                    const char* dp = p[0] + k * in[0];
                    const char* next = span && k + kSpanAhead < count ? dp + kSpanAhead * in[0] : nullptr;
                    const I* iv = reinterpret_cast<const I*>(p[1] + k * in[1]) + j0;
                    char* op = p[2] + k * in[2] + j0 * N;
                    const int64_t ahead = next ? lines : 0;
                    const int64_t m = j1 - j0;
                    const bool ok = far_source
                        ? (stream ? gather_fiber<N, I, true, true>(iv, m, dp, dstr, op, size, next, ahead)
                                  : gather_fiber<N, I, false, true>(iv, m, dp, dstr, op, size, next, ahead))
                        : (stream ? gather_fiber<N, I, true, false>(iv, m, dp, dstr, op, size, next, ahead)
                                  : gather_fiber<N, I, false, false>(iv, m, dp, dstr, op, size, next, ahead));
                    if (!ok) local_bad = true;
                }
            } else {
                for (int64_t k = 0; k < count; ++k)
                    for (int64_t j = j0; j < j1; ++j) move(j, k);
            }
        } else {
            const bool contiguous = in[0] == N && in[2] == N && in[1] == int64_t(sizeof(I));
            const bool broadcast = in[0] == N && in[2] == N && in[1] == 0;  // a stride-0 index row
            const bool far = size * dstr > kCacheBytes;
            // The block's source rows, read in first (read_rows_in), when they fit in the cache
            // and get more reads than they have lines (as the scatter does for out=data): else each
            // line's first read is a miss at random (middle-axis gather, 64 x 256 x 128 from 64 x
            // 512 x 128 float32, two threads, in one process alternating: 9.4 / 7.3 / 7.7 ->
            // 4.5 / 3.2 / 3.5 ms in three rounds; gathers of other shapes unchanged). Only rows
            // whose `count` elements are contiguous (else the row's bytes are not all data's).
            if (in[0] == N) warm_rows(p[0], size, dstr, count * N, (j1 - j0) * count);
            const int64_t ahead_rows = rows_ahead(count, gather_ahead());
            bool was_constant = false;
            // Rows [a, b) of one value each, through gather_whole_rows.
            auto whole_rows = [&](int64_t a, int64_t b) {
                paths |= PathsSeen::bit(Path::gather_whole_rows) | (stream ? PathsSeen::bit(Path::gather_stream) : 0);
                const bool ok = stream ? gather_whole_rows<I, true>(p[1], astr[1], a, b, p[0], dstr, size, p[2],
                                                                   astr[2], count * N, far, j1)
                                       : gather_whole_rows<I, false>(p[1], astr[1], a, b, p[0], dstr, size, p[2],
                                                                    astr[2], count * N, far, j1);
                if (!ok) local_bad = true;
            };
            if (broadcast) {
                whole_rows(j0, j1);
                j0 = j1;  // no rows left for the loop below
            }
            for (int64_t j = j0; j < j1; ++j) {
                const I* iv = reinterpret_cast<const I*>(p[1] + j * astr[1]);
                char* op = p[2] + j * astr[2];
                if (contiguous) {
                    // A materialised expanded index: the rows from j on that hold one value,
                    // up to kWholeRows of them, go to gather_whole_rows; a row of several values
                    // (a random index's first) is gathered element by element below. While rows
                    // hold one value, the index rows ahead are asked for (a random index leaves
                    // at its second element). Against a check that stopped at the first
                    // difference (stop 29, one process alternating, 400000 x 64 int64 rows from
                    // 50000 x 64 float32): 37.1 -> 33.2 ms, faster in 8 of 8 rounds; gather_max0
                    // 26.8 / 27.8 ms, no change.
                    int64_t k = j;
                    for (const int64_t last = std::min(j1, j + kWholeRows); k < last; ++k) {
                        if (was_constant && k + kVerifyAhead < j1)
                            prefetch_lines(p[1] + (k + kVerifyAhead) * astr[1], count * int64_t(sizeof(I)));
                        was_constant = all_equal<I>(p[1] + k * astr[1], count, in[1]);
                        if (!was_constant) break;
                    }
                    if (k > j) {
                        whole_rows(j, k);
                        j = k - 1;
                        continue;
                    }
                }
                if (contiguous) {
                    // Random source elements beyond the cache: those of a later row are asked for.
                    paths |= (far ? PathsSeen::bit(Path::gather_far_rows) : 0) |
                             (stream ? PathsSeen::bit(Path::gather_stream) : 0);
                    if (stream) {
                        // The rows from j on that hold several values, up to kWholeRows of them,
                        // in one call (stream_gather_rows), against a row per call. Stop 44, the
                        // Zen 5 machine, one build with a switch, one process, medians of seven
                        // calls, ten rounds each: gather_max0 on two threads 4.54 -> 4.06, 4.41 ->
                        // 3.94, 4.80 -> 4.29 ms (faster in 9, 10, 10 of 10; four rows per call
                        // 3.95, 3.99, 4.48), one thread 8.70 -> 7.98 (8 of 8); gather_mid (a row
                        // fills a run) 1.06 / 1.09 (7 of 10).
                        // The later row's random elements are asked for spread over this row's
                        // elements, not as a burst before them. Stop 43, one build with a
                        // switch, one process: gather_max0 on two threads 5.42 -> 5.01, 5.39 ->
                        // 5.00, 5.57 -> 5.75, 5.87 -> 5.99, 5.12 -> 4.76 ms (spread faster in 9 of
                        // 10, 10 of 10, 6 of 10, 7 of 12, 12 of 12 rounds), on one thread 10.15 ->
                        // 8.70 and 10.65 -> 9.93 (10 and 9 of 10); old and new builds in
                        // alternating processes, six rounds: 5.92 / 5.90 (3 of 6).
                        const int64_t rows = astr[2] == count * N ? std::min(kWholeRows, j1 - j) : 1;
                        const int64_t with_later = far ? std::clamp<int64_t>(j1 - ahead_rows - j, 0, rows) : 0;
                        bool ok = true;
                        const int64_t done = stream_gather_rows<N, I>(p[1] + j * astr[1], astr[1], rows, count, size,
                                                                      op, p[0], dstr, ahead_rows, with_later, ok);
                        if (!ok) local_bad = true;
                        j += done - 1;
                    } else {
                        const I* later = far && j + ahead_rows < j1
                                             ? reinterpret_cast<const I*>(p[1] + (j + ahead_rows) * astr[1])
                                             : nullptr;
                        if (later)
                            for (int64_t k = 0; k < count; ++k)
                                if (in_bounds(later[k], size))
                                    __builtin_prefetch(p[0] + k * N + normalise(later[k], size) * dstr);
                        each_index(iv, count, size, local_bad, [&](int64_t k, int64_t v) {
                            std::memcpy(op + k * N, p[0] + k * N + v * dstr, size_t(N));
                        });
                    }
                    continue;
                }
                for (int64_t k = 0; k < count; ++k) move(j, k);
            }
        }
        if (stream) stream_fence();
        seen.add(paths);
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    return !bad.load();
}

// The longest row of the backward of "none" that a large call stages (take_last_writer).
inline constexpr int64_t kRowStageBytes = int64_t(64) << 10;

// The backward of "none": walking each fiber from its last update to its first, every update
// takes the value at its target and leaves a zero behind. So only the last writer (in row-major
// order) of a target receives that target's gradient, and written positions end at zero. Moves
// bytes only (zero is all-zero bytes for every float and complex type). Arrays: 0 = grad_data
// (holds the output gradient on entry), 1 = indices, 2 = grad_updates. Returns false when an
// out-of-bounds index was met (skipped).
template <int64_t N, class I>
bool take_last_writer(const Geometry& g, char* grad_data, const char* indices, char* grad_updates,
                      const char* src = nullptr) {
    char* base[4] = {grad_data, const_cast<char*>(indices), grad_updates, const_cast<char*>(src ? src : grad_data)};
    const FiberSpace fs = fiber_space(g);
    if (fs.nfib == 0 || fs.na == 0) {
        if (src && fs.nfib > 0) fused_copy_only(g, fs, base, N);
        return true;
    }
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    const int fparts = choose_parts(fs.nfib, fs.nfib * std::max(fs.na, src ? g.axis_size : 0)).first;
    // A large call with a source stages each contiguous row (see below): data's gradient, the
    // source, indices and the update gradients (kStreamBytes).
    const int64_t out_bytes = fs.nfib * g.axis_size * N;
    const bool stream = src && streams(2 * out_bytes + fs.nfib * fs.na * (int64_t(sizeof(I)) + N));
    std::atomic<bool> bad{false};
    PathsSeen seen;
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        // Locals, not captured variables: the byte stores below may alias those.
        const int64_t size = g.axis_size, dstr = g.axis_stride;
        const int64_t* astr = fs.astr;
        bool local_bad = false;
        auto take = [&](int64_t j, int64_t k) {
            const I raw = *reinterpret_cast<const I*>(p[1] + j * astr[1] + k * in[1]);
            if (!in_bounds(raw, size)) { local_bad = true; return; }
            char* target = p[0] + k * in[0] + normalise(raw, size) * dstr;
            std::memcpy(p[2] + j * astr[2] + k * in[2], target, size_t(N));
            std::memset(target, 0, size_t(N));
        };
        if (axis_outer && count > 1) {
            if (src)
                for (int64_t a = 0; a < size; ++a)
                    copy_run(p[0] + a * dstr, in[0], p[3] + a * g.src_axis_stride, in[3], count, N);
            for (int64_t j = fs.na - 1; j >= 0; --j)
                for (int64_t k = 0; k < count; ++k) take(j, k);
        } else {
            // Contiguous fibers (rows along a last axis): typed addressing, no stride products.
            const bool typed = astr[1] == int64_t(sizeof(I)) && astr[2] == N && dstr == N;
            // Staged: each row copied from the source into a per-thread buffer, walked there and
            // written out by streaming stores, so that its lines are not read from memory
            // before they are written (vjp_none 2.81 -> 2.27 ms, medians of six
            // alternating-process rounds, every round faster). The row's update gradients too,
            // into the buffer's tail (stop 22, Zen 3, alternating in one process: 3.9-4.2 ->
            // 3.3-3.5 ms, medians of three runs of nine rounds, 26 of 27 rounds faster), when
            // they are no longer than a staged row.
            const int64_t row_bytes = (size * N + 63) & ~int64_t(63);
            const int64_t u_bytes = fs.na * N <= kRowStageBytes ? fs.na * N : 0;
            char* const stage = stream && typed && size * N <= kRowStageBytes ? thread_scratch(row_bytes + u_bytes) : nullptr;
            char* const ustage = stage && u_bytes ? stage + row_bytes : nullptr;
            seen.add((stage ? PathsSeen::bit(Path::none_backward_staged) : 0) |
                     (ustage ? PathsSeen::bit(Path::none_backward_staged_updates) : 0));
            for (int64_t k = 0; k < count; ++k) {
                if (typed && k + 1 < count) {
                    // The walk goes backwards through the row's indices and gradients, which
                    // the hardware prefetcher follows poorly: ask for the next row's lines now
                    // (standalone, 4096 rows of 1024 float32, 256 updates each, one thread:
                    // 5.8-6.6 -> 4.6-5.1 ms). Staged gradients are not read: nothing to ask.
                    prefetch_lines(p[1] + (k + 1) * in[1], fs.na * int64_t(sizeof(I)));
                    if (!ustage) prefetch_lines(p[2] + (k + 1) * in[2], fs.na * N);
                    if (src) prefetch_lines(p[3] + (k + 1) * in[3], size * N);
                }
                char* const out_row = p[0] + k * in[0];
                char* const row = stage ? stage : out_row;
                if (src) copy_run(row, dstr, p[3] + k * in[3], g.src_axis_stride, size, N);
                if (!typed) {
                    for (int64_t j = fs.na - 1; j >= 0; --j) take(j, k);
                    continue;
                }
                const I* iv = reinterpret_cast<const I*>(p[1] + k * in[1]);
                char* const gu_row = p[2] + k * in[2];
                char* gu = ustage ? ustage : gu_row;
                for (int64_t j = fs.na - 1; j >= 0; --j) {
                    if (!in_bounds(iv[j], size)) {
                        local_bad = true;
                        continue;
                    }
                    char* target = row + normalise(iv[j], size) * N;
                    std::memcpy(gu + j * N, target, size_t(N));
                    std::memset(target, 0, size_t(N));
                }
                if (stage) stream_copy(out_row, stage, size * N);
                if (ustage) stream_copy(gu_row, ustage, fs.na * N);
            }
            if (stage) stream_fence();
        }
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    return !bad.load();
}

template <class T> inline T conj_of(const T& x) {
    if constexpr (is_complex_v<T>) return T{x.re, -x.im};
    else return x;
}
template <class T> inline T one_of() {
    if constexpr (is_complex_v<T>) return T{1, 0};
    else return T(1);
}

// The products P and then the residuals S of the backward of "mul" (below) live in a
// per-thread scratch of this many bytes, a group of whole fibers at a time: room for a whole
// block of vjp_mul's (128 fibers of 2 KB). Measured in alternating processes (stop 14, when
// only S lived there) against a data-sized S: 12.4-12.9 against 11.1-12.8
// ms in three rounds, but 15.2-16.5 against 11.1-15.7 ms in four rounds an hour later, so it
// may cost up to a fifth of vjp_mul's time; with 128 KB (two groups per block) 15.2-15.6
// against 13.9-15.1 ms. What it saves is memory: no array as large as data per call (SPEC
// section 8 allows 5 % of the inputs beyond the outputs; the data-sized S was 29 %).
inline constexpr int64_t kMulScratchBytes = int64_t(256) << 10;
// How many random targets ahead the walks over fibers longer than that ask for (mul_rows).
inline constexpr int64_t kMulTargetsAhead = 128;

// A walk of mul_backward (below) over rows of `c` fibers whose indices and updates are
// contiguous along the fibers (the axis before them), row by row, from the last when `Reverse`:
// each update takes the running product X of its target (P walking forward, S walking back),
// dU = X, or with `Combine` dU = conj(dU * X) (X, then, from the other walk's product), and
// then X *= u. P or S of axis position a, fiber k at ps[a * sa + k]. Rows of
// indices `istr` bytes apart from ip0, of updates and dU `ustr` apart from up0 and dp0. A plain
// loop over values passed in: through the captured references of a generic walk the compiler
// reloaded the arrays' addresses at every update (vjp_mul 13.5 -> 11.6 ms, medians of five
// alternating-process rounds; docs/performance.md). Each walk asks for the rows of indices,
// updates and dU about kRowStreamAhead elements ahead (the backward walk the rows before it,
// against the hardware prefetcher; until stop 43 it asked for the one row before and the
// forward walk for none). Stop 43, the Zen 5 machine, one build with a switch, one process,
// eight rounds of medians of seven calls, vjp_mul (rows of 128): 3.16 ms -> 2.75 / 2.48 / 2.41 /
// 2.51 with both walks asking 1 / 2 / 4 / 8 rows ahead (faster in 7, 7, 7, 8 of 8); the
// forward walk alone 2 / 4 rows ahead 2.60 / 2.62 (8 of 8).
// With `far` (P and S of fibers longer than the scratch, in dD since stop 51, beyond
// the cache), each walk also asks for the random targets of the row about kMulTargetsAhead elements
// later, along the row it works on (each_index_ahead), as the forward scatter does.
// Until stop 50 such fibers went the generic walk (mul_backward's `walk`), with nothing asked
// for: each random P or S waited on memory. The backward of "mul" with the max0 shapes
// (100000 x 32 data, 200000 x 32 random indices, two threads) took 9x the forward's time;
// standalone, one walk of those rows by two threads, 16 fibers each, medians of nine: 35-74 ms
// as it was, 40 with the targets asked for 8 rows ahead, 26-30 with the streams asked for as
// well, 11-17 with S 64-byte aligned on huge pages besides. Old and new builds, alternating
// processes, five rounds of medians of five calls: float32 133.5 -> 44.1 ms, float16 131.9 ->
// 58.1 (medians of the rounds; faster in 5 of 5 each), the bits of both gradients the same.
// One build with a switch, one process, six rounds: 32 / 64 / 256 elements ahead against 128,
// faster in 3 / 4 / 3 of 6 (medians 44.2 / 35.2 / 45.8 against 42.8 ms): within the noise.
// Rows of one fiber (a 1-D call, or a thread's one fiber) took the generic walk too until then;
// as rows of one here (their streams left to the hardware prefetcher), alternating processes,
// four rounds of medians of five, float64, bits the same: 1-D 1e5 <- 1e7 145.7 -> 91.1 ms,
// 400000 x 2 <- 2e6 x 2 56.9 -> 30.0, 1e6 x 2 <- 2e6 x 2 170.3 -> 47.6 (medians of the rounds;
// faster in 4 of 4 each). So do the fibers along a last axis, one after the other (they took the generic
// walk's fiber order until then; alternating processes, four rounds, float32, bits the same):
// 32 x 100000 <- 32 x 200000 44.7 -> 17.7 ms, 64 x 512 x 128 <- 64 x 512 x 64 32.5 -> 25.1,
// 2048 x 512 <- 2048 x 256 6.1 -> 3.75 (medians of the rounds; faster in 4 of 4 each).
template <class T, class I, bool Reverse, bool Combine>
inline void mul_rows(const char* ip0, int64_t istr, const char* up0, char* dp0, int64_t ustr, int64_t na, int64_t c,
                     int64_t size, T* ps, int64_t sa, bool far, bool& bad) {
    constexpr int64_t N = sizeof(T);
    // One fiber (c == 1) is one strided stream each, left to the hardware prefetcher.
    const int64_t ahead = c > 1 ? std::max<int64_t>(1, kRowStreamAhead / c) : 0;
    const int64_t targets_ahead = far ? rows_ahead(c, kMulTargetsAhead) : 0;
    for (int64_t s = 0; s < na; ++s) {
        const int64_t j = Reverse ? na - 1 - s : s;
        const I* ip = reinterpret_cast<const I*>(ip0 + j * istr);
        const T* up = reinterpret_cast<const T*>(up0 + j * ustr);
        T* dp = reinterpret_cast<T*>(dp0 + j * ustr);
        const int64_t later = Reverse ? j - ahead : j + ahead;
        if (ahead && later >= 0 && later < na) {
            prefetch_lines(ip0 + later * istr, c * int64_t(sizeof(I)));
            prefetch_lines(up0 + later * ustr, c * N);
            prefetch_lines(dp0 + later * ustr, c * N);
        }
        const int64_t target_row = Reverse ? j - targets_ahead : j + targets_ahead;
        const I* later_row = targets_ahead && target_row >= 0 && target_row < na
                                 ? reinterpret_cast<const I*>(ip0 + target_row * istr)
                                 : nullptr;
        each_index_ahead(ip, later_row, c, size, bad, [&](int64_t k, int64_t v) {
            T* const pt = ps + v * sa + k;
            const T x = *pt;
            if constexpr (Combine) {
                dp[k] = conj_of(Arith<T>::mul(dp[k], x));
            } else {
                dp[k] = x;
            }
            *pt = Arith<T>::mul(x, up[k]);
        }, [&](int64_t k, int64_t w) { __builtin_prefetch(ps + w * sa + k, 1); });
    }
}

// The pass of mul_backward (below) over a contiguous run of `n` elements whose P lie in a row
// of the scratch: dD = G * conj(P), then S = conj(G) * D in P's place; with `stream`, dD goes
// out by streaming stores, a block at a time from a buffer. A plain loop, which the compiler
// vectorises (the general one, with run-time steps, it did not): vjp_mul 9.9 -> 9.3 ms.
template <class T>
inline void mul_turn(const T* __restrict__ G, const T* __restrict__ D, T* __restrict__ dD, T* __restrict__ ps,
                     int64_t n, bool stream) {
    constexpr int64_t kRun = 64;
    alignas(64) T buf[kRun];
    for (int64_t b0 = 0; b0 < n; b0 += kRun) {
        const int64_t m = std::min(kRun, n - b0);
        T* __restrict__ const dst = stream ? buf : dD + b0;
        for (int64_t b = 0; b < m; ++b) {
            const T gt = G[b0 + b];
            dst[b] = Arith<T>::mul(gt, conj_of(ps[b0 + b]));
            ps[b0 + b] = Arith<T>::mul(conj_of(gt), D[b0 + b]);
        }
        if (stream) stream_copy(reinterpret_cast<char*>(dD + b0), reinterpret_cast<const char*>(buf), m * int64_t(sizeof(T)));
    }
}

// The passes of mul_backward (below) over a contiguous run of `n` elements of dD (x) where dD
// keeps P and S itself: S = conj(G) * D in x, or, with `to_dd`, dD = G * conj(P) from P in x.
template <class T>
inline void mul_settle(const T* G, const T* D, T* x, int64_t n, bool to_dd) {
    if (to_dd) {
        for (int64_t b = 0; b < n; ++b) x[b] = Arith<T>::mul(G[b], conj_of(x[b]));
    } else {
        for (int64_t b = 0; b < n; ++b) x[b] = Arith<T>::mul(conj_of(G[b]), D[b]);
    }
}

// The backward of "mul", without division (zeros and duplicates stay exact), for the compute
// type T. Each update k with target t gets dU[k] = conj(before(k) * R(k)), where before(k) is
// the product of the updates of t that precede k in row-major order and R(k) is conj(G[t]) *
// D[t] times those that follow it, so dU[k] = G[t] * conj(D[t] * before(k) * after(k)); each
// target gets dD[t] = G[t] * conj(product of its updates). Group by group of fibers, while the
// group's part of the arrays is in the cache: P = 1; a forward walk leaves before(k) in dU[k]
// and the product of all updates of t in P[t]; one pass writes dD = G * conj(P) and puts
// S = conj(G) * D in P's place; a backward walk keeps R in S. Arrays: dD is array 0 of the
// geometry, and G and D lie at the same byte offsets, within `extent` bytes; u (updates) is
// array 2 and dU lies at the same offsets as u. P and S live in a per-thread scratch
// (thread_scratch), as many fibers at a time as fit in kMulScratchBytes (before stop 14 every
// call took a scratch as large as data, 29 % of vjp_mul's inputs); so dD is only written (by
// streaming stores in a large call, see kStreamBytes). Fibers longer than that keep P and S in
// dD itself, the walks taken in the other order: S = conj(G) * D in dD, a backward walk leaves
// each R(k) in dU[k]; then P = 1, a forward walk turns dU[k] into conj(before(k) * R(k)), and
// dD = G * conj(P) where P lies. Every product is formed from the same operands in the same
// order either way, so the bits are the same. Until stop 51 they kept them in an array of
// their own as large as data (12.8 MB, 14.2 % of the inputs of the backward of "mul" with the
// max0 shapes; SPEC section 8 allows 5 %). Stop 51, one build with a switch, one process, five
// rounds of medians of five calls, two threads, bits the same: max0 shapes (float32) 37.0 ->
// 39.1 ms (faster in 1 of 5), 1-D 1e5 <- 1e7 (float64) 88.1 -> 78.0 (5 of 5), 400000 x 2 <- 2e6
// x 2 (float64) 30.7 -> 26.7 (5 of 5), 32 x 100000 <- 32 x 200000 along the last axis (float32)
// 15.6 -> 15.5 (3 of 5). (A first form in dD kept the walks' order and walked a third time to
// set P again: 54.7 ms with the max0 shapes.) P in dD for vjp_mul's fibers, in the scratch's
// place, dD written in place, measured against P in the scratch in alternating processes (vjp_mul, two threads): 13.8 / 13.9 / 14.4
// / 14.2 against 11.3 / 13.0 / 11.7 / 11.5 ms; with dD streamed from the scratch pass, in one
// process alternating: 11.2 against 9.7 ms. Only the fibers of dD that a fiber of the indices
// reaches are written (the caller sets the others to G * conj(1)). Returns false when an
// out-of-bounds index was met (skipped).
template <class T, class I>
bool mul_backward(const Geometry& g, char* dD, int64_t extent, const char* G, const char* D, const char* indices,
                  const char* u, char* gu) {
    char* base[4] = {dD, const_cast<char*>(indices), const_cast<char*>(u), dD};
    const FiberSpace fs = fiber_space(g);
    if (fs.nfib == 0) return true;
    constexpr int64_t N = sizeof(T);
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    const bool grouped = g.axis_size * N <= kMulScratchBytes;
    took(grouped ? Path::mul_backward_scratch : Path::mul_backward_in_place);
    // G, D and dD, indices, updates and dU (see kStreamBytes).
    const bool stream = streams(3 * extent + volume(g.s.shape, g.s.ndim) * (int64_t(sizeof(I)) + 2 * N));
    const int fparts = choose_parts(fs.nfib, fs.nfib * std::max(fs.na, g.axis_size)).first;
    std::atomic<bool> bad{false}, no_memory{false};
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        // Locals, not captured variables (stores may alias those).
        const int64_t size = g.axis_size, dstr = g.axis_stride, na = fs.na;
        const int64_t* astr = fs.astr;
        char* const gd = dD;  // a local (stores may alias the captured parameter)
        const int64_t off0 = p[0] - gd;
        bool local_bad = false;
        // Calls f(offset, a, k) for every element of fibers [k0, k1) of the block's part of dD:
        // fiber k `in[0]` bytes apart, axis position a `dstr` apart, the smaller stride innermost.
        auto each_position = [&](int64_t k0, int64_t k1, auto&& f) {
            if (k1 - k0 > 1 && in[0] < dstr) {
                for (int64_t a = 0; a < size; ++a)
                    for (int64_t k = k0; k < k1; ++k) f(off0 + a * dstr + k * in[0], a, k);
            } else {
                for (int64_t k = k0; k < k1; ++k)
                    for (int64_t a = 0; a < size; ++a) f(off0 + a * dstr + k * in[0], a, k);
            }
        };
        // Calls f(a, k, offset in u) for every update of fibers [k0, k1) of the block (a: its
        // normalised index), along each fiber in order or in reverse; the fibers are
        // independent, so rows of fibers (axis before the fibers) go row by row.
        auto walk = [&](int64_t k0, int64_t k1, bool reverse, auto&& f) {
            const int64_t c = k1 - k0;
            const bool rows = axis_outer && c > 1;
            if (rows && in[1] == int64_t(sizeof(I)) && in[2] == N) {
                for (int64_t b = 0; b < na; ++b) {
                    const int64_t j = reverse ? na - 1 - b : b;
                    const char* ip = p[1] + j * astr[1] + k0 * in[1];
                    const int64_t q = (p[2] - u) + j * astr[2] + k0 * in[2];
                    if (reverse && j > 0) {
                        // Against the hardware prefetcher: ask for the row before.
                        prefetch_lines(ip - astr[1], c * int64_t(sizeof(I)));
                        prefetch_lines(u + q - astr[2], c * N);
                        prefetch_lines(gu + q - astr[2], c * N);
                    }
                    each_index(reinterpret_cast<const I*>(ip), c, size, local_bad,
                               [&](int64_t k, int64_t v) { f(v, k0 + k, q + k * N); });
                }
                return;
            }
            const int64_t outer = rows ? na : c, inner = rows ? c : na;
            for (int64_t x0 = 0; x0 < outer; ++x0) {
                const int64_t x = reverse && rows ? outer - 1 - x0 : x0;
                for (int64_t y0 = 0; y0 < inner; ++y0) {
                    const int64_t y = reverse && !rows ? inner - 1 - y0 : y0;
                    const int64_t j = rows ? x : y, k = k0 + (rows ? y : x);  // axis position, fiber
                    const I raw = *reinterpret_cast<const I*>(p[1] + j * astr[1] + k * in[1]);
                    if (!in_bounds(raw, size)) { local_bad = true; continue; }
                    f(normalise(raw, size), k, (p[2] - u) + j * astr[2] + k * in[2]);
                }
            }
        };
        // A walk as mul_rows's (Reverse, Combine as std::bool_constant) by the generic walk, the
        // running product X of fiber k, axis position a at x_at(a, k).
        auto generic = [&](int64_t k0, int64_t k1, auto reverse, auto combine, auto&& x_at) {
            walk(k0, k1, decltype(reverse)::value, [&](int64_t a, int64_t k, int64_t q) {
                T& xt = x_at(a, k);
                T& out = *reinterpret_cast<T*>(gu + q);
                if constexpr (decltype(combine)::value) out = conj_of(Arith<T>::mul(out, xt));
                else out = xt;
                xt = Arith<T>::mul(xt, *reinterpret_cast<const T*>(u + q));
            });
        };
        // In place (P and S in dD): S = conj(G) * D, or with `to_dd` dD = G * conj(P), over `n`
        // positions from byte offset t0 at byte step `step`.
        auto settle = [&](int64_t t0, int64_t step, int64_t n, bool to_dd) {
            if (step == N) {
                mul_settle(reinterpret_cast<const T*>(G + t0), reinterpret_cast<const T*>(D + t0),
                           reinterpret_cast<T*>(gd + t0), n, to_dd);
                return;
            }
            for (int64_t b = 0; b < n; ++b) {
                const int64_t t = t0 + b * step;
                T& x = *reinterpret_cast<T*>(gd + t);
                const T gt = *reinterpret_cast<const T*>(G + t);
                x = to_dd ? Arith<T>::mul(gt, conj_of(x)) : Arith<T>::mul(conj_of(gt), *reinterpret_cast<const T*>(D + t));
            }
        };
        // dD = G * conj(P) and S = conj(G) * D in P's place over `n` positions, from byte offset
        // t0 at byte step `step`, whose P lie at ps, `pstep` elements apart. A run of dD that is
        // contiguous goes out by streaming stores in a large call, a block at a time from a
        // buffer (one streaming store per element, between the other loads and stores, was
        // slower than plain stores: vjp_mul 15.4 against 11.2 ms, 9.7 with the buffer).
        auto turn = [&](int64_t t0, int64_t step, int64_t n, T* ps, int64_t pstep) {
            if (step == N && pstep == 1) {
                mul_turn(reinterpret_cast<const T*>(G + t0), reinterpret_cast<const T*>(D + t0),
                         reinterpret_cast<T*>(gd + t0), ps, n, stream);
                return;
            }
            constexpr int64_t kRun = 64;
            alignas(64) T buf[kRun];
            const bool run = stream && step == N;
            for (int64_t b0 = 0; b0 < n; b0 += kRun) {
                const int64_t b1 = std::min(n, b0 + kRun);
                for (int64_t b = b0; b < b1; ++b) {
                    const int64_t t = t0 + b * step;
                    const T gt = *reinterpret_cast<const T*>(G + t);
                    T& pt = ps[b * pstep];
                    const T dd = Arith<T>::mul(gt, conj_of(pt));
                    if (run) buf[b - b0] = dd;
                    else *reinterpret_cast<T*>(gd + t) = dd;
                    pt = Arith<T>::mul(conj_of(gt), *reinterpret_cast<const T*>(D + t));
                }
                if (run) stream_copy(gd + t0 + b0 * N, reinterpret_cast<const char*>(buf), (b1 - b0) * N);
            }
        };
        // Fibers [k0, k0 + c): P and then S of fiber k, axis position a at
        // ps[a * sa + (k - k0) * sk]; dD is only written (by the pass over G), or with `in_dd`
        // (a std::bool_constant: the scratch's walks compiled as before) ps lies in dD itself.
        // The scratch passes sk = 1 as a constant: a stride known only at run time in the walks'
        // addressing made vjp_mul slower (12.3-15.7 -> 16.3-17.8 ms, alternating processes).
        auto group = [&](int64_t k0, int64_t c, T* ps, int64_t sa, auto sk, auto in_dd) {
            auto at = [&](int64_t a, int64_t k) -> T& { return ps[a * sa + (k - k0) * sk]; };
            // The plain walks (mul_rows): rows of the group's fibers, where their P lie side by
            // side (a unit step) and the rows of indices and updates are contiguous, or one fiber;
            // fiber by fiber along a last axis; the generic walk otherwise.
            constexpr bool unit_step = std::is_same_v<decltype(sk), std::integral_constant<int64_t, 1>>;
            const bool plain = unit_step && axis_outer && (c == 1 || (in[1] == int64_t(sizeof(I)) && in[2] == N));
            const char* const ip0 = p[1] + k0 * in[1];
            const char* const up0 = p[2] + k0 * in[2];
            char* const dp0 = gu + (up0 - u);
            auto ones = [&] { each_position(k0, k0 + c, [&](int64_t, int64_t a, int64_t k) { at(a, k) = one_of<T>(); }); };
            // One walk over the group's updates, from the last one when `reverse`, combining dU
            // with the running products when `combine` (mul_rows; both std::bool_constant).
            auto pass = [&](auto reverse, auto combine) {
                constexpr bool back = decltype(reverse)::value, both = decltype(combine)::value;
                if (plain) {
                    mul_rows<T, I, back, both>(ip0, astr[1], up0, dp0, astr[2], na, c, size, ps, sa, !grouped,
                                               local_bad);
                } else if (!axis_outer) {
                    // Along the last axis, fiber by fiber, each as rows of one.
                    for (int64_t k = k0; k < k0 + c; ++k) {
                        const int64_t q = (p[2] - u) + k * in[2];
                        mul_rows<T, I, back, both>(p[1] + k * in[1], astr[1], u + q, gu + q, astr[2], na, 1, size,
                                                   &at(0, k), sa, !grouped, local_bad);
                    }
                } else {
                    generic(k0, k0 + c, reverse, combine, at);
                }
            };
            // Calls f(t0, step, n, ps, pstep) over the group's runs of positions, in
            // each_position's order: along the fibers when they are the nearer in memory.
            auto runs = [&](auto&& f) {
                if (c > 1 && in[0] < dstr) {
                    for (int64_t a = 0; a < size; ++a) f(off0 + a * dstr + k0 * in[0], in[0], c, &at(a, k0), sk);
                } else {
                    for (int64_t k = k0; k < k0 + c; ++k) f(off0 + k * in[0], dstr, size, &at(0, k), sa);
                }
            };
            constexpr std::false_type forward, keep;
            constexpr std::true_type backward, combine;
            if constexpr (decltype(in_dd)::value) {
                // The other order, so that dD's elements hold one product at a time: S from
                // conj(G) * D walking back (dU = S), then P from ones walking forward (dU =
                // conj(P * S)); P becomes dD where it lies.
                runs([&](int64_t t0, int64_t step, int64_t n, T*, int64_t) { settle(t0, step, n, false); });
                pass(backward, keep);
                ones();
                pass(forward, combine);
                runs([&](int64_t t0, int64_t step, int64_t n, T*, int64_t) { settle(t0, step, n, true); });
            } else {
                ones();
                pass(forward, keep);
                runs(turn);
                pass(backward, combine);
            }
        };
        if (grouped) {
            // A group of fibers at a time in the scratch, as rows of `c`.
            const int64_t per = size == 0 ? count : std::max<int64_t>(1, std::min(count, kMulScratchBytes / (size * N)));
            T* const scratch = reinterpret_cast<T*>(thread_scratch(per * size * N));
            if (!scratch) {
                no_memory.store(true, std::memory_order_relaxed);
                return;
            }
            for (int64_t k0 = 0; k0 < count; k0 += per) {
                const int64_t c = std::min(per, count - k0);
                group(k0, c, scratch, c, std::integral_constant<int64_t, 1>{}, std::false_type{});
            }
        } else {
            // The whole block in dD itself (C-contiguous).
            T* const s0 = reinterpret_cast<T*>(gd + off0);
            if (in[0] == N || count == 1) group(0, count, s0, dstr / N, std::integral_constant<int64_t, 1>{}, std::true_type{});
            else group(0, count, s0, dstr / N, in[0] / N, std::true_type{});
        }
        if (stream) stream_fence();
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    if (no_memory.load()) throw std::bad_alloc();
    return !bad.load();
}

// Which data elements and which updates tie with the result: from the one-byte masks of the
// residuals (MaskTies), or compared on the spot with the result (ValueTies; see there).
struct MaskTies {
    const uint8_t* dties;  // at dD's element positions
    const uint8_t* uties;  // at dU's element positions
    static constexpr bool compares = false;
    uint8_t data(int64_t t) const { return dties[t]; }
    template <class T> uint8_t noted(const T*, int64_t q) const { return uties[q]; }
    void prefetch(int64_t) const {}
};
// The ties of data D, updates U and the result Y (of the data type V, C-contiguous: D and Y at
// dD's element positions, U at dU's), NaN tying with NaN. A first walk leaves each update's tie
// in dU as 0 or 1, which the others read back.
template <class V> struct ValueTies {
    static constexpr bool compares = true;
    const V *D, *U, *Y;
    // Equality in V itself. Until stop 47 both sides went through a float (a `float wide(V)`),
    // so float64 values that differ but round to one float32 tied: data 1 against a result of
    // 1 + 1e-12 took half the gradient (tests: _TIE_POOLS).
    static uint8_t same(V a, V y) {
        if constexpr (std::is_same_v<V, float16> || std::is_same_v<V, bfloat16>) {
            // On the bits, without widening (half_to_float takes a dozen instructions): two
            // 16-bit floats are equal when their bits are, or when both are zeros of either
            // sign; a magnitude above infinity's is a NaN, whatever its payload.
            constexpr unsigned inf = std::is_same_v<V, float16> ? 0x7c00u : 0x7f80u;
            const unsigned ma = a.bits & 0x7fffu, my = y.bits & 0x7fffu;
            return uint8_t((a.bits == y.bits) | ((ma | my) == 0) | ((ma > inf) & (my > inf)));
        } else {
            return uint8_t((a == y) | ((a != a) & (y != y)));
        }
    }
    uint8_t data(int64_t t) const { return same(D[t], Y[t]); }
    uint8_t update(int64_t q, int64_t t) const { return same(U[q], Y[t]); }
    template <class T> uint8_t noted(const T* gu, int64_t q) const { return uint8_t(gu[q] != T(0)); }
    // The result at a later target (always inlined: see prefetch_lines).
    [[gnu::always_inline]] void prefetch(int64_t t) const { __builtin_prefetch(Y + t); }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SCATTERX_HAVE_TIE_ROWS 1
// The helpers of tie_row, inlined into it (AVX-512 code, chosen at run time).
#define SCATTERX_TIE_ROWS_TARGET __attribute__((target("avx512f,avx512dq"), always_inline))
// Lanes [0, 16) of a row of indices as two vectors of int64 (lanes beyond `lanes` 0).
template <class I> SCATTERX_TIE_ROWS_TARGET inline void load_lanes(const I* q, __mmask16 lanes, __m512i& lo, __m512i& hi) {
    if constexpr (sizeof(I) == 8) {
        lo = _mm512_maskz_loadu_epi64(__mmask8(lanes), q);
        hi = _mm512_maskz_loadu_epi64(__mmask8(lanes >> 8), q + 8);
    } else {
        const __m512i x = _mm512_maskz_loadu_epi32(lanes, q);
        lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(x));
        hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(x, 1));
    }
}
// in_bounds of sixteen lanes as bits (sz: the size, span: twice it).
SCATTERX_TIE_ROWS_TARGET inline unsigned lanes_in_bounds(__m512i lo, __m512i hi, __m512i sz, __m512i span) {
    return unsigned(_mm512_cmplt_epu64_mask(_mm512_add_epi64(lo, sz), span)) |
           unsigned(_mm512_cmplt_epu64_mask(_mm512_add_epi64(hi, sz), span)) << 8;
}
// normalise of eight lanes.
SCATTERX_TIE_ROWS_TARGET inline __m512i normalise_lanes(__m512i x, __m512i sz) {
    return _mm512_mask_add_epi64(x, _mm512_cmplt_epi64_mask(x, _mm512_setzero_si512()), x, sz);
}
// Eight float64 lanes (m) of tie_row: the result at elements e of y against u, the masks into
// gu; the tying lanes as bits.
SCATTERX_TIE_ROWS_TARGET inline unsigned tie_lanes_f64(__m512i e, __mmask8 m, const double* y, const double* u,
                                                       double* gu) {
    const __m512d yy = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), m, e, y, 8);
    const __m512d uu = _mm512_maskz_loadu_pd(m, u);
    const __mmask8 t = (_mm512_cmp_pd_mask(uu, yy, _CMP_EQ_OQ) |
                        (_mm512_cmp_pd_mask(uu, uu, _CMP_UNORD_Q) & _mm512_cmp_pd_mask(yy, yy, _CMP_UNORD_Q))) &
                       m;
    _mm512_mask_storeu_pd(gu, m, _mm512_maskz_mov_pd(t, _mm512_set1_pd(1.0)));
    return unsigned(t);
}
// Lanes [0, c) (c <= 16) of one row of indices ix of the backward of max/min for float32 or
// float64 (V), sixteen at a time: lane k's update u[k] against the result at its target,
// y[k + v * rstr] (v the normalised index), by ValueTies' rule (equal, or both NaN). Writes
// gu[k] = 1 or 0, and the count cells v * cc + k0 + k of the tying lanes, in order, at `tied`
// (sixteen int32 written; the cells fit, see kTieCountBytes); returns the tying lanes as bits,
// or -1, having written nothing, when an index is out of bounds. With `ahead`, a later row's
// indices, first asks for that row's targets in y and, with `cells`, for their counts at
// cells + ((w * cc + k) >> shift) (w its normalised index).
template <class V, class I>
__attribute__((target("avx512f,avx512dq"))) inline int64_t tie_row(const I* ix, const I* ahead, int64_t c,
                                                                  int64_t size, const V* y, int64_t rstr, const V* u,
                                                                  V* gu, int32_t* tied, int64_t k0, const char* cells,
                                                                  int64_t cc, int shift) {
    const __mmask16 lanes = __mmask16((1u << c) - 1);
    const __m512i sz = _mm512_set1_epi64(size), span = _mm512_set1_epi64(2 * size), rs = _mm512_set1_epi64(rstr);
    const __m512i iota0 = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i iota1 = _mm512_add_epi64(iota0, _mm512_set1_epi64(8));
    __m512i lo, hi;
    load_lanes(ix, lanes, lo, hi);
    if ((lanes_in_bounds(lo, hi, sz, span) & lanes) != lanes) return -1;
    lo = normalise_lanes(lo, sz);
    hi = normalise_lanes(hi, sz);
    if (ahead) {
        __m512i alo, ahi;
        load_lanes(ahead, lanes, alo, ahi);
        const unsigned ok = lanes_in_bounds(alo, ahi, sz, span) & lanes;
        alo = normalise_lanes(alo, sz);
        ahi = normalise_lanes(ahi, sz);
        alignas(64) int64_t at[16], cell[16];
        _mm512_store_si512(at, _mm512_add_epi64(_mm512_mullo_epi64(alo, rs), iota0));
        _mm512_store_si512(at + 8, _mm512_add_epi64(_mm512_mullo_epi64(ahi, rs), iota1));
        if (cells) {
            const __m512i w = _mm512_set1_epi64(cc);
            _mm512_store_si512(cell, _mm512_srli_epi64(_mm512_add_epi64(_mm512_mullo_epi64(alo, w), iota0), unsigned(shift)));
            _mm512_store_si512(cell + 8, _mm512_srli_epi64(_mm512_add_epi64(_mm512_mullo_epi64(ahi, w), iota1), unsigned(shift)));
            for (int64_t k = 0; k < c; ++k)
                if (ok >> k & 1) {
                    __builtin_prefetch(y + at[k]);
                    __builtin_prefetch(cells + cell[k], 1);
                }
        } else {
            for (int64_t k = 0; k < c; ++k)
                if (ok >> k & 1) __builtin_prefetch(y + at[k]);
        }
    }
    const __m512i elo = _mm512_add_epi64(_mm512_mullo_epi64(lo, rs), iota0);
    const __m512i ehi = _mm512_add_epi64(_mm512_mullo_epi64(hi, rs), iota1);
    __mmask16 tie;
    if constexpr (std::is_same_v<V, float>) {
        const __m256 ylo = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), __mmask8(lanes), elo, y, 4);
        const __m256 yhi = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), __mmask8(lanes >> 8), ehi, y, 4);
        const __m512 yy = _mm512_insertf32x8(_mm512_castps256_ps512(ylo), yhi, 1);
        const __m512 uu = _mm512_maskz_loadu_ps(lanes, u);
        tie = (_mm512_cmp_ps_mask(uu, yy, _CMP_EQ_OQ) |
               (_mm512_cmp_ps_mask(uu, uu, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(yy, yy, _CMP_UNORD_Q))) &
              lanes;
        _mm512_mask_storeu_ps(gu, lanes, _mm512_maskz_mov_ps(tie, _mm512_set1_ps(1.0f)));
    } else {
        // Eight doubles a vector: each half of the row on its own.
        tie = __mmask16(tie_lanes_f64(elo, __mmask8(lanes), y, u, gu) |
                        tie_lanes_f64(ehi, __mmask8(lanes >> 8), y, u + 8, gu + 8) << 8);
    }
    const __m512i w = _mm512_set1_epi64(cc), first = _mm512_set1_epi64(k0);
    const __m256i clo = _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_mullo_epi64(lo, w), _mm512_add_epi64(iota0, first)));
    const __m256i chi = _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_mullo_epi64(hi, w), _mm512_add_epi64(iota1, first)));
    _mm512_storeu_si512(tied, _mm512_maskz_compress_epi32(tie, _mm512_inserti64x4(_mm512_castsi256_si512(clo), chi, 1)));
    return tie;
}
#endif

// The count of ties of a group of fibers is kept in a per-thread byte table (thread_scratch) of
// at most this many bytes, one byte per element of the fibers. Counting there, fused with the
// comparison (ValueTies), saves a walk of random targets in dD, which are not in the cache:
// vjp_max 104.9-119.4 -> 87.3-102.3 ms, vjp_min 118-141 -> 105-108 ms (alternating processes,
// two threads, 9 of 9 rounds faster); 512 KB was slower. Each group walks every row of its
// block's indices and reads the result at random where they point, so a block in fewer groups
// reads fewer random lines: at 1 MB a block of vjp_max's (16 of 32 fibers, 100 000 long) went
// in two groups of 10 and 6 fibers, both reading the same line of each target row; at 2 MB it
// is one group (stop 23, the Zen 3 machine, one process alternating, two threads, medians of
// ten rounds of five calls: vjp_max 144 -> 134 ms, vjp_min 178 -> 147, each 7 of 10 rounds
// faster).
inline constexpr int64_t kTieCountBytes = int64_t(2) << 20;
static_assert(kTieCountBytes <= INT32_MAX, "tie_row hands out a count cell as int32");
// Whether the backward of max/min fetches only the tying updates' counts and shares (a select of
// the address, below) or every update's. Measured faster on Intel (stop 35, below); on the Zen 3
// machine of stops 18-34 every form of it tried was slower or no faster (stop 18: 92-132
// against 93-142 ms; stop 23: the shares 115 -> 126 and 128 -> 151 ms; stop 32: 36-44 ->
// 92-162 ms for the shares, 38 -> 153-202 for a count whose non-tying updates all wrote one
// byte, each waiting on the one before; docs/performance.md), so other CPUs keep the way
// measured best there until this form is measured on them.
// The setting in force (tests set it to reach both ways on any machine).
inline bool& ties_by_select() {
    static bool select = cpu_is_intel();
    return select;
}
// Whether the float32 and float64 backward of max/min finds the ties of a row of updates
// sixteen at a time (tie_row): where the CPU has AVX-512F and DQ (tests turn it off to reach
// both ways).
inline bool ties_by_rows_supported() {
#ifdef SCATTERX_HAVE_TIE_ROWS
    return cpu_has_avx512dq();
#else
    return false;
#endif
}
inline bool& ties_by_rows() {
    static bool on = ties_by_rows_supported();
    return on;
}
// A count of ties in a byte that is not a character type, so that stores to it do not make the
// compiler reload every pointer they might alias.
enum class TieCount : uint8_t {};
// The backward of "max" and "min" for the compute type T (float or double): G's share of
// each target goes, evenly, to data there and to every update that ties with the result, with
// no temporaries. Three passes. (1) By blocks of fibers, the count: a walk counts the tying
// updates of each target of a group of fibers in a table of four-bit counts that becomes one of
// bytes at a 16th tie (at most kTieCountBytes as bytes), finding each
// update's tie on the way with ValueTies (kept in dU), then dD = G / (data tie + count). A
// group in which a target has more than 255 ties counts again in dD, in T (exact below 2^24
// updates per fiber for float, which the caller ensures). When the threads share out ranges of
// axis positions rather than fibers (fewer fibers than threads), or one fiber's table would
// exceed kTieCountBytes, ValueTies' ties are first found by ranges of axis positions and every
// count is made in dD. (2) By ranges of axis positions (whole rows of indices per thread, as a
// gather), each tying update takes its target's share (+0 the others). (3) By blocks of
// fibers, dD = +0 where data does not tie. Arrays: dD (written) is array 0 of the geometry, G
// C-contiguous like it; array 2 (`uties`, elements of `usize` bytes) is the update masks or
// the updates, C-contiguous in indices' shape, and dU (written) at its element positions;
// `ties` says what ties. Before stop 14 this was six NumPy passes with temporaries of 47 % of
// vjp_max's inputs. Only the fibers of dD that a fiber of the indices reaches are written (the
// caller sets the others). Returns false when an out-of-bounds index was met (skipped).
template <class T, class I, class Ties>
bool extremum_backward(const Geometry& g, char* dD, const char* G, const Ties& ties, const char* indices,
                       const char* uties, int64_t usize, char* dU) {
    char* base[4] = {dD, const_cast<char*>(indices), const_cast<char*>(uties), dD};
    const FiberSpace fs = fiber_space(g);
    if (fs.nfib == 0) return true;
    constexpr int64_t N = sizeof(T);
    const bool axis_outer = g.s.ndim < 2 || g.axis < g.s.ndim - 1;
    const auto [fparts, xparts] = choose_parts(fs.nfib, fs.nfib * std::max(fs.na, g.axis_size));
    const int rparts = std::max(fparts, xparts);  // the pass by axis positions
    // Prefetching pays only when the rows targeted do not fit in the cache anyway.
    const bool far = g.axis_size * g.axis_stride > kCacheBytes;
    // Counting in a byte table per thread, fused with the comparison: when the threads share out
    // the fibers and one fiber's table fits (see kTieCountBytes).
    const int64_t bytes_per_group =
        xparts == 1 && g.axis_size > 0 && g.axis_size <= kTieCountBytes ? kTieCountBytes : 0;
    std::atomic<bool> bad{false}, no_memory{false};
    // Calls f(element of dD, element of uties and dU, axis position, fiber) for every update of
    // rows [j0, j1) of a block of `count` fibers at p (strides in[]; the fiber counted from p):
    // row by row when the axis comes before the fibers, else fiber by fiber. A row walk asks
    // for the targets of a later row by ask(element of dD, element of uties and dU, axis
    // position, fiber), unless row(indices of the row, of the later row or null, element of dD
    // of the row's first fiber, of uties) takes the whole row (and that request) and returns
    // true.
    auto walk = [&](char* const* p, int64_t count, const int64_t* in, int64_t j0, int64_t j1, auto&& ask,
                    auto&& row, bool& local_bad, auto&& f) {
        const int64_t size = g.axis_size, dstr = g.axis_stride;
        const int64_t* astr = fs.astr;
        const int64_t t0 = (p[0] - dD) / N, u0 = (p[2] - uties) / usize, rstr = dstr / N;
        T* const out = reinterpret_cast<T*>(dD);
        const bool rows = axis_outer && count > 1;
        if (rows && in[0] == N && in[1] == int64_t(sizeof(I)) && in[2] == usize) {
            // This block's share of later rows, when it is only a part of each row (see
            // scatter_rows: the hardware prefetcher does not follow that).
            const bool part = astr[1] != count * int64_t(sizeof(I));
            // The targets about kGatherAhead elements later, as the gather asks for them
            // (rows_ahead; in vjp_max 4 rows in the count, 2 in the shares). Until stop 32
            // kPrefetchRows (8) rows, 128 and 256 elements; alternating processes, seven rounds
            // of medians of seven: vjp_max 48.4 -> 44.4 ms (median of the rounds; faster in 7
            // of 7), vjp_min 57.8 -> 53.9 (5 of 7).
            const int64_t ahead_rows = rows_ahead(count);
            for (int64_t j = j0; j < j1; ++j) {
                if (part && j + kStreamRows < j1) {
                    prefetch_lines(p[1] + (j + kStreamRows) * astr[1], count * int64_t(sizeof(I)));
                    prefetch_lines(p[2] + (j + kStreamRows) * astr[2], count * usize);
                    prefetch_lines(dU + (u0 + (j + kStreamRows) * astr[2] / usize) * N, count * N);
                }
                // Random rows: ask for the targets of a later row now.
                const I* const ahead =
                    far && j + ahead_rows < j1 ? reinterpret_cast<const I*>(p[1] + (j + ahead_rows) * astr[1]) : nullptr;
                const I* const ix = reinterpret_cast<const I*>(p[1] + j * astr[1]);
                const int64_t q0 = u0 + j * astr[2] / usize;
                if (row(ix, ahead, t0, q0)) continue;
                if (ahead) {
                    const int64_t qa = u0 + (j + ahead_rows) * astr[2] / usize;
                    for (int64_t k = 0; k < count; ++k)
                        if (in_bounds(ahead[k], size)) {
                            const int64_t v = normalise(ahead[k], size);
                            ask(t0 + k + v * rstr, qa + k, v, k);
                        }
                }
                each_index(ix, count, size, local_bad, [&](int64_t k, int64_t v) { f(t0 + k + v * rstr, q0 + k, v, k); });
            }
            return;
        }
        const int64_t outer = rows ? j1 - j0 : count, inner = rows ? count : j1 - j0;
        for (int64_t x = 0; x < outer; ++x)
            for (int64_t y = 0; y < inner; ++y) {
                const int64_t j = j0 + (rows ? x : y), k = rows ? y : x;  // axis position, fiber
                const I raw = *reinterpret_cast<const I*>(p[1] + j * astr[1] + k * in[1]);
                if (!in_bounds(raw, size)) { local_bad = true; continue; }
                const int64_t v = normalise(raw, size);
                f(t0 + (k * in[0] + v * dstr) / N, u0 + (j * astr[2] + k * in[2]) / usize, v, k);
            }
    };
    // A walk's row() that takes no row.
    auto no_rows = [](const I*, const I*, int64_t, int64_t) { return false; };
    // Calls f(element of dD, axis position, fiber) for every element of a block, the smaller
    // stride innermost.
    auto each_position = [&](char* const* p, int64_t count, const int64_t* in, auto&& f) {
        const int64_t size = g.axis_size, dstr = g.axis_stride, off0 = p[0] - dD;
        if (count > 1 && in[0] == N) {
            // Rows of adjacent elements: an inner loop the compiler vectorises (stop 46, two
            // builds in alternating processes, eight rounds of medians of five, two threads:
            // vjp_max 42.5 -> 37.7 ms, faster in 8 of 8; vjp_min 48.3 -> 43.1, 7 of 8).
            for (int64_t a = 0; a < size; ++a) {
                const int64_t t0 = (off0 + a * dstr) / N;
                for (int64_t k = 0; k < count; ++k) f(t0 + k, a, k);
            }
        } else if (count > 1 && in[0] < dstr) {
            for (int64_t a = 0; a < size; ++a)
                for (int64_t k = 0; k < count; ++k) f((off0 + a * dstr + k * in[0]) / N, a, k);
        } else {
            for (int64_t k = 0; k < count; ++k)
                for (int64_t a = 0; a < size; ++a) f((off0 + k * in[0] + a * dstr) / N, a, k);
        }
    };
    T* const out = reinterpret_cast<T*>(dD);
    const T* const grad = reinterpret_cast<const T*>(G);
    T* const gu = reinterpret_cast<T*>(dU);
    auto ask_out = [&](int64_t t, int64_t, int64_t, int64_t) { __builtin_prefetch(out + t, 1); };
    auto ask_ties = [&](int64_t t, int64_t, int64_t, int64_t) { ties.prefetch(t); };
    // Where ties_by_select (Intel): only a tying update reads its target's share; the others
    // read dD's first element, which stays in the cache, and get +0 (a select, not a branch:
    // the ties are random). In vjp_max about 28 % of the updates tie (a target has two updates
    // on average, data takes part), so the walk of the shares asks for about a quarter of the
    // random lines it did, and the count (in the byte table below) writes a quarter of them. Measured on the Intel machine of stop
    // 35 (old and new builds in alternating processes, two threads, medians of seven calls):
    // the shares alone, vjp_max 131 -> 119 ms (faster in 4 of 6 rounds), vjp_min 127 -> 105 (5
    // of 6); then the count as well, against the count as before, in one build with a switch:
    // vjp_max 114 -> 105 and 117 -> 116 ms (faster in 6 of 14 rounds), vjp_min 120 -> 91 and
    // 135 -> 110 (11 of 14); asking for every count ahead as before, with the same stores,
    // 105 / 130 and 108 / 118. Results bitwise the same (a hash of both gradients of max and
    // min over float16, float32 and float64, ties, NaN and negative indices, one and two
    // threads).
    const bool select = ties_by_select();
    const bool by_rows = ties_by_rows();
    auto shared_at = [select](int64_t t, uint8_t m) { return select ? t & (int64_t(0) - int64_t(m)) : t; };
    auto ask_share = [&](int64_t t, int64_t q, int64_t, int64_t) {
        __builtin_prefetch(out + shared_at(t, ties.noted(gu, q)));
    };
    // x where the mask byte is 1, +0 where it is 0, without a branch (the masks are random: a
    // branch on them mispredicts).
    using Bits = std::conditional_t<N == 4, uint32_t, uint64_t>;
    auto keep = [](T x, uint8_t m) {
        Bits b;
        std::memcpy(&b, &x, N);
        b &= Bits(0) - Bits(m);
        std::memcpy(&x, &b, N);
        return x;
    };
    if constexpr (Ties::compares) {
        // Each update's tie into dU, by ranges of axis positions (as a gather reads the result),
        // unless the count finds them.
        if (!bytes_per_group)
            parallel_blocks(fs, base, 1, rparts, [&](char* const* p, int64_t count, const int64_t* in, int xp, int xn) {
                bool local_bad = false;
                auto [j0, j1] = split_range(fs.na, xp, xn);
                walk(p, count, in, j0, j1, ask_ties, no_rows, local_bad,
                     [&](int64_t t, int64_t q, int64_t, int64_t) { gu[q] = T(ties.update(q, t)); });
                if (local_bad) bad.store(true, std::memory_order_relaxed);
            });
    }
    // dD = G / count for fibers [0, c) of a block at q, counting in dD.
    auto count_in_place = [&](char* const* q, int64_t c, const int64_t* in, bool& local_bad) {
        each_position(q, c, in, [&](int64_t t, int64_t, int64_t) { out[t] = T(ties.data(t)); });
        walk(q, c, in, 0, fs.na, ask_out, no_rows, local_bad,
             [&](int64_t t, int64_t u, int64_t, int64_t) { out[t] += T(ties.noted(gu, u)); });
        each_position(q, c, in, [&](int64_t t, int64_t, int64_t) { out[t] = grad[t] / out[t]; });
    };
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        bool local_bad = false;
        const int64_t per = bytes_per_group ? std::min(count, bytes_per_group / g.axis_size) : 0;
        TieCount* const table = per ? reinterpret_cast<TieCount*>(thread_scratch(per * g.axis_size)) : nullptr;
        if (!per) {
            count_in_place(p, count, in, local_bad);
        } else if (table) {
            for (int64_t k0 = 0; k0 < count; k0 += per) {
                const int64_t c = std::min(per, count - k0);
                char* const q[4] = {p[0] + k0 * in[0], p[1] + k0 * in[1], p[2] + k0 * in[2], p[3] + k0 * in[3]};
                // The tying updates of each target, counted in four bits while every count stays
                // below 16 (half the table's bytes: more of it stays in the cache), widened in
                // place to a byte each when one would reach 16 (widen), then counted in bytes
                // (wrapping, noted); with ValueTies each update's tie is found here and kept in
                // dU. Where ties_by_select, a byte from the start. In
                // vjp_max a thread's table of 16 fibers of 100 000 is 1.6 MB in bytes, 0.8 MB
                // in nibbles, against the 1 MB of L2 of each core of the Zen 5 machine. Stop 45,
                // one build with a switch, one process, ten rounds of medians of five calls, two
                // threads: vjp_max 54.9 -> 51.7 ms (faster in 7 of 10), vjp_min 55.3 -> 54.1 (7 of
                // 10); one thread, and two builds in alternating processes, showed no difference
                // beyond the noise (vjp_max 46.8 -> 50.2 ms, faster in 3 of 6). A small gain at
                // best; kept for the table half the size. Results bitwise the same.
                bool nibbles = !select;
                const int64_t cells = c * g.axis_size;
                std::memset(table, 0, size_t(nibbles ? (cells + 1) / 2 : cells));
                // The nibble counts become bytes, from the last down, so that none is
                // overwritten before it is read (byte `at` takes the nibble at `at` / 2).
                auto widen = [&] {
                    for (int64_t at = cells - 1; at >= 0; --at)
                        table[at] = TieCount((uint8_t(table[at >> 1]) >> (int(at & 1) * 4)) & 15);
                    nibbles = false;
                };
                bool wrapped = false;
                // Counts one tie at `cell` of the table. Only tying updates reach it (flush_tied).
                auto bump = [&](int64_t cell) {
                    if (nibbles) {
                        const int shift = int(cell & 1) * 4;
                        const uint8_t b = uint8_t(table[cell >> 1]);
                        if (((b >> shift) & 15) != 15) [[likely]] {
                            table[cell >> 1] = TieCount(uint8_t(b + (1 << shift)));
                            return;
                        }
                        widen();  // a 16th tie at a target: bytes from here on
                    }
                    const uint8_t n = uint8_t(uint8_t(table[cell]) + 1);
                    table[cell] = TieCount(n);
                    wrapped |= n == 0;
                };
                // The cells of tying updates, counted kTiedBatch or more at a time (flush_tied).
                // tie_row's, rather than row by row: a loop over the tying lanes of each
                // row ended at a point that changed from row to row (4.5 ties a row on average
                // in vjp_max), a branch expected to mispredict about once a row (the reason for
                // trying it; branch misses were not counted). The counts are sums, so their
                // order does not matter; nor does a 16th or a 256th tie at a target depend on it
                // (widen, wrapped). Stop 47, one process with a switch (an experimental build),
                // two threads, medians of five calls: vjp_max 32.1 -> 30.7 and 38.0 ->
                // 34.9 ms (faster in 6 of 8 and 10 of 12 rounds), vjp_min 30.7 -> 28.9 and 35.0
                // -> 33.1 (8 of 8, 10 of 12). Results bitwise the same.
                constexpr int64_t kTiedBatch = 256;
                int32_t tied[kTiedBatch + 16];  // tie_row writes sixteen past the last
                int64_t ntied = 0;
                auto flush_tied = [&] {
                    for (int64_t i = 0; i < ntied; ++i) bump(tied[i]);
                    ntied = 0;
                };
                // One by one (tally), every update's cell is written at the end of the batch and
                // the batch grows by its tie (0 or 1): no read-modify-write of a random count for
                // the updates that do not tie (about 72 % in vjp_max), and no branch on the
                // nibble's 16th tie but at the flush. Stop 48, a Zen 3 virtual machine (no
                // AVX-512, so every float32 row goes one by one), one process with a switch, two
                // threads, medians of five calls, six rounds: vjp_max 138.2 -> 122.4 ms (faster
                // in 6 of 6), vjp_min 148.0 -> 126.6 (5 of 6), float16 max 223.1 -> 198.6 (5 of
                // 6), min 226.4 -> 195.0 (6 of 6). Results bitwise the same.
                auto tally = [&](int64_t t, int64_t u, int64_t v, int64_t k) {
                    uint8_t tie;
                    if constexpr (Ties::compares) {
                        tie = ties.update(u, t);
                        gu[u] = T(tie);
                    } else {
                        tie = ties.noted(gu, u);
                    }
                    tied[ntied] = int32_t(v * c + k);
                    ntied += tie;
                    if (ntied >= kTiedBatch) flush_tied();
                };
                // float32 and float64 rows sixteen updates at a time (tie_row), where the CPU
                // has AVX-512F and DQ: only the tying updates reach the table (adding 0 at the
                // others changes nothing). A row with an index out of bounds goes update by
                // update, as before. One by one, the walk ran about 45 instructions per update
                // (bounds, address, the later row's requests, the comparison, the table).
                // Stop 46, one process with a switch, ten rounds of medians of five, two
                // threads: vjp_max 46.2 -> 30.3 ms (faster in 10 of 10), vjp_min 42.9 -> 28.9 (9
                // of 10); old and new builds in alternating processes, six rounds: vjp_max 42.3
                // -> 27.1, vjp_min 43.1 -> 32.9 (6 of 6 each). float64 (from stop 46's end; the
                // vjp_max shapes, eight rounds, one process): max 62.2 -> 41.2 ms, min 50.4 ->
                // 35.4 (8 of 8 each). Results bitwise the same.
                auto tally_row = [&](const I* ix, const I* ahead, int64_t t0, int64_t q0) {
#ifdef SCATTERX_HAVE_TIE_ROWS
                    if constexpr (std::is_same_v<Ties, ValueTies<T>>) {
                        if (!by_rows) return false;
                        const int64_t size = g.axis_size, rstr = g.axis_stride / N;
                        for (int64_t k0 = 0; k0 < c; k0 += 16) {
                            const int64_t n = std::min<int64_t>(16, c - k0);
                            const int shift = nibbles ? 1 : 0;
                            const int64_t m = tie_row(
                                ix + k0, ahead ? ahead + k0 : nullptr, n, size, ties.Y + t0 + k0, rstr,
                                ties.U + q0 + k0, gu + q0 + k0, tied + ntied, k0,
                                select ? nullptr : reinterpret_cast<const char*>(table) + (k0 >> shift), c, shift);
                            if (m < 0) {
                                each_index(ix + k0, n, size, local_bad, [&](int64_t k, int64_t w) {
                                    tally(t0 + k0 + k + w * rstr, q0 + k0 + k, w, k0 + k);
                                });
                                continue;
                            }
                            ntied += __builtin_popcount(uint32_t(m));
                            if (ntied >= kTiedBatch) flush_tied();
                        }
                        return true;
                    }
#endif
                    (void)ix, (void)ahead, (void)t0, (void)q0;
                    return false;
                };
                // The result at a later target; with the masks, whose ties are known ahead, the
                // count of a later tie (with ties_by_select, the others ask for the table's
                // first byte, a select, not a branch: the ties are random). (Asking for every
                // update's count, as until stop 35, measured no faster for vjp_max and slower
                // for vjp_min: below.) Comparing values, the walk asks for the result alone.
                // Until stop 51 it also asked for the update's count where not ties_by_select,
                // but GCC 12 left that request out of every build (an audit of stop 51: the
                // same source built with -fno-ipa-pure-const had one prefetch more in each of
                // the 16 instantiations of this walk, and in nothing else). Kept by an asm
                // statement, old and new builds in alternating processes, six rounds of
                // medians of seven calls, Zen 3: vjp_max 79.1 -> 83.1 ms (slower in 5 of 6),
                // vjp_min 77.5 -> 79.9 (4 of 6), the bits the same. So it is gone from the source.
                auto ask = [&](int64_t t, int64_t u, int64_t v, int64_t k) {
                    if constexpr (Ties::compares) {
                        ties.prefetch(t);
                        (void)u, (void)v, (void)k;
                    } else {
                        const int64_t at = v * c + k;
                        __builtin_prefetch(table + (nibbles ? at >> 1 : shared_at(at, ties.noted(gu, u))), 1);
                    }
                };
                walk(q, c, in, 0, fs.na, ask, tally_row, local_bad, tally);
                flush_tied();
                if (wrapped) {
                    count_in_place(q, c, in, local_bad);  // more than 255 ties at a target
                    continue;
                }
                if (nibbles)
                    each_position(q, c, in, [&](int64_t t, int64_t a, int64_t k) {
                        const int64_t at = a * c + k;
                        const auto n = (uint8_t(table[at >> 1]) >> (int(at & 1) * 4)) & 15;
                        out[t] = grad[t] / (T(ties.data(t)) + T(n));
                    });
                else
                    each_position(q, c, in, [&](int64_t t, int64_t a, int64_t k) {
                        out[t] = grad[t] / (T(ties.data(t)) + T(uint8_t(table[a * c + k])));
                    });
            }
        } else {
            no_memory.store(true, std::memory_order_relaxed);
        }
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    if (no_memory.load()) throw std::bad_alloc();
    parallel_blocks(fs, base, 1, rparts, [&](char* const* p, int64_t count, const int64_t* in, int xp, int xn) {
        bool local_bad = false;
        auto [j0, j1] = split_range(fs.na, xp, xn);
        walk(p, count, in, j0, j1, ask_share, no_rows, local_bad, [&](int64_t t, int64_t q, int64_t, int64_t) {
            const uint8_t m = ties.noted(gu, q);
            gu[q] = keep(out[shared_at(t, m)], m);
        });
        if (local_bad) bad.store(true, std::memory_order_relaxed);
    });
    parallel_blocks(fs, base, fparts, 1, [&](char* const* p, int64_t count, const int64_t* in, int, int) {
        each_position(p, count, in, [&](int64_t t, int64_t, int64_t) { out[t] = keep(out[t], ties.data(t)); });
    });
    return !bad.load();
}

}  // namespace scatterx
