// The one binding file: converts NumPy arrays into pointers, shapes and byte strides, checks the
// invariants the kernels rely on (the Python layer validates first; these checks keep a bad
// internal call from touching memory it should not), releases the GIL and dispatches
// element type x index type x reduction through templates.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL scatterx_ARRAY_API
#include <numpy/arrayobject.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "scatterx/kernels.h"

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

// Scatters into `out`. Returns -1, or the flat position of the first out-of-bounds index. With
// copy=True, data is first copied into out. With precheck=True every index is checked before
// anything is written (out keeps its contents on error); with precheck=False the check is fused
// into the scatter (for a fresh output that the caller discards on error).
int64_t scatter(nb::handle data_h, nb::handle indices_h, nb::handle updates_h, nb::handle out_h,
                int axis, int reduction, int type_code, bool copy, bool precheck) {
    View data = view(data_h, "data"), idx = view(indices_h, "indices");
    View upd = view(updates_h, "updates"), out = view(out_h, "out", true);
    check_geometry(data, idx, axis);
    const int64_t itemsize = type_itemsize(type_code);
    if (!same_shape(idx, upd) || !same_shape(data, out) || data.itemsize != itemsize ||
        upd.itemsize != itemsize || out.itemsize != itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        nb::gil_scoped_release release;
        if (precheck) {
            bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
            if (bad >= 0) return;
        }
        if (copy) copy_strided(out.data, out.strides, data.data, data.strides, data.shape, data.ndim, itemsize);
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, out.strides, idx.strides, upd.strides,
                                   out.shape[axis]);
        dispatch_type(type_code, element_types{}, [&](auto tt) {
            using T = typename decltype(tt)::type;
            dispatch_reduction(reduction, [&](auto rr) {
                constexpr Reduction R = decltype(rr)::value;
                if constexpr (supported_v<T, R>) {
                    if (!scatter_kernel<T, I, R>(g, out.data, idx.data, upd.data))
                        bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
                } else {
                    throw std::invalid_argument("scatterx._core: reduction not defined for this type");
                }
            });
        });
    });
    return bad;
}

// Gathers into `out` (shape of indices). Returns -1 or the first bad flat position; with
// precheck=True nothing is written in that case.
int64_t gather(nb::handle data_h, nb::handle indices_h, nb::handle out_h, int axis, bool precheck) {
    View data = view(data_h, "data"), idx = view(indices_h, "indices"), out = view(out_h, "out", true);
    check_geometry(data, idx, axis);
    if (!same_shape(idx, out) || out.itemsize != data.itemsize)
        throw std::invalid_argument("scatterx._core: shape or element size mismatch");
    int64_t bad = -1;
    dispatch_index(int(idx.itemsize), [&](auto it) {
        using I = typename decltype(it)::type;
        nb::gil_scoped_release release;
        if (precheck) {
            bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
            if (bad >= 0) return;
        }
        Geometry g = make_geometry(idx.shape, idx.ndim, axis, data.strides, idx.strides, out.strides,
                                   data.shape[axis]);
        bool ok = true;
        switch (data.itemsize) {
            case 1: ok = gather_kernel<1, I>(g, data.data, idx.data, out.data); break;
            case 2: ok = gather_kernel<2, I>(g, data.data, idx.data, out.data); break;
            case 4: ok = gather_kernel<4, I>(g, data.data, idx.data, out.data); break;
            case 8: ok = gather_kernel<8, I>(g, data.data, idx.data, out.data); break;
            case 16: ok = gather_kernel<16, I>(g, data.data, idx.data, out.data); break;
            default: throw std::invalid_argument("scatterx._core: unsupported element size");
        }
        if (!ok) bad = find_bad_index<I>(idx.data, idx.shape, idx.strides, idx.ndim, data.shape[axis]);
    });
    return bad;
}

int import_numpy() {
    import_array1(-1);
    return 0;
}

}  // namespace

NB_MODULE(_core, m) {
    if (import_numpy() < 0) throw nb::python_error();
    m.doc() = "scatterx native kernels (private; use the scatterx package)";
    m.attr("element_types") = std::vector<std::string>(std::begin(element_type_names), std::end(element_type_names));
    m.attr("reductions") = std::vector<std::string>(std::begin(reduction_names), std::end(reduction_names));
    m.def("scatter", &scatter, nb::arg("data"), nb::arg("indices"), nb::arg("updates"), nb::arg("out"),
          nb::arg("axis"), nb::arg("reduction"), nb::arg("type_code"), nb::arg("copy"),
          nb::arg("precheck"));
    m.def("gather", &gather, nb::arg("data"), nb::arg("indices"), nb::arg("out"), nb::arg("axis"),
          nb::arg("precheck"));
    m.def("first_bad_index", &first_bad_index, nb::arg("indices"), nb::arg("size"));
    m.def("set_num_threads", [](int n) { ThreadPool::instance().set_num_threads(n); }, nb::arg("n"));
    m.def("get_num_threads", [] { return ThreadPool::instance().num_threads(); });
}
