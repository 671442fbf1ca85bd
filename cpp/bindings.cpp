// The one binding file: converts NumPy arrays into pointers, shapes and byte strides, checks the
// invariants the kernels rely on (the Python layer validates first; these checks keep a bad
// internal call from touching memory it should not), releases the GIL and dispatches
// element type x index type x reduction through templates.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION  // memory handlers (NEP 49)
#define PY_ARRAY_UNIQUE_SYMBOL scatterx_ARRAY_API
#include <numpy/arrayobject.h>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "scatterx/kernels.h"
#include "scatterx/probe.h"

namespace nb = nanobind;
using namespace scatterx;

namespace {

template <class... Ts, class F> void dispatch_type(int code, type_list<Ts...>, F&& f) {
    int i = 0;
    bool done = false;
    ((i++ == code ? (f(std::type_identity<Ts>{}), done = true) : false), ...);
    if (!done) throw std::invalid_argument("scatterx._core: unknown element type code");
}

template <class F> void dispatch_reduction(int r, F&& f) {
    switch (r) {
        case 0: return f(std::integral_constant<Reduction, Reduction::none>{});
        case 1: return f(std::integral_constant<Reduction, Reduction::add>{});
        case 2: return f(std::integral_constant<Reduction, Reduction::mul>{});
        case 3: return f(std::integral_constant<Reduction, Reduction::max>{});
        case 4: return f(std::integral_constant<Reduction, Reduction::min>{});
        default: throw std::invalid_argument("scatterx._core: unknown reduction code");
    }
}

template <class F> void dispatch_index(int itemsize, F&& f) {
    if (itemsize == 4) return f(std::type_identity<int32_t>{});
    if (itemsize == 8) return f(std::type_identity<int64_t>{});
    throw std::invalid_argument("scatterx._core: indices must be int32 or int64");
}

// Kernels that only move bytes are instantiated per element size.
template <class F> void dispatch_itemsize(int64_t itemsize, F&& f) {
    switch (itemsize) {
        case 1: return f(std::integral_constant<int64_t, 1>{});
        case 2: return f(std::integral_constant<int64_t, 2>{});
        case 4: return f(std::integral_constant<int64_t, 4>{});
        case 8: return f(std::integral_constant<int64_t, 8>{});
        case 16: return f(std::integral_constant<int64_t, 16>{});
        default: throw std::invalid_argument("scatterx._core: unsupported element size");
    }
}

struct View {
    char* data;
    int ndim;
    const int64_t* shape;
    const int64_t* strides;
    int64_t itemsize;
};

View view(nb::handle h, const char* what, bool writeable = false) {
    if (!PyArray_Check(h.ptr())) throw nb::type_error((std::string(what) + " must be a numpy array").c_str());
    auto* a = reinterpret_cast<PyArrayObject*>(h.ptr());
    if (!PyArray_ISALIGNED(a)) throw std::invalid_argument(std::string(what) + " must be aligned");
    if (writeable && !PyArray_ISWRITEABLE(a)) throw std::invalid_argument(std::string(what) + " is read-only");
    if (PyArray_NDIM(a) > kMaxDims) throw std::invalid_argument("too many dimensions");
    static_assert(sizeof(npy_intp) == sizeof(int64_t), "64-bit platforms only");
    return View{static_cast<char*>(PyArray_DATA(a)), PyArray_NDIM(a),
                reinterpret_cast<const int64_t*>(PyArray_DIMS(a)),
                reinterpret_cast<const int64_t*>(PyArray_STRIDES(a)), int64_t(PyArray_ITEMSIZE(a))};
}

bool same_shape(const View& a, const View& b) {
    if (a.ndim != b.ndim) return false;
    for (int d = 0; d < a.ndim; ++d)
        if (a.shape[d] != b.shape[d]) return false;
    return true;
}

// The checks every kernel relies on: equal ranks, indices within data on non-axis dims,
// a valid axis, integer indices of 4 or 8 bytes.
void check_geometry(const View& data, const View& idx, int axis) {
    if (data.ndim < 1 || idx.ndim != data.ndim || axis < 0 || axis >= data.ndim)
        throw std::invalid_argument("scatterx._core: rank or axis mismatch");
    for (int d = 0; d < data.ndim; ++d)
        if (d != axis && idx.shape[d] > data.shape[d])
            throw std::invalid_argument("scatterx._core: indices larger than data");
}

int64_t type_itemsize(int code) {
    int64_t size = 0;
    dispatch_type(code, element_types{}, [&](auto t) { size = sizeof(typename decltype(t)::type); });
    return size;
}

int64_t first_bad_index(nb::handle indices, int64_t size) {
    View idx = view(indices, "indices");
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        nb::gil_scoped_release release;
        bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, size);
    });
    return bad;
}

// Releases the GIL only when the work is large enough to pay for it.
class MaybeRelease {
  public:
    explicit MaybeRelease(bool release) : state_(release ? PyEval_SaveThread() : nullptr) {}
    ~MaybeRelease() {
        if (state_) PyEval_RestoreThread(state_);
    }
    MaybeRelease(const MaybeRelease&) = delete;
    MaybeRelease& operator=(const MaybeRelease&) = delete;

  private:
    PyThreadState* state_;
};

bool worth_releasing(const View& a, const View& b) {
    return volume(a.shape, a.ndim) + volume(b.shape, b.ndim) >= 4096;
}

// Scatters into `out`. Returns -1, or the flat position of the first out-of-bounds index. With
// copy=True, data is first copied into out. With precheck=True every index is checked before
// anything is written (out keeps its contents on error); with precheck=False the check is fused
// into the scatter (for a fresh output that the caller discards on error).
int64_t run_scatter(const View& data, const View& idx, const View& upd, const View& out, int axis,
                    int reduction, int type_code, bool copy, bool precheck) {
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        MaybeRelease release(worth_releasing(data, idx));
        if (precheck) {
            bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
            if (bad >= 0) return;
        }
        // The copy of data is fused into the scatter when the indices visit every fiber.
        const bool fused = copy && covers_all_fibers(idx.shape, data.shape, data.ndim, axis);
        if (copy && !fused)
            copy_strided(out.data, out.strides, data.data, data.strides, data.shape, data.ndim, data.itemsize);
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, out.strides, idx.strides, upd.strides,
                                   out.shape[axis], fused ? data.strides : nullptr);
        dispatch_type(type_code, element_types{}, [&](auto tt) {
            using T = typename decltype(tt)::type;
            dispatch_reduction(reduction, [&](auto rr) {
                constexpr Reduction R = decltype(rr)::value;
                if constexpr (supported_v<T, R>) {
                    if (!scatter_kernel<T, I, R>(g, out.data, idx.data, upd.data, fused ? data.data : nullptr))
                        bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
                } else {
                    throw std::invalid_argument("scatterx._core: reduction not defined for this type");
                }
            });
        });
    });
    return bad;
}

