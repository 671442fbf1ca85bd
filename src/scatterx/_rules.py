"""Validation and shape rules of ScatterElements and GatherElements, in one place.

Every public entry point (the functions, the nodes, the ONNX graph, the Dask wrappers) checks
its inputs here, so the rules and their error messages exist once. See SPEC sections 2-4.
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass

import numpy as np

from . import _core

REDUCTIONS = ("none", "add", "mul", "max", "min")

# The native element types by their type codes (their order in the core's one type list). bfloat16
# joins when ml_dtypes is first needed (`bfloat16`).
_TYPE_CODES = {np.dtype(name): code for code, name in enumerate(_core.element_types) if name != "bfloat16"}
_PLAIN_FLOATS = tuple(np.dtype(n) for n in ("float16", "float32", "float64"))
COMPLEX_DTYPES = (np.dtype("complex64"), np.dtype("complex128"))
_bfloat16: np.dtype | None = None


def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16, ml_dtypes imported on the first call. Its import takes about a second
    with NumPy 2.4 (in a profile, mostly comparisons while its ufunc loops are registered), which
    ``import scatterx`` does not pay. The first call also gives the core the type's number, so
    that its short path takes bfloat16 arrays from then on."""
    global _bfloat16
    if _bfloat16 is None:
        import ml_dtypes

        dtype = np.dtype(ml_dtypes.bfloat16)
        _core.set_bfloat16_type(dtype.num)
        _TYPE_CODES[dtype] = _core.element_types.index("bfloat16")
        _bfloat16 = dtype
    return _bfloat16


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether `dtype` is ml_dtypes' bfloat16. No array can have that dtype before ml_dtypes has
    been imported, so until then this imports nothing and is False."""
    return "ml_dtypes" in sys.modules and dtype == bfloat16()


def is_float_dtype(dtype: np.dtype) -> bool:
    """Whether `dtype` is float16, float32, float64 or bfloat16 (native byte order)."""
    return dtype in _PLAIN_FLOATS or is_bfloat16(dtype)


def is_short_float(dtype: np.dtype) -> bool:
    """Whether `dtype` is float16 or bfloat16 (native byte order): the floats that gradients and
    the native conversions take through float32."""
    return dtype == np.float16 or is_bfloat16(dtype)


def type_code(dtype: np.dtype) -> int:
    """The core's code of a native element type (KeyError for any other)."""
    code = _TYPE_CODES.get(dtype)
    if code is None and is_bfloat16(dtype):
        code = _TYPE_CODES[bfloat16()]
    if code is None:
        raise KeyError(dtype)
    return code


def is_string_dtype(dtype: np.dtype) -> bool:
    """True for the dtypes that take the string path: object, ``U``, ``S`` and StringDType."""
    return dtype.kind in "OUST"


