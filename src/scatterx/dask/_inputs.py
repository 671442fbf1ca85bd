"""Build-time validation and chunk alignment of the dask wrappers.

Everything here reads shapes, dtypes and chunks only; no index value is looked at and nothing is
computed. The rules and messages are those of ``scatterx._rules``, checked on zero-stride
stand-ins of the right shape and dtype (they take no memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import dask
import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from .. import _rules

Method = Literal["auto", "blockwise", "routed"]
METHODS: tuple[str, ...] = ("auto", "blockwise", "routed")


def _stand_in(shape: tuple, dtype: np.dtype) -> np.ndarray:
    return np.broadcast_to(np.empty((), dtype), shape)


def _check_known(arr: da.Array, name: str) -> None:
    if any(math.isnan(s) for s in arr.shape):
        raise ValueError(
            f"{name} has unknown chunk sizes (shape {arr.shape}); call {name}.compute_chunk_sizes() first"
        )


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype


def check_method(method: object) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return method


def check_split_every(split_every: object) -> int:
    """The number of indices blocks (or routed pieces) folded into an output block per task."""
    if split_every is None:
        return 4
    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 1:
        raise ValueError(f"split_every must be a positive integer or None, got {split_every!r}")
    return split_every


def as_data(data: object) -> da.Array:
    if isinstance(data, da.Array):
        _check_known(data, "data")
        return data
    arr = _rules.native(np.asarray(data))
    # dask cannot size "auto" chunks of object arrays: they stay one block.
    return da.from_array(arr, chunks=-1 if arr.dtype.hasobject else "auto")


def _indices_dtype(indices: object) -> tuple[object, np.dtype]:
    """Indices as a dask or NumPy array, and the dtype the kernels will see (int32/int64)."""
    if isinstance(indices, da.Array):
        _check_known(indices, "indices")
        if indices.dtype.kind not in "iu":
            raise TypeError(f"indices must have an integer dtype, got {indices.dtype}")
        return indices, indices.dtype
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        arr = _rules.as_indices(indices, 0, 0)
    return arr, arr.dtype


@dataclass(frozen=True)
class Plan:
    """Validated inputs: dask arrays, indices and updates aligned to data's chunks off the axis."""

    data: da.Array
    indices: da.Array
    updates: da.Array | None
    axis: int
    dtype: np.dtype


def kernel_index_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "i" and dtype.itemsize in (4, 8):
        return _native(dtype)
    return np.dtype(np.int32) if dtype.itemsize <= 2 else np.dtype(np.int64)


def _check_common(data: da.Array, indices, axis) -> tuple[int, object, np.dtype]:
    _rules.dtype_category(data.dtype)
    if data.ndim == 0:
        raise ValueError("data must have rank >= 1, got a rank-0 array")
    axis = _rules.normalize_axis(axis, data.ndim)
    indices, idx_dtype = _indices_dtype(indices)
    _rules.check_ranks(data, indices)
    _rules.check_fits(data.shape, indices.shape, axis)
    return axis, indices, idx_dtype


def aligned_chunks(data_chunks: tuple, length: int) -> tuple:
    """Data's chunks along one dimension, cut at `length` (trailing blocks become empty)."""
    out, start = [], 0
    for c in data_chunks:
        out.append(max(0, min(c, length - start)))
        start += c
    return tuple(out)


def _align(arr, data: da.Array, axis: int, axis_chunks) -> da.Array:
    chunks = tuple(
        axis_chunks if d == axis else aligned_chunks(data.chunks[d], arr.shape[d])
        for d in range(data.ndim)
    )
    if isinstance(arr, da.Array):
        return arr.rechunk(chunks) if arr.chunks != chunks else arr
    return da.from_array(arr, chunks=chunks)


def _axis_chunks(indices, data: da.Array, axis: int):
    if isinstance(indices, da.Array):
        return indices.chunks[axis]
    return data.chunks[axis] if indices.shape[axis] == data.shape[axis] else "auto"


def scatter_plan(data, indices, updates, axis, reduction) -> tuple[Plan, str]:
    reduction = _rules.check_reduction(reduction)
    data = as_data(data)
    _rules.check_reduction_for_dtype(reduction, data.dtype)
    axis, indices, idx_dtype = _check_common(data, indices, axis)
    dtype = _native(data.dtype)
    data_in = _stand_in(data.shape, dtype)
    idx_in = _stand_in(indices.shape, kernel_index_dtype(idx_dtype))
    if isinstance(updates, da.Array):
        _check_known(updates, "updates")
        _rules.as_updates(_stand_in(updates.shape, _native(updates.dtype)), data_in, idx_in)
    else:
        updates = _rules.as_updates(updates, data_in, idx_in)
    axis_chunks = _axis_chunks(indices, data, axis)
    indices = _align(indices, data, axis, axis_chunks)
    updates = _align(updates, data, axis, indices.chunks[axis])
    dtype = result_dtype(dtype, updates.dtype, indices.shape[axis], reduction)
    return Plan(data, indices, updates, axis, dtype), reduction


def result_dtype(data: np.dtype, updates: np.dtype, n_axis: int, reduction: str) -> np.dtype:
    """The declared dtype of the result.

    Fixed-width strings are the one case where it is not data's: the NumPy path widens to the
    width the values need, which a lazy array cannot know, so the dask result takes the widest
    the values can need: updates' width, or for "add" data's width plus `n_axis` (the most
    updates one element can receive) times updates' width.
    """
    if data.kind not in "US":
        return data
    per_char = 4 if data.kind == "U" else 1
    width, extra = data.itemsize // per_char, updates.itemsize // per_char
    width = width + n_axis * extra if reduction == "add" else max(width, extra)
    return np.dtype(f"{data.kind}{max(width, 1)}")


def gather_plan(data, indices, axis) -> Plan:
    data = as_data(data)
    axis, indices, _ = _check_common(data, indices, axis)
    indices = _align(indices, data, axis, _axis_chunks(indices, data, axis))
    return Plan(data, indices, None, axis, _native(data.dtype))


def whole_axis_nbytes(data: da.Array, axis: int) -> int:
    """Bytes of the largest block of `data` once rechunked to a single chunk along `axis`."""
    largest = 1
    for d, chunks in enumerate(data.chunks):
        largest *= data.shape[d] if d == axis else max(chunks, default=0)
    return largest * data.dtype.itemsize


def choose(method: str, data: da.Array, axis: int) -> str:
    """The strategy that `method` resolves to for this data (see the module docs)."""
    if method != "auto":
        return method
    if data.numblocks[axis] == 1:
        return "blockwise"
    limit = parse_bytes(dask.config.get("array.chunk-size"))
    return "blockwise" if whole_axis_nbytes(data, axis) <= limit else "routed"