// The arrays of the bench's probes: one dimension, the elements adjacent (or at most one).
inline bool dense_1d(const View& v) { return v.ndim == 1 && (v.shape[0] <= 1 || v.strides[0] == v.itemsize); }
// The NumPy kind of an array's type ('i' signed integers, 'f' floats, ...).
inline char dtype_kind(nb::handle h) { return PyArray_DESCR(reinterpret_cast<PyArrayObject*>(h.ptr()))->kind; }
// Positions of the probes: dense int32 or int64.
inline bool dense_positions(const View& pos, nb::handle h) {
    return dense_1d(pos) && (pos.itemsize == 4 || pos.itemsize == 8) && dtype_kind(h) == 'i';
}

// The probe of `scatterx bench` (probe.h): touches `span` bytes of `table` at each byte offset
// of `positions` (int32 or int64), reading, or reading and storing back with `write`, prefetching
// `ahead` positions early, while reading `stream` (uint8, or None) in step, or with
// `stream_written` writing it in full by streaming stores; the threads sharing the work as
// `split` says ("ranges", "reader", "targets", "lines", "checked" or "columns": TouchSplit;
// "checked" reads the stream's last `checked` bytes by ranges; "columns" shares the positions,
// rows of `fibers`, by fibers). With `then_write` (not None), a second pass over
// the same positions follows, touching with that flag and writing the stream when
// `then_stream_written`; with ranges, both passes over each block of `block` positions (0: all)
// before the next (touch_lines).
uint64_t touch(nb::handle table_h, nb::handle positions_h, int64_t span, bool write, int64_t ahead,
               nb::handle stream_h, const std::string& split_name, bool stream_written, std::optional<bool> then_write,
               bool then_stream_written, int64_t block, int64_t checked, int64_t fibers) {
    static const char* const split_names[] = {"ranges", "reader", "targets", "lines", "checked", "columns"};
    const auto* found = std::find(std::begin(split_names), std::end(split_names), split_name);
    if (found == std::end(split_names))
        throw std::invalid_argument("scatterx._core.touch: split must be ranges, reader, targets, lines, checked or "
                                    "columns, got '" + split_name + "'");
    const auto split = TouchSplit(found - std::begin(split_names));
    if (block < 0) throw std::invalid_argument("scatterx._core.touch: block must be at least 0");
    const bool writes = write || then_write.value_or(false);
    View table = view(table_h, "table", writes), pos = view(positions_h, "positions");
    if (!dense_1d(table) || table.itemsize != 1 || !dense_positions(pos, positions_h))
        throw std::invalid_argument("scatterx._core.touch: a contiguous uint8 table and int32 or int64 positions");
    const char* stream = nullptr;
    int64_t stream_bytes = 0;
    if (!stream_h.is_none()) {
        View st = view(stream_h, "stream", stream_written || (then_write && then_stream_written));
        if (st.ndim != 1 || st.itemsize != 1 || (st.shape[0] > 1 && st.strides[0] != 1))
            throw std::invalid_argument("scatterx._core.touch: the stream must be a contiguous uint8 array");
        stream = st.data;
        stream_bytes = st.shape[0];
    }
    if (checked < 0 || checked > stream_bytes || (split == TouchSplit::checked) != (checked > 0))
        throw std::invalid_argument(
            "scatterx._core.touch: checked must be between 1 and the stream's length for the checked split, and 0 "
            "for the others");
    if ((split == TouchSplit::columns) != (fibers > 0) || fibers < 0 ||
        (fibers > 0 && pos.shape[0] % fibers != 0))
        throw std::invalid_argument(
            "scatterx._core.touch: fibers must divide the number of positions for the columns split, and be 0 for "
            "the others");
    const TouchPass second{then_write.value_or(false), then_stream_written};
    const TouchPass* then = then_write ? &second : nullptr;
    nb::gil_scoped_release release;
    if (pos.itemsize == 4)
        return touch_lines(table.data, table.shape[0], reinterpret_cast<const int32_t*>(pos.data), pos.shape[0],
                           span, write, ahead, stream, stream_bytes, split, stream_written, then, block, checked,
                           fibers);
    return touch_lines(table.data, table.shape[0], reinterpret_cast<const int64_t*>(pos.data), pos.shape[0],
                       span, write, ahead, stream, stream_bytes, split, stream_written, then, block, checked, fibers);
}

// The ordered loop of `scatterx bench` (probe.h, ordered_adds): a float32 or float64 `table`,
// `values` of its type and int32 or int64 `positions` (one per value, each within the table),
// all contiguous; the stretch of positions and values applied over and over until `count` adds.
void ordered_adds_loop(nb::handle table_h, nb::handle positions_h, nb::handle values_h, int64_t count) {
    View table = view(table_h, "table", true), pos = view(positions_h, "positions"), val = view(values_h, "values");
    if (!dense_1d(table) || !dense_1d(val) || !dense_positions(pos, positions_h) || dtype_kind(table_h) != 'f' ||
        dtype_kind(values_h) != 'f' || (table.itemsize != 4 && table.itemsize != 8) ||
        val.itemsize != table.itemsize || pos.shape[0] != val.shape[0] || count < 0 || (count > 0 && pos.shape[0] == 0))
        throw std::invalid_argument(
            "scatterx._core.ordered_adds: a contiguous float32 or float64 table, values of its type and as many "
            "int32 or int64 positions, a count >= 0");
    const int64_t n = pos.shape[0], size = table.shape[0];
    for (int64_t k = 0; k < n; ++k) {
        const int64_t v = pos.itemsize == 4 ? int64_t(reinterpret_cast<const int32_t*>(pos.data)[k])
                                            : reinterpret_cast<const int64_t*>(pos.data)[k];
        if (v < 0 || v >= size)
            throw std::invalid_argument("scatterx._core.ordered_adds: a position outside the table");
    }
    nb::gil_scoped_release release;
    auto go = [&](auto t, auto p) {
        using T = typename decltype(t)::type;
        using P = typename decltype(p)::type;
        ordered_adds(reinterpret_cast<T*>(table.data), reinterpret_cast<const P*>(pos.data),
                     reinterpret_cast<const T*>(val.data), n, count);
    };
    if (table.itemsize == 4)
        pos.itemsize == 4 ? go(std::type_identity<float>{}, std::type_identity<int32_t>{})
                          : go(std::type_identity<float>{}, std::type_identity<int64_t>{});
    else
        pos.itemsize == 4 ? go(std::type_identity<double>{}, std::type_identity<int32_t>{})
                          : go(std::type_identity<double>{}, std::type_identity<int64_t>{});
}