def dtype_category(dtype: np.dtype) -> str:
    """One of "bool", "int", "float", "complex", "string"; TypeError for anything else."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if is_float_dtype(dtype):
        return "float"
    if dtype.kind == "c" and dtype.newbyteorder("=") in COMPLEX_DTYPES:
        return "complex"
    if dtype.kind == "f" and dtype.newbyteorder("=") in _PLAIN_FLOATS:
        return "float"
    if is_string_dtype(dtype):
        return "string"
    raise TypeError(f"scatterx does not support dtype {dtype}")


def check_reduction(reduction: object) -> str:
    if not isinstance(reduction, str):
        raise TypeError(f"reduction must be a string, got {type(reduction).__name__}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {', '.join(REDUCTIONS)}")
    return reduction


def check_reduction_for_dtype(reduction: str, dtype: np.dtype) -> None:
    """TypeError when `reduction` is not defined for `dtype` (SPEC section 3)."""
    category = dtype_category(dtype)
    if category == "complex" and reduction in ("max", "min"):
        raise TypeError(f"reduction {reduction!r} is not defined for dtype {dtype} (complex numbers are unordered)")
    if category == "string" and reduction == "mul":
        raise TypeError(f"reduction 'mul' is not defined for dtype {dtype} (strings)")


def normalize_axis(axis: object, ndim: int) -> int:
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an integer, got {type(axis).__name__}") from None
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for rank {ndim} (allowed: {-ndim}..{ndim - 1})")
    return axis + ndim if axis < 0 else axis


def native(arr: np.ndarray) -> np.ndarray:
    """An aligned, native-byte-order version of `arr` (a copy only when needed)."""
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.aligned:
        arr = np.array(arr, copy=True)
    return arr


_INT64_MAX = np.iinfo(np.int64).max


def as_indices(indices: object, size: int, axis: int) -> np.ndarray:
    """Indices as int32 or int64 (lossless); TypeError for non-integer dtypes.

    A uint64 value above 2**63 - 1 cannot be converted: it is reported as out of bounds.
    """
    was_array = isinstance(indices, np.ndarray)
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        if not was_array and idx.size == 0:
            return np.zeros(idx.shape, np.int64)
        raise TypeError(f"indices must have an integer dtype, got {idx.dtype}")
    idx = native(idx)
    if idx.dtype.kind == "i" and idx.dtype.itemsize in (4, 8):
        return idx
    if idx.dtype.itemsize <= 2:
        return idx.astype(np.int32)
    if idx.dtype == np.uint64 and idx.size:
        big = idx > _INT64_MAX
        if big.any():
            flat = int(np.flatnonzero(big.ravel(order="C"))[0])
            raise_out_of_bounds(idx, flat, axis, size)
    return idx.astype(np.int64)


def check_ranks(data: np.ndarray, indices: np.ndarray, what: str = "indices") -> None:
    if data.ndim == 0:
        raise ValueError("data must have rank >= 1, got a rank-0 array")
    if indices.ndim != data.ndim:
        raise ValueError(
            f"{what} must have the rank of data: data shape {data.shape}, {what} shape {indices.shape}"
        )


def check_fits(data_shape: tuple, indices_shape: tuple, axis: int) -> None:
    """indices.shape[d] <= data.shape[d] for every d != axis."""
    for d, (n, s) in enumerate(zip(indices_shape, data_shape)):
        if d != axis and n > s:
            raise ValueError(
                f"indices shape {tuple(indices_shape)} does not fit data shape {tuple(data_shape)}: "
                f"dimension {d} has {n} > {s} (only the axis {axis} may be longer)"
            )


def out_of_bounds_message(value: int, position: tuple, axis: int, size: int) -> str:
    where = ", ".join(str(p) for p in position)
    allowed = f"{-size}..{size - 1}" if size else "none, the axis is empty"
    return (
        f"index {value} at indices[{where}] is out of bounds for axis {axis} with size {size} "
        f"(allowed: {allowed})"
    )


def out_of_bounds_error(indices: np.ndarray, flat: int, axis: int, size: int) -> IndexError:
    """The error for the index at flat position `flat` (row-major) of `indices`."""
    position = np.unravel_index(flat, indices.shape)
    value = int(indices[position])
    return IndexError(out_of_bounds_message(value, tuple(int(p) for p in position), axis, size))


def raise_out_of_bounds(indices: np.ndarray, flat: int, axis: int, size: int):
    raise out_of_bounds_error(indices, flat, axis, size)


def as_updates(updates: object, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Updates as an array of data's dtype and indices' shape.

    Arrays must already have data's dtype (strings: the same kind, any width); lists and scalars
    are converted to it, and a scalar is broadcast to the shape of indices.
    """
    if isinstance(updates, np.ndarray):
        upd = updates
        same_kind_strings = data.dtype.kind in "US" and upd.dtype.kind == data.dtype.kind
        # StringDType has no byte order: only swapped dtypes need newbyteorder.
        upd_dtype = upd.dtype if upd.dtype.isnative else upd.dtype.newbyteorder("=")
        if not (same_kind_strings or upd_dtype == data.dtype):
            raise TypeError(
                f"data and updates must have the same dtype: data is {data.dtype}, updates is {upd.dtype}"
            )
        upd = native(upd)
    else:
        dtype = data.dtype if data.dtype.kind not in "US" else None
        try:
            upd = np.asarray(updates, dtype=dtype)
        except (OverflowError, ValueError, TypeError) as e:
            raise TypeError(f"updates cannot be converted to data's dtype {data.dtype}: {e}") from None
        if dtype is None and upd.dtype.kind != data.dtype.kind:
            raise TypeError(
                f"data and updates must have the same dtype: data is {data.dtype}, updates is {upd.dtype}"
            )
        if upd.ndim == 0:
            upd = np.broadcast_to(upd, indices.shape)
    if upd.shape != indices.shape:
        raise ValueError(
            f"updates must have the shape of indices: indices shape {indices.shape}, "
            f"updates shape {upd.shape}"
        )
    return upd


def check_out(out: object, shape: tuple, dtype: np.dtype) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {out.dtype}, the result has dtype {dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"out has shape {out.shape}, the result has shape {tuple(shape)}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    return out


@dataclass(frozen=True)
class ScatterCall:
    """A validated ScatterElements call: arrays ready for a kernel."""

    data: np.ndarray
    indices: np.ndarray
    updates: np.ndarray
    axis: int
    reduction: str


def _data_indices_axis(data, indices, axis, reduction=None):
    """The checks both operators share: data's dtype (and reduction), rank, axis, indices."""
    data = np.asarray(data)
    dtype_category(data.dtype)
    if reduction is not None:
        check_reduction_for_dtype(reduction, data.dtype)
    data = native(data)
    if data.ndim == 0:
        raise ValueError("data must have rank >= 1, got a rank-0 array")
    axis = normalize_axis(axis, data.ndim)
    idx = as_indices(indices, data.shape[axis], axis)
    check_ranks(data, idx)
    check_fits(data.shape, idx.shape, axis)
    return data, idx, axis


def scatter_call(data, indices, updates, axis, reduction) -> ScatterCall:
    reduction = check_reduction(reduction)
    data, idx, axis = _data_indices_axis(data, indices, axis, reduction)
    upd = as_updates(updates, data, idx)
    return ScatterCall(data, idx, upd, axis, reduction)


@dataclass(frozen=True)
class GatherCall:
    data: np.ndarray
    indices: np.ndarray
    axis: int


def gather_call(data, indices, axis) -> GatherCall:
    return GatherCall(*_data_indices_axis(data, indices, axis))
