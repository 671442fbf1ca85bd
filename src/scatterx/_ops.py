"""The public forward operators: ScatterElements and GatherElements."""

from __future__ import annotations

import numpy as np

from . import _core, _kernels
from ._rules import check_out, gather_call, is_string_dtype, out_of_bounds_error, scatter_call


def scatter_elements(data, indices, updates, axis=0, reduction="none", *, out=None) -> np.ndarray:
    """ONNX ScatterElements (opset 18): write or reduce `updates` into a copy of `data`.

    The update at position ``k`` of `updates` targets the position of `data` equal to ``k`` with
    its `axis` coordinate replaced by ``indices[k]`` (negative values count from the back).

    Parameters
    ----------
    data : array_like, rank r >= 1
        bool, integer, float16, bfloat16 (ml_dtypes), float32, float64, complex, or strings
        (object arrays of str or bytes, ``U``, ``S``, StringDType).
    indices : array_like of integers, rank r
        ``indices.shape[d] <= data.shape[d]`` for every ``d != axis``; any length along `axis`.
        int32 and int64 are used as they are, other integer dtypes are converted losslessly.
    updates : array_like, shape of `indices`
        An array must have data's dtype; lists and scalars are converted to it (a scalar is
        broadcast).
    axis : int, default 0
        In ``[-r, r-1]``.
    reduction : {"none", "add", "mul", "max", "min"}
        How an update combines with the value it targets.
    out : ndarray, optional
        Receives the result (data's dtype and shape). ``out=data`` works in place and skips the
        copy of `data` -- except where `out` is small beside `indices` (at most 5 % of the
        inputs, a quarter of the index): such a call scatters into a new array, checking the
        indices as it goes, and copies that into `out`, which is faster than checking every
        index before writing.

    Returns
    -------
    ndarray
        A new C-contiguous array of data's dtype and shape, or `out`.

    Notes
    -----
    Updates are applied one by one in row-major order of `indices`: with "none" the last of
    several updates to one position wins, and float "add"/"mul" are bitwise identical to that
    sequential order for any number of threads. Integers wrap modulo 2**n. float16 and bfloat16
    round to their type after every step. "max"/"min" propagate NaN (like ``np.maximum``), so the
    result does not depend on the order. bool: add = or, mul = and, max = or, min = and.
    Strings: add concatenates in update order (fixed-width results widen as needed), max/min
    compare lexicographically, mul is a TypeError. Complex max/min is a TypeError.

    Raises
    ------
    IndexError
        An index outside ``[-s, s-1]`` with ``s = data.shape[axis]``; the message names the value,
        its position in `indices`, the axis and the allowed range.
    ValueError
        Rank or shape mismatch, axis out of range, rank-0 input, unknown reduction, bad `out`.
    TypeError
        Non-integer indices, data and updates of different dtypes, unsupported dtype, or a
        reduction that the dtype does not define.

    Nothing is written when an error is raised, also when ``out`` is `data`.
    """
    if out is None:
        # The short path validates the common case natively; None means "not that case".
        try:
            result = _core.scatter_fast(data, indices, updates, axis, reduction)
        except _core.OutOfBounds as error:  # the flat position of the first bad index, the axis
            flat, at = error.args
            raise out_of_bounds_error(indices, flat, at, data.shape[at]) from None
        if result is not None:
            return result
    call = scatter_call(data, indices, updates, axis, reduction)
    if out is not None and not is_string_dtype(call.data.dtype):
        check_out(out, call.data.shape, call.data.dtype)
    elif out is not None:
        if not isinstance(out, np.ndarray) or out.dtype.kind != call.data.dtype.kind:
            check_out(out, call.data.shape, call.data.dtype)
    return _kernels.scatter(call, out)


def gather_elements(data, indices, axis=0, *, out=None) -> np.ndarray:
    """ONNX GatherElements (opset 13): ``out[k] = data[k with its axis coordinate = indices[k]]``.

    Parameters
    ----------
    data : array_like, rank r >= 1
        Any dtype that `scatter_elements` accepts.
    indices : array_like of integers, rank r
        ``indices.shape[d] <= data.shape[d]`` for ``d != axis``; negative values count from the back.
    axis : int, default 0
    out : ndarray, optional
        Receives the result (data's dtype, the shape of `indices`).

    Returns
    -------
    ndarray
        A new C-contiguous array of data's dtype and the shape of `indices`, or `out`.

    Raises
    ------
    IndexError, ValueError, TypeError
        As for `scatter_elements`; nothing is written to `out` on error.
    """
    if out is None:
        try:
            result = _core.gather_fast(data, indices, axis)
        except _core.OutOfBounds as error:  # as in scatter_elements
            flat, at = error.args
            raise out_of_bounds_error(indices, flat, at, data.shape[at]) from None
        if result is not None:
            return result
    call = gather_call(data, indices, axis)
    if out is not None:
        check_out(out, call.indices.shape, call.data.dtype)
    return _kernels.gather(call, out)