// The streams' walk of `scatterx bench` (probe.h, read_streams_whole): a 1-D contiguous index
// and updates of as many elements, any types; each of the pool's threads (two at most) reads both
// whole. Returns the sum of the bytes read.
uint64_t read_streams(nb::handle indices_h, nb::handle updates_h) {
    View idx = view(indices_h, "indices"), upd = view(updates_h, "updates");
    if (!dense_1d(idx) || !dense_1d(upd) || idx.shape[0] != upd.shape[0])
        throw std::invalid_argument(
            "scatterx._core.read_streams: a contiguous 1-D index and contiguous 1-D updates of as many elements");
    nb::gil_scoped_release release;
    return read_streams_whole(static_cast<const char*>(idx.data), idx.itemsize, static_cast<const char*>(upd.data),
                              upd.itemsize, idx.shape[0]);
}

int64_t scatter(nb::handle data_h, nb::handle indices_h, nb::handle updates_h, nb::handle out_h,
                int axis, int reduction, int type_code, bool copy, bool precheck) {
    View data = view(data_h, "data"), idx = view(indices_h, "indices");
    View upd = view(updates_h, "updates"), out = view(out_h, "out", true);
    check_geometry(data, idx, axis);
    const int64_t itemsize = type_itemsize(type_code);
    if (!same_shape(idx, upd) || !same_shape(data, out) || data.itemsize != itemsize ||
        upd.itemsize != itemsize || out.itemsize != itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    return run_scatter(data, idx, upd, out, axis, reduction, type_code, copy, precheck);
}

// Gathers into `out` (shape of indices). Returns -1 or the first bad flat position; with
// precheck=True nothing is written in that case.
int64_t run_gather(const View& data, const View& idx, const View& out, int axis, bool precheck) {
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        MaybeRelease release(worth_releasing(idx, idx));
        if (precheck) {
            bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
            if (bad >= 0) return;
        }
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, data.strides, idx.strides, out.strides,
                                   data.shape[axis]);
        bool ok = true;
        dispatch_itemsize(data.itemsize, [&](auto n) {
            ok = gather_kernel<decltype(n)::value, I>(g, data.data, idx.data, out.data);
        });
        if (!ok) bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
    });
    return bad;
}

int64_t gather(nb::handle data_h, nb::handle indices_h, nb::handle out_h, int axis, bool precheck) {
    View data = view(data_h, "data"), idx = view(indices_h, "indices"), out = view(out_h, "out", true);
    check_geometry(data, idx, axis);
    if (!same_shape(idx, out) || out.itemsize != data.itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    return run_gather(data, idx, out, axis, precheck);
}

// dst[...] = src[...] on the pool's threads (arrays of one shape and element size, which must
// not overlap). NumPy copies on one thread.
void copy_py(nb::handle src_h, nb::handle dst_h) {
    View src = view(src_h, "src"), dst = view(dst_h, "dst", true);
    if (!same_shape(src, dst) || src.itemsize != dst.itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    MaybeRelease release(worth_releasing(dst, dst));
    copy_strided(dst.data, dst.strides, src.data, src.strides, src.shape, src.ndim, src.itemsize);
}

// The backward of reduction "none": grad_output is copied into grad_data (fused, fiber by fiber), whose
// written positions then end at zero; grad_updates receives the gradient of each last writer
// (zero for overwritten updates). Returns -1 or the first bad flat position.
int64_t take_last_writer_py(nb::handle grad_output_h, nb::handle indices_h, nb::handle grad_data_h,
                            nb::handle grad_updates_h, int axis) {
    View go = view(grad_output_h, "grad_output"), gd = view(grad_data_h, "grad_data", true);
    View idx = view(indices_h, "indices"), gu = view(grad_updates_h, "grad_updates", true);
    check_geometry(gd, idx, axis);
    if (!same_shape(idx, gu) || !same_shape(go, gd) || gu.itemsize != gd.itemsize || go.itemsize != gd.itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        MaybeRelease release(worth_releasing(gd, idx));
        const bool fused = covers_all_fibers(idx.shape, gd.shape, gd.ndim, axis);
        if (!fused) copy_strided(gd.data, gd.strides, go.data, go.strides, go.shape, go.ndim, go.itemsize);
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, gd.strides, idx.strides, gu.strides, gd.shape[axis],
                                   fused ? go.strides : nullptr);
        bool ok = true;
        dispatch_itemsize(gd.itemsize, [&](auto n) {
            ok = take_last_writer<decltype(n)::value, I>(g, gd.data, idx.data, gu.data, fused ? go.data : nullptr);
        });
        if (!ok) bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, gd.shape[axis]);
    });
    return bad;
}

bool same_layout(const View& a, const View& b) {
    if (!same_shape(a, b) || a.itemsize != b.itemsize) return false;
    if (volume(a.shape, a.ndim) == 0) return true;  // no element: strides are arbitrary
    for (int d = 0; d < a.ndim; ++d)
        if (a.shape[d] > 1 && a.strides[d] != b.strides[d]) return false;
    return true;
}

