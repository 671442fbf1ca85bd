"""The Python-level path for strings: object arrays of str or bytes, ``U``, ``S``, StringDType.

Updates are applied one by one in row-major order of indices; "add" concatenates, "max"/"min"
compare lexicographically (code points for str, bytes for bytes). Fixed-width results get the
width they need: the larger of data's and updates' widths, widened further when a concatenation
is longer.
"""

from __future__ import annotations

import math

import numpy as np

from ._rules import GatherCall, ScatterCall, check_out, raise_out_of_bounds


def _targets(indices: np.ndarray, data_shape: tuple, axis: int) -> np.ndarray:
    """Flat C-order positions in data targeted by each index, in row-major order of indices."""
    from . import _core

    size = data_shape[axis]
    bad = _core.first_bad_index(indices, size)
    if bad >= 0:
        raise_out_of_bounds(indices, bad, axis, size)
    idx = indices.astype(np.int64)
    # Summed by broadcasting ufuncs, not np.broadcast_arrays / np.ravel_multi_index: those stop
    # at 32 dimensions, NumPy arrays go to 64.
    flat = np.where(idx < 0, idx + size, idx) * math.prod(data_shape[axis + 1 :])
    for d, coord in enumerate(np.indices(indices.shape, sparse=True)):
        if d != axis:
            flat = flat + coord * math.prod(data_shape[d + 1 :])
    return flat.ravel()


def _check_elements(values, reduction: str) -> None:
    kinds = {type(v) for v in values}
    if not kinds <= {str} and not kinds <= {bytes}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise TypeError(f"reduction {reduction!r} on an object array needs all str or all bytes, found {names}")


def _result_dtype(data: np.ndarray, updates: np.ndarray, values: np.ndarray) -> np.dtype:
    if data.dtype.kind not in "US":
        return data.dtype
    width = max(data.dtype.itemsize, updates.dtype.itemsize)
    if data.dtype.kind == "U":
        width //= 4
    longest = max((len(v) for v in values), default=0)
    return np.dtype(f"{data.dtype.kind}{max(width, longest, 1)}")


def scatter_strings(call: ScatterCall, out: np.ndarray | None) -> np.ndarray:
    data, updates, reduction = call.data, call.updates, call.reduction
    targets = _targets(call.indices, data.shape, call.axis)
    values = data.astype(object).ravel()
    news = updates.astype(object).ravel()
    if reduction != "none":
        _check_elements(values[targets], reduction)
        _check_elements(news, reduction)
        if len(targets) and type(values[targets[0]]) is not type(news[0]):
            raise TypeError(f"reduction {reduction!r} cannot combine str and bytes")
    try:
        for t, v in zip(targets.tolist(), news):
            if reduction == "none":
                values[t] = v
            elif reduction == "add":
                values[t] = values[t] + v
            elif reduction == "max":
                values[t] = v if v > values[t] else values[t]
            else:
                values[t] = v if v < values[t] else values[t]
    except TypeError as e:
        raise TypeError(f"reduction {reduction!r} failed on object elements: {e}") from None
    dtype = _result_dtype(data, updates, values)
    result = values.reshape(data.shape)
    if out is None:
        return np.array(result, dtype=dtype) if dtype != object else result
    check_out(out, data.shape, dtype)
    out[...] = result
    return out


def gather_strings(call: GatherCall, out: np.ndarray | None) -> np.ndarray:
    data, axis = call.data, call.axis
    targets = _targets(call.indices, data.shape, axis)
    result = data.ravel()[targets].reshape(call.indices.shape)
    if out is None:
        return np.ascontiguousarray(result)
    out[...] = result
    return out
