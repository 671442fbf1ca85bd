"""Kernel dispatch: the native core for numeric and bool dtypes, a Python path for strings.

Callers pass a validated call (see ``_rules``). Both paths check every index before anything is
written, so an error leaves ``out`` untouched.
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._rules import GatherCall, ScatterCall, is_short_float, is_string_dtype, raise_out_of_bounds, type_code

_REDUCTION_CODES = {name: i for i, name in enumerate(_core.reductions)}


def new_array(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array for a result; large ones come from the output cache."""
    return _core.empty(shape, dtype)


def copy(arr: np.ndarray) -> np.ndarray:
    """A new C-contiguous copy of `arr` (a native dtype), made on the kernels' threads."""
    result = new_array(arr.shape, arr.dtype)
    _core.copy(arr, result)
    return result


def _converted(arr: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """`arr` converted natively (float32 into float16 or bfloat16, or back; NumPy casts to and
    from float16 one element at a time, several times slower on one thread), or None."""
    pair = (arr.dtype, dtype)
    if (pair[0] == np.float32 and is_short_float(pair[1])) or (is_short_float(pair[0]) and pair[1] == np.float32):
        if arr.flags.c_contiguous and arr.dtype.isnative:
            result = new_array(arr.shape, dtype)
            _core.convert(arr, result)
            return result
    return None


def cast(arr: np.ndarray, dtype, copy: bool = True) -> np.ndarray:
    """``arr.astype(dtype, copy=copy)``, the same bits."""
    dtype = np.dtype(dtype)
    if not copy and arr.dtype == dtype:
        return arr
    result = _converted(arr, dtype)
    return arr.astype(dtype) if result is None else result


def contiguous(arr: np.ndarray, dtype) -> np.ndarray:
    """``np.ascontiguousarray(arr, dtype=dtype)``, the same bits."""
    dtype = np.dtype(dtype)
    result = _converted(arr, dtype)
    return np.ascontiguousarray(arr, dtype=dtype) if result is None else result


def _detach(arr: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A copy of `arr` if it shares memory with `out` (reading it while writing out is unsafe)."""
    return arr.copy() if np.may_share_memory(arr, out) else arr


def _is_same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a is b
        or (
            a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides
            and a.shape == b.shape
            and a.dtype == b.dtype
        )
    )


def _stored_bytes(arr: np.ndarray) -> int:
    """The bytes a pass over `arr` reads: a broadcast (stride-0) dimension counts once."""
    n = arr.itemsize
    for size, stride in zip(arr.shape, arr.strides):
        n *= size if stride or size == 0 else 1
    return n


def _through_fresh_output(call: ScatterCall, out: np.ndarray) -> bool:
    """Whether a call into `out` runs faster into a new array, copied into `out` after it.

    A call into a given `out` (``out=data`` included) checks every index before it writes
    anything; a call into a new array checks them as it goes (the array is dropped on error).
    When `out` is small beside the indices, the check's pass over them costs more than the copy
    (a 1-D histogram, 1e5 float64 bins from 1e7 int64 indices: the check reads 80 MB, the copy
    0.8 MB twice). Only when `out` is at most 5 % of the inputs: the new array is the call's
    extra memory (SPEC section 8).
    """
    index = _stored_bytes(call.indices)
    return 20 * out.nbytes <= call.data.nbytes + index + _stored_bytes(call.updates) and 4 * out.nbytes <= index


def scatter(call: ScatterCall, out: np.ndarray | None) -> np.ndarray:
    """Runs a validated scatter; returns `out` or a new C-contiguous array."""
    if is_string_dtype(call.data.dtype):
        from ._strings import scatter_strings

        return scatter_strings(call, out)
    if out is not None and (not out.flags.aligned or _through_fresh_output(call, out)):
        np.copyto(out, scatter(call, None))
        return out
    data, indices, updates = call.data, call.indices, call.updates
    fresh = out is None
    if fresh:
        out = new_array(data.shape, data.dtype)
        copy = True
    else:
        copy = not _is_same_view(out, data)
        if copy:
            data = _detach(data, out)
        indices = _detach(indices, out)
        updates = _detach(updates, out)
    bad = _core.scatter(
        data, indices, updates, out, call.axis, _REDUCTION_CODES[call.reduction],
        type_code(data.dtype), copy, not fresh,
    )
    if bad >= 0:
        raise_out_of_bounds(indices, bad, call.axis, data.shape[call.axis])
    return out


def take_last_writer(grad_output: np.ndarray, indices: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The backward of reduction "none" in one native pass over validated indices.

    Returns ``(grad_data, grad_updates)``: the output gradient with every written position set
    to zero, and for each update the gradient at its target if it is the last writer there
    (row-major order), else zero.
    """
    grad_data = new_array(grad_output.shape, grad_output.dtype)
    grad_updates = new_array(indices.shape, grad_data.dtype)
    bad = _core.take_last_writer(grad_output, indices, grad_data, grad_updates, axis)
    if bad >= 0:
        raise_out_of_bounds(indices, bad, axis, grad_data.shape[axis])
    return grad_data, grad_updates


def _unreached(index_shape: tuple, data_shape: tuple, axis: int):
    """Slices of data that cover the fibers no fiber of the indices reaches (they may overlap):
    along every non-axis dimension where the indices are shorter, the part beyond them."""
    for dim, n in enumerate(index_shape):
        if dim != axis and n < data_shape[dim]:
            yield (slice(None),) * dim + (slice(n, None),)


def extremum_backward(
    grad: np.ndarray, indices: np.ndarray, axis: int, *, ties: tuple | None = None, values: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The backward of reductions "max" and "min" for the output gradient `grad` (G, float32 or
    float64, C-contiguous), given what ties with the result: `ties`, the residuals' masks
    ``(data_ties, update_ties)`` (bool), or `values`, ``(data, updates, output)`` of data's
    dtype, compared in the kernel (NaN ties with NaN).

    Returns ``(grad_data, grad_updates)``: G divided evenly among data and the updates that tie
    at each target (+0 for those that do not), in one native pass per block of fibers; the
    fibers of data that no fiber of the indices reaches (G where data ties) are set here.
    """
    if ties is not None:
        a, b = (np.ascontiguousarray(m, dtype=np.bool_) for m in ties)
        c, code = None, 0
    else:
        a, b, c = (np.ascontiguousarray(v) for v in values)
        code = type_code(a.dtype)
    grad_data = new_array(grad.shape, grad.dtype)
    grad_updates = new_array(indices.shape, grad.dtype)
    bad = _core.extremum_backward(grad, a, indices, b, c, grad_data, grad_updates, axis, code)
    if bad >= 0:
        raise_out_of_bounds(indices, bad, axis, grad.shape[axis])
    for beyond in _unreached(indices.shape, grad.shape, axis):
        np.copyto(grad_data[beyond], grad[beyond])
        tie = a[beyond] if c is None else (a[beyond] == c[beyond]) | (np.isnan(a[beyond]) & np.isnan(c[beyond]))
        grad_data[beyond][~tie] = 0
    return grad_data, grad_updates


def mul_backward(
    grad: np.ndarray, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The backward of reduction "mul" for the output gradient `grad` (G) and `data` (D), both
    C-contiguous in one compute dtype; the gradients come back in that dtype.

    Returns ``(grad_data, grad_updates)``: ``G * conj(product of the updates of each target)``
    (G * conj(1) where none lands) and, for each update, ``G[t] * conj(D[t] * product of the
    other updates of its target)``, without division. One native pass per block of fibers sets
    the products, turns them into grad_data and walks the updates both ways; the fibers of
    data that no fiber of the indices reaches get G * conj(1) here.
    """
    dtype = grad.dtype
    grad_data = new_array(grad.shape, dtype)
    updates = np.ascontiguousarray(updates, dtype=dtype)
    grad_updates = new_array(updates.shape, dtype)
    bad = _core.mul_backward(grad, data, indices, updates, grad_data, grad_updates, axis, type_code(dtype))
    if bad >= 0:
        raise_out_of_bounds(indices, bad, axis, grad.shape[axis])
    one = np.conj(dtype.type(1))
    for beyond in _unreached(indices.shape, grad.shape, axis):
        np.multiply(grad[beyond], one, out=grad_data[beyond])
    return grad_data, grad_updates


def gather(call: GatherCall, out: np.ndarray | None) -> np.ndarray:
    data, indices = call.data, call.indices
    if is_string_dtype(data.dtype):
        from ._strings import gather_strings

        return gather_strings(call, out)
    fresh = out is None
    if fresh:
        out = new_array(indices.shape, data.dtype)
    elif not out.flags.aligned:
        np.copyto(out, gather(call, None))
        return out
    else:
        data = _detach(data, out)
        indices = _detach(indices, out)
    bad = _core.gather(data, indices, out, call.axis, not fresh)
    if bad >= 0:
        raise_out_of_bounds(indices, bad, call.axis, data.shape[call.axis])
    return out