// The backward of "mul" (see mul_backward): from G (the output gradient) and D (data), in the
// compute type, writes grad_data (dD) at every fiber the indices reach and grad_updates. dD, G
// and D share one layout (non-negative strides), as do updates and grad_updates. The compute
// type is float32, float64, complex64 or complex128. Returns -1 or the first bad flat position.
int64_t mul_backward_py(nb::handle g_h, nb::handle d_h, nb::handle indices_h, nb::handle updates_h,
                        nb::handle grad_data_h, nb::handle grad_updates_h, int axis, int type_code) {
    View G = view(g_h, "G"), D = view(d_h, "D");
    View dD = view(grad_data_h, "grad_data", true);
    View idx = view(indices_h, "indices"), u = view(updates_h, "updates");
    View gu = view(grad_updates_h, "grad_updates", true);
    check_geometry(dD, idx, axis);
    if (!same_layout(dD, G) || !same_layout(dD, D) || !same_shape(idx, u) ||
        !same_layout(u, gu) || u.itemsize != dD.itemsize || type_itemsize(type_code) != dD.itemsize)
        throw std::invalid_argument("scatterx._core: shape, layout or element size mismatch");
    // The bytes from dD's first element to the end of its last (G's and D's too).
    int64_t extent = dD.itemsize;
    for (int d = 0; d < dD.ndim; ++d) {
        if (dD.strides[d] < 0) throw std::invalid_argument("scatterx._core: mul_backward needs non-negative strides");
        extent = dD.shape[d] == 0 ? 0 : extent + (dD.shape[d] - 1) * dD.strides[d];
        if (extent == 0) break;
    }
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        MaybeRelease release(worth_releasing(dD, idx));
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, dD.strides, idx.strides, u.strides, dD.shape[axis]);
        bool ok = true;
        dispatch_type(type_code, element_types{}, [&](auto tt) {
            using T = typename decltype(tt)::type;
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || is_complex_v<T>)
                ok = mul_backward<T, I>(g, dD.data, extent, G.data, D.data, idx.data, u.data, gu.data);
            else
                throw std::invalid_argument("scatterx._core: mul_backward needs a float or complex compute type");
        });
        if (!ok) bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, dD.shape[axis]);
    });
    return bad;
}

bool c_contiguous(const View& v) {
    if (volume(v.shape, v.ndim) == 0) return true;  // no element: strides are arbitrary
    int64_t step = v.itemsize;
    for (int d = v.ndim - 1; d >= 0; --d) {
        if (v.shape[d] > 1 && v.strides[d] != step) return false;
        step *= v.shape[d];
    }
    return true;
}

// The backward of "max"/"min" (see extremum_backward): from G (the output gradient, in the
// compute type float32 or float64) and what ties, writes grad_data and grad_updates. What ties
// comes either from the residuals' masks (bool: A = data_ties in data's shape, B = update_ties
// in indices'; C None) or from the values (A = data, B = updates, C = the forward result, all of
// data's dtype, `type_code`). G, grad_data, A and C are C-contiguous in one shape, B and
// grad_updates in indices'. Returns -1 or the first bad flat position.
int64_t extremum_backward_py(nb::handle g_h, nb::handle a_h, nb::handle indices_h, nb::handle b_h, nb::handle c_h,
                             nb::handle grad_data_h, nb::handle grad_updates_h, int axis, int type_code) {
    View G = view(g_h, "G"), A = view(a_h, "data"), idx = view(indices_h, "indices");
    View B = view(b_h, "updates"), dD = view(grad_data_h, "grad_data", true);
    View gu = view(grad_updates_h, "grad_updates", true);
    const bool masks = c_h.is_none();
    View C = masks ? A : view(c_h, "output");
    check_geometry(dD, idx, axis);
    const int64_t vsize = masks ? 1 : type_itemsize(type_code);
    if (!same_layout(dD, G) || !same_shape(dD, A) || !same_shape(dD, C) || !same_shape(idx, B) ||
        !same_shape(idx, gu) || A.itemsize != vsize || B.itemsize != vsize || C.itemsize != vsize ||
        gu.itemsize != dD.itemsize || !c_contiguous(dD) || !c_contiguous(A) || !c_contiguous(B) ||
        !c_contiguous(C) || !c_contiguous(gu))
        throw std::invalid_argument("scatterx._core: shape, layout or element size mismatch");
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        MaybeRelease release(worth_releasing(dD, idx));
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, dD.strides, idx.strides, B.strides, dD.shape[axis]);
        auto run = [&](const auto& ties) {
            if (dD.itemsize == 4)
                return extremum_backward<float, I>(g, dD.data, G.data, ties, idx.data, B.data, vsize, gu.data);
            if (dD.itemsize == 8)
                return extremum_backward<double, I>(g, dD.data, G.data, ties, idx.data, B.data, vsize, gu.data);
            throw std::invalid_argument("scatterx._core: extremum_backward needs float32 or float64");
        };
        bool ok = true;
        if (masks) {
            ok = run(MaskTies{reinterpret_cast<const uint8_t*>(A.data), reinterpret_cast<const uint8_t*>(B.data)});
        } else {
            dispatch_type(type_code, element_types{}, [&](auto tt) {
                using V = typename decltype(tt)::type;
                if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double> || std::is_same_v<V, float16> ||
                              std::is_same_v<V, bfloat16>)
                    ok = run(ValueTies<V>{reinterpret_cast<const V*>(A.data), reinterpret_cast<const V*>(B.data),
                                          reinterpret_cast<const V*>(C.data)});
                else
                    throw std::invalid_argument("scatterx._core: extremum_backward needs a float data type");
            });
        }
        if (!ok) bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, dD.shape[axis]);
    });
    return bad;
}

// ---- Output memory. NumPy returns a large freed block to the system, so the next output of that
// size faults in fresh pages that the kernel zeroes first. The outputs scatterx allocates (1 MiB
// and up) use this NumPy memory handler (NEP 49) instead: freed blocks, up to a byte limit, are
// kept and handed out again for the next output they fit. Measured on the 2-core machine: a 1-D
// gather of 1e7 float64, 20.3 ms into a new block vs 14.6 ms into a reused one. Only with
// glibc (malloc_usable_size gives each block's true size); elsewhere the limit is 0. ----

namespace output_cache {
struct Block {
    void* ptr;
    size_t usable;
};
std::mutex mutex;
std::vector<Block> blocks;  // freed, oldest first
size_t held = 0;
#if defined(__GLIBC__)
size_t limit = size_t(256) << 20;
#else
size_t limit = 0;
#endif
constexpr size_t kMinBytes = size_t(1) << 20;

void trim_locked(size_t keep) {
    while (held > keep && !blocks.empty()) {
        std::free(blocks.front().ptr);
        held -= blocks.front().usable;
        blocks.erase(blocks.begin());
    }
}

// A new block of 4 MiB and more is marked for transparent huge pages, as NumPy's own allocator
// marks its arrays (and following its setting, `huge_pages`, which the module reads from NumPy
// at import). Without it, where Linux gives huge pages only to marked memory (THP "madvise"),
// scatterx's results were the one large array of a call on 4 KiB pages, and random updates into
// them missed the TLB at a good share of their accesses (Emerald Rapids virtual machine: the
// max0 pattern standalone 31.1-32.8 -> 28.1-29.1 ms; docs/performance.md, "Output memory").
constexpr size_t kHugeBytes = size_t(4) << 20;
std::atomic<bool> huge_pages{false};
bool set_huge_pages(bool on) { return huge_pages.exchange(on); }
void advise_huge_pages(void* ptr, size_t size) {
#if defined(MADV_HUGEPAGE)
    // madvise takes whole pages: the pages inside the block (4 KiB on x86-64, 64 KiB on some
    // ARM kernels).
    static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t start = (reinterpret_cast<uintptr_t>(ptr) + page - 1) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + size) & ~(page - 1);
    if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
#else
    (void)ptr, (void)size;
#endif
}

// Every block that take hands out (each new result of new_output) starts on a page boundary, so
// that a row of 64 bytes or a multiple of them starts on a cache line: malloc aligns to 16 bytes
// only, and a result's rows of 256 bytes (message passing) then spanned five lines each, a random
// update to one touching five lines, not four. take_zeroed and resize, which new_output never
// calls, keep the C library's alignment.
// Stop 73, an Intel Xeon virtual machine (family 6 model 167, 2 MB of L2 per core), one build
// with a switch, one process, two threads, six rounds of medians of nine calls, bits the same,
// malloc's block / one on a page boundary: mp_add 8.40 / 7.82 ms (its block 48 bytes past a
// line; faster in 6 of 6 rounds), gather_mp 4.11 / 3.97, mp_add_dense 18.57 / 18.22, vjp_add
// 4.84 / 4.50 (6 of 6 each); where malloc's block happened to start on a line, no difference.
constexpr size_t kBlockAlign = 4096;

void* take(void*, size_t size) {
    if (size >= kMinBytes) {
        std::lock_guard<std::mutex> lk(mutex);
        for (size_t i = blocks.size(); i-- > 0;) {
            const Block b = blocks[i];
            if (b.usable >= size && b.usable - size <= size / 8) {  // fits, wasting at most 1/8
                blocks.erase(blocks.begin() + std::ptrdiff_t(i));
                held -= b.usable;
                return b.ptr;
            }
        }
    }
    void* ptr = nullptr;
    if (posix_memalign(&ptr, kBlockAlign, size) != 0) return nullptr;
    if (size >= kHugeBytes && huge_pages) advise_huge_pages(ptr, size);
    return ptr;
}
void* take_zeroed(void*, size_t n, size_t size) { return std::calloc(n, size); }
void* resize(void*, void* ptr, size_t size) { return std::realloc(ptr, size); }
void give_back(void*, void* ptr, size_t size) {
#if defined(__GLIBC__)
    if (ptr && size >= kMinBytes) {
        const size_t usable = malloc_usable_size(ptr);
        std::lock_guard<std::mutex> lk(mutex);
        if (usable <= limit) {
            trim_locked(limit - usable);
            blocks.push_back({ptr, usable});
            held += usable;
            return;
        }
    }
#endif
    std::free(ptr);
}

PyDataMem_Handler handler = {"scatterx_output_cache", 1, {nullptr, take, take_zeroed, resize, give_back}};
PyObject* capsule = nullptr;  // created at import, never released (arrays may outlive the module)

size_t set_limit(size_t bytes) {
#if !defined(__GLIBC__)
    bytes = 0;
#endif
    std::lock_guard<std::mutex> lk(mutex);
    limit = bytes;
    trim_locked(limit);
    return limit;
}
size_t held_bytes() {
    std::lock_guard<std::mutex> lk(mutex);
    return held;
}
}  // namespace output_cache

// A new C-contiguous array (steals `descr`); one of 1 MiB and more through the output cache's
// handler, whatever its limit (with the limit at 0 nothing is kept, but the block still starts on
// a page boundary, kBlockAlign).
nb::object new_output(int nd, npy_intp* dims, PyArray_Descr* descr) {
    npy_intp count = 1;
    for (int d = 0; d < nd; ++d) count *= dims[d];
    const bool large = size_t(count) * size_t(PyDataType_ELSIZE(descr)) >= output_cache::kMinBytes;
    PyObject* previous = large ? PyDataMem_SetHandler(output_cache::capsule) : nullptr;
    if (large && !previous) {
        Py_DECREF(descr);
        throw nb::python_error();
    }
    PyObject* arr = PyArray_Empty(nd, dims, descr, 0);
    if (large) {
        PyObject* ours = PyDataMem_SetHandler(previous);
        Py_DECREF(previous);
        Py_XDECREF(ours);
    }
    if (!arr) throw nb::python_error();
    return nb::steal(arr);
}

nb::object empty_output(std::vector<int64_t> shape, nb::handle dtype_h) {
    if (shape.size() > size_t(kMaxDims)) throw std::invalid_argument("too many dimensions");
    for (int64_t n : shape)
        if (n < 0) throw std::invalid_argument("negative dimension");
    PyArray_Descr* descr = nullptr;
    if (!PyArray_DescrConverter(dtype_h.ptr(), &descr)) throw nb::python_error();
    static_assert(sizeof(npy_intp) == sizeof(int64_t), "64-bit platforms only");
    return new_output(int(shape.size()), reinterpret_cast<npy_intp*>(shape.data()), descr);
}

// ---- The short path: everything validated here for the common case, or None to fall back to
// the Python layer (which then validates fully and raises the precise error). An index out of
// bounds, which the kernel finds as it goes, raises OutOfBounds(its flat position, the axis),
// from which the Python layer raises the error at once rather than running the call again (an
// exception, where a result to tell apart from the array would cost every call a test). ----

PyObject* out_of_bounds_type = nullptr;

[[noreturn]] void out_of_bounds_at(int64_t flat, int axis) {
    PyErr_SetObject(out_of_bounds_type, nb::make_tuple(flat, axis).ptr());
    throw nb::python_error();
}

int bfloat16_type_num = -1;

template <class T> constexpr char numpy_kind() {
    if constexpr (std::is_same_v<T, boolean>) return 'b';
    else if constexpr (std::is_integral_v<T>) return std::is_signed_v<T> ? 'i' : 'u';
    else if constexpr (is_complex_v<T>) return 'c';
    else if constexpr (std::is_same_v<T, bfloat16>) return 'V';
    else return 'f';
}

template <class... Ts> int code_of(char kind, int64_t size, type_list<Ts...>) {
    int i = 0, found = -1;
    ((found < 0 && numpy_kind<Ts>() == kind && int64_t(sizeof(Ts)) == size ? found = i : 0, ++i), ...);
    return found;
}

// The native type code of an array, or -1 (unknown type, swapped bytes, unaligned).
int fast_type_code(PyArrayObject* a) {
    if (!PyArray_ISNOTSWAPPED(a) || !PyArray_ISALIGNED(a)) return -1;
    PyArray_Descr* d = PyArray_DESCR(a);
    if (d->type_num == bfloat16_type_num) return code_of('V', 2, element_types{});
    if (d->type_num >= NPY_NTYPES_LEGACY || d->kind == 'V') return -1;
    return code_of(d->kind, PyArray_ITEMSIZE(a), element_types{});
}

int fast_reduction(nb::handle r) {
    if (!PyUnicode_Check(r.ptr())) return -1;
    for (int i = 0; i < 5; ++i)
        if (PyUnicode_CompareWithASCIIString(r.ptr(), reduction_names[i]) == 0) return i;
    return -1;
}

// src into dst, both C-contiguous and of one shape, float32 into float16 or bfloat16 or back:
// NumPy's and ml_dtypes' casts, bit for bit (narrow, widen).
void convert_py(nb::handle src_h, nb::handle dst_h) {
    View src = view(src_h, "src"), dst = view(dst_h, "dst", true);
    auto* s = reinterpret_cast<PyArrayObject*>(src_h.ptr());
    auto* d = reinterpret_cast<PyArrayObject*>(dst_h.ptr());
    auto kind = [](PyArrayObject* a) {  // 0 float32, 1 float16, 2 bfloat16, -1 other
        if (!PyArray_ISNOTSWAPPED(a)) return -1;
        const int t = PyArray_TYPE(a);
        return t == NPY_FLOAT32 ? 0 : t == NPY_FLOAT16 ? 1 : t == bfloat16_type_num ? 2 : -1;
    };
    const int from = kind(s), to = kind(d);
    if (from < 0 || to < 0 || (from == 0) == (to == 0))
        throw std::invalid_argument("scatterx._core.convert: float32 into float16 or bfloat16, or back, only");
    if (!same_shape(src, dst) || !PyArray_IS_C_CONTIGUOUS(s) || !PyArray_IS_C_CONTIGUOUS(d))
        throw std::invalid_argument("scatterx._core.convert: C-contiguous arrays of one shape only");
    if (PyArray_SIZE(s) > 0 && src.data < dst.data + PyArray_NBYTES(d) && dst.data < src.data + PyArray_NBYTES(s))
        throw std::invalid_argument("scatterx._core.convert: src and dst overlap");
    MaybeRelease release(worth_releasing(dst, dst));
    const int64_t n = PyArray_SIZE(s);
    if (to == 1) narrow(reinterpret_cast<float16*>(dst.data), reinterpret_cast<const float*>(src.data), n);
    else if (to == 2) narrow(reinterpret_cast<bfloat16*>(dst.data), reinterpret_cast<const float*>(src.data), n);
    else if (from == 1) widen(reinterpret_cast<float*>(dst.data), reinterpret_cast<const float16*>(src.data), n);
    else widen(reinterpret_cast<float*>(dst.data), reinterpret_cast<const bfloat16*>(src.data), n);
}

bool fast_supported(int code, int reduction) {
    bool ok = false;
    dispatch_type(code, element_types{}, [&](auto tt) {
        using T = typename decltype(tt)::type;
        dispatch_reduction(reduction, [&](auto rr) { ok = supported_v<T, decltype(rr)::value>; });
    });
    return ok;
}

// Returns a normalised axis, or -1 when the short path does not apply.
int fast_geometry(PyArrayObject* data, PyArrayObject* idx, nb::handle axis_h) {
    if (!PyLong_CheckExact(axis_h.ptr())) return -1;
    const long axis_raw = PyLong_AsLong(axis_h.ptr());
    if (axis_raw == -1 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    const int nd = PyArray_NDIM(data);
    if (nd < 1 || nd > kMaxDims || PyArray_NDIM(idx) != nd || axis_raw < -nd || axis_raw >= nd) return -1;
    const int axis = int(axis_raw < 0 ? axis_raw + nd : axis_raw);
    if (PyArray_DESCR(idx)->kind != 'i' || (PyArray_ITEMSIZE(idx) != 4 && PyArray_ITEMSIZE(idx) != 8) ||
        !PyArray_ISNOTSWAPPED(idx) || !PyArray_ISALIGNED(idx))
        return -1;
    for (int d = 0; d < nd; ++d)
        if (d != axis && PyArray_DIMS(idx)[d] > PyArray_DIMS(data)[d]) return -1;
    return axis;
}

nb::object scatter_fast(nb::handle data_h, nb::handle indices_h, nb::handle updates_h, nb::handle axis_h,
                        nb::handle reduction_h) {
    if (!PyArray_Check(data_h.ptr()) || !PyArray_Check(indices_h.ptr()) || !PyArray_Check(updates_h.ptr()))
        return nb::none();
    auto* data = reinterpret_cast<PyArrayObject*>(data_h.ptr());
    auto* idx = reinterpret_cast<PyArrayObject*>(indices_h.ptr());
    auto* upd = reinterpret_cast<PyArrayObject*>(updates_h.ptr());
    const int code = fast_type_code(data), reduction = fast_reduction(reduction_h);
    if (code < 0 || reduction < 0 || fast_type_code(upd) != code || !fast_supported(code, reduction))
        return nb::none();
    const int axis = fast_geometry(data, idx, axis_h);
    if (axis < 0 || !PyArray_SAMESHAPE(idx, upd)) return nb::none();
    PyArray_Descr* descr = PyArray_DESCR(data);
    Py_INCREF(descr);
    nb::object out = new_output(PyArray_NDIM(data), PyArray_DIMS(data), descr);
    View vd = view(data_h, "data"), vi = view(indices_h, "indices"), vu = view(updates_h, "updates");
    View vo = view(out, "out", true);
    const int64_t bad = run_scatter(vd, vi, vu, vo, axis, reduction, code, true, false);
    if (bad >= 0) out_of_bounds_at(bad, axis);
    return out;
}

nb::object gather_fast(nb::handle data_h, nb::handle indices_h, nb::handle axis_h) {
    if (!PyArray_Check(data_h.ptr()) || !PyArray_Check(indices_h.ptr())) return nb::none();
    auto* data = reinterpret_cast<PyArrayObject*>(data_h.ptr());
    auto* idx = reinterpret_cast<PyArrayObject*>(indices_h.ptr());
    if (fast_type_code(data) < 0) return nb::none();
    const int axis = fast_geometry(data, idx, axis_h);
    if (axis < 0) return nb::none();
    PyArray_Descr* descr = PyArray_DESCR(data);
    Py_INCREF(descr);
    nb::object out = new_output(PyArray_NDIM(idx), PyArray_DIMS(idx), descr);
    View vd = view(data_h, "data"), vi = view(indices_h, "indices"), vo = view(out, "out", true);
    const int64_t bad = run_gather(vd, vi, vo, axis, false);
    if (bad >= 0) out_of_bounds_at(bad, axis);
    return out;
}

int import_numpy() {
    import_array1(-1);
    return 0;
}

}  // namespace

NB_MODULE(_core, m) {
    if (import_numpy() < 0) throw nb::python_error();
    output_cache::capsule = PyCapsule_New(&output_cache::handler, "mem_handler", nullptr);
    if (!output_cache::capsule) throw nb::python_error();
    m.doc() = "scatterx native kernels (private; use the scatterx package)";
    out_of_bounds_type = PyErr_NewExceptionWithDoc(
        "scatterx._core.OutOfBounds",
        "An index out of bounds met by the short path; args: its flat position (row-major), the axis.",
        PyExc_IndexError, nullptr);
    if (!out_of_bounds_type) throw nb::python_error();
    m.attr("OutOfBounds") = nb::borrow(out_of_bounds_type);
    m.attr("element_types") = std::vector<std::string>(std::begin(element_type_names), std::end(element_type_names));
    m.attr("reductions") = std::vector<std::string>(std::begin(reduction_names), std::end(reduction_names));
    m.def("scatter", &scatter, nb::arg("data"), nb::arg("indices"), nb::arg("updates"), nb::arg("out"),
          nb::arg("axis"), nb::arg("reduction"), nb::arg("type_code"), nb::arg("copy"),
          nb::arg("precheck"));
    m.def("touch", &touch, nb::arg("table"), nb::arg("positions"), nb::arg("span"), nb::arg("write"),
          nb::arg("ahead"), nb::arg("stream").none() = nb::none(), nb::arg("split") = "ranges",
          nb::arg("stream_written") = false, nb::arg("then_write").none() = nb::none(),
          nb::arg("then_stream_written") = false, nb::arg("block") = 0, nb::arg("checked") = 0,
          nb::arg("fibers") = 0);
    m.def("read_streams", &read_streams, nb::arg("indices"), nb::arg("updates"));
    m.def("ordered_adds", &ordered_adds_loop, nb::arg("table"), nb::arg("positions"), nb::arg("values"),
          nb::arg("count"));
    m.def("gather", &gather, nb::arg("data"), nb::arg("indices"), nb::arg("out"), nb::arg("axis"),
          nb::arg("precheck"));
    m.def("scatter_fast", &scatter_fast, nb::arg("data"), nb::arg("indices"), nb::arg("updates"),
          nb::arg("axis"), nb::arg("reduction"));
    m.def("gather_fast", &gather_fast, nb::arg("data"), nb::arg("indices"), nb::arg("axis"));
    m.def("set_bfloat16_type", [](int num) { bfloat16_type_num = num; }, nb::arg("type_num"));
    m.def("extremum_backward", &extremum_backward_py, nb::arg("G"), nb::arg("data"), nb::arg("indices"),
          nb::arg("updates"), nb::arg("output").none(), nb::arg("grad_data"), nb::arg("grad_updates"),
          nb::arg("axis"), nb::arg("type_code"));
    m.def("take_last_writer", &take_last_writer_py, nb::arg("grad_output"), nb::arg("indices"),
          nb::arg("grad_data"), nb::arg("grad_updates"), nb::arg("axis"));
    m.def("mul_backward", &mul_backward_py, nb::arg("G"), nb::arg("D"), nb::arg("indices"), nb::arg("updates"),
          nb::arg("grad_data"), nb::arg("grad_updates"), nb::arg("axis"), nb::arg("type_code"));
    m.def("copy", &copy_py, nb::arg("src"), nb::arg("dst"));
    m.def("convert", &convert_py, nb::arg("src"), nb::arg("dst"));
    m.def("empty", &empty_output, nb::arg("shape"), nb::arg("dtype"));
    m.def("set_output_cache_limit", &output_cache::set_limit, nb::arg("nbytes"));
    m.def("output_cache_bytes", &output_cache::held_bytes);
    m.def("set_huge_pages", &output_cache::set_huge_pages, nb::arg("on"));
    m.def("first_bad_index", &first_bad_index, nb::arg("indices"), nb::arg("size"));
    m.def(
        "path_counts",
        [] {
            nb::dict counts;
            for (int k = 0; k < int(Path::count); ++k) counts[path_names[k]] = path_count(k);
            return counts;
        },
        "How many calls have taken each of the kernels' size-, CPU- or setting-gated paths since the module "
        "was loaded (cpp/include/scatterx/paths.h), by name: for tests, which read it before and after a call "
        "to see that the call reached the path it was sized for.");
    m.def("set_num_threads", [](int n) { ThreadPool::instance().set_num_threads(n); }, nb::arg("n"));
    m.def("get_num_threads", [] { return ThreadPool::instance().num_threads(); });
    m.def("set_stream_bytes", [](int64_t n) { return std::exchange(stream_bytes(), n); }, nb::arg("nbytes"),
          "Sets the size of a call (all its arrays) beyond which its output is written by streaming stores; "
          "returns the previous one (for tests).");
    m.def("set_ties_by_select", [](bool on) { return std::exchange(ties_by_select(), on); }, nb::arg("on"),
          "Whether the backward of max/min fetches only the tying updates' counts and shares (the default on "
          "Intel CPUs) or every update's; returns the previous setting (for tests).");
    m.def("set_ties_by_rows", [](bool on) { return std::exchange(ties_by_rows(), on && ties_by_rows_supported()); },
          nb::arg("on"),
          "Whether the float32 and float64 backward of max/min finds a row's ties sixteen at a time (the default "
          "where the CPU has AVX-512F and DQ; never where it has not); returns the previous setting (for tests and "
          "measurements).");
    m.def("set_fiber_streams_ahead", [](bool on) { return std::exchange(fiber_streams_ahead(), on); }, nb::arg("on"),
          "Whether a long contiguous fiber whose targets fit in the cache (a 1-D histogram) asks for its index "
          "and update streams ahead (the default on Intel's CPUs and AMD family 26 and later) or leaves them to the "
          "hardware prefetcher; returns the previous setting (for tests and measurements).");
    m.def("set_fiber_split",
          [](int mode) {
              if (mode < kSplitNever || mode > kSplitByCpu) throw nb::value_error("the mode is 0, 1 or 2");
              return std::exchange(fiber_split(), mode);
          },
          nb::arg("mode"),
          "Whether a long contiguous fiber with random targets beyond L1 (a 1-D histogram) is split by its "
          "targets between two threads or kept on one with a second reading ahead: 0 never, 1 always, 2 (the "
          "default) always where the listing is AVX-512's, where it measured faster with AVX2's, never one "
          "element at a time; returns the previous setting (for tests and measurements).");
    m.def("set_fiber_by_positions", [](bool on) { return std::exchange(fiber_by_positions(), on); },
          nb::arg("on"),
          "Whether a long contiguous fiber whose targets ascend (a sorted index) is split by positions between "
          "two threads (the default) or goes the other ways; returns the previous setting (for tests and "
          "measurements).");
    m.def("set_ascending_chains", [](bool on) { return std::exchange(ascending_chains(), on); }, nb::arg("on"),
          "Whether the halves of a sorted fiber split by positions apply float16 and bfloat16 adds and "
          "products in four chains side by side (the default) or element by element; returns the previous "
          "setting (for tests and measurements).");
    m.def("set_f16c_arith",
          [](bool on) {
#ifdef SCATTERX_HAVE_F16C_PATH
              return std::exchange(f16c_arith_on, on && f16c_arith_supported());
#else
              return false;
#endif
          },
          nb::arg("on"),
          "Whether float16 adds and products element by element convert by F16C's instructions (the default "
          "where the CPU has them; never where it has not); returns the previous setting (for tests and "
          "measurements).");
    m.def("set_half_rows",
          [](bool on) {
#ifdef SCATTERX_HAVE_F16C_PATH
              return std::exchange(half_rows_on, on);
#else
              return false;
#endif
          },
          nb::arg("on"),
          "Whether rows of float16 and bfloat16 adds and products take the CPU's 16-bit float instructions "
          "where it has them (AVX512-FP16's add and product, AVX512_BF16's rounding; the default) or convert "
          "through float32; returns the previous setting (for tests and measurements).");
    m.def("set_fp16_arith",
          [](bool on) {
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
              return std::exchange(fp16_arith_on, on && fp16_arith_supported());
#else
              return false;
#endif
          },
          nb::arg("on"),
          "Whether float16 adds and products element by element take AVX512-FP16's own scalar instructions "
          "(the default where the CPU has them and the module was built with them; never otherwise) before "
          "F16C's conversions (set_f16c_arith) are asked; returns the previous setting (for tests and "
          "measurements).");
    m.def("half_row_instructions",
          [] {
              std::map<std::string, bool> built;
#ifdef SCATTERX_HAVE_HALF_INSTRUCTIONS
              built["avx512fp16"] = cpu_has_avx512fp16();
              built["avx512bf16"] = cpu_has_avx512bf16();
#endif
              return built;
          },
          "The 16-bit float instructions built for rows of float16 and bfloat16 adds and products (see "
          "set_half_rows) and float16's element by element (set_fp16_arith), "
          "each with whether the CPU has it (none where the compiler did not know them).");
    m.def("set_list_width",
          [](int bits) {
              if (!list_width_supported(bits)) throw nb::value_error("the CPU has no vectors of this width");
              return std::exchange(list_width(), bits);
          },
          nb::arg("bits"),
          "The vector width in bits with which the split fiber lists its own elements (512: eight at a time by "
          "AVX-512F, 256: four by AVX2, 0: one at a time) and a sorted fiber checks its index (512: eight or "
          "sixteen at a time; one at a time otherwise); the default is the widest the CPU has. Raises "
          "ValueError for a width it has not; returns the previous setting (for tests).");
    m.def("set_list_sixteen", [](bool on) { return std::exchange(list_sixteen(), on); }, nb::arg("on"),
          "Whether the split fiber's AVX-512 listing takes sixteen indices at a time where its targets fit int32 "
          "(the default), or eight, as beyond INT32_MAX targets; returns the previous setting (for tests).");
    m.def("set_wide_stores", [](bool on) { return std::exchange(wide_stores(), on && wide_stores_supported()); },
          nb::arg("on"),
          "Whether streaming stores write whole 64-byte lines by one AVX-512 store (the default where the CPU "
          "has AVX-512F; never where it has not); returns the previous setting (for tests and measurements).");
    m.def("wide_stores_supported", [] { return wide_stores_supported(); });
    m.def("set_read_once_non_temporal", [](bool on) { return std::exchange(read_once_non_temporal(), on); },
          nb::arg("on"),
          "Whether a materialised index's rows and their update rows, read once, are asked for with the "
          "non-temporal hint (the default on CPUs other than Intel's); returns the previous setting (for tests "
          "and measurements).");
    m.def("set_pieces_per_thread", [](int n) { return std::exchange(pieces_per_thread(), std::max(1, n)); },
          nb::arg("n"),
          "Sets how many pieces per thread a parallel call is cut into, handed out as threads come free (1: one "
          "piece per thread); returns the previous setting (for tests and measurements).");
    m.def("get_stream_bytes", [] { return stream_bytes(); },
          "The size of a call (all its arrays) beyond which its output is written by streaming stores: the "
          "smaller of the last-level cache as Linux reports it and 32 MiB.");
}
