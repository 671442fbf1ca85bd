"""ScatterElements and GatherElements on dask arrays (optional dependency: ``dask[array]``).

``import scatterx`` does not import dask; ``import scatterx.dask`` does. Both functions build a
lazy graph from public dask.array calls and compute nothing. Strategies (`method`):

``"blockwise"``
    data is one chunk along `axis` (rechunked to that if needed); every output block folds the
    indices/updates blocks of its fibers one after the other.
``"routed"``
    data stays chunked along `axis`; every indices/updates block is split by destination chunk
    (a stable partition, so each piece keeps row-major order) and every output block folds its
    pieces in block order.
``"auto"``
    ``"blockwise"`` when data is one chunk along `axis`, or when a whole-axis block stays within
    dask's ``array.chunk-size``; ``"routed"`` otherwise.

Both fold in the order of the NumPy path, so every reduction, including float "add" and "mul",
gives the NumPy path's result bit for bit. docs/dask.md states the memory bound per task.
"""

from __future__ import annotations

import dask.array as da

from . import _graph
from ._inputs import (
    METHODS,
    Method,
    check_method,
    check_split_every,
    choose,
    gather_plan,
    scatter_plan,
)

__all__ = ["METHODS", "Method", "gather_elements", "scatter_elements"]


def scatter_elements(
    data, indices, updates, axis=0, reduction="none", *, method: Method = "auto", split_every=None
) -> da.Array:
    """ONNX ScatterElements on dask (or NumPy) arrays, lazily.

    Same semantics as `scatterx.scatter_elements`: updates apply in row-major order of
    `indices`, "none" keeps the last writer, float "add"/"mul" are bitwise equal to the sequential
    order, "max"/"min" propagate NaN.

    Parameters
    ----------
    data : dask.array.Array or array_like, rank r >= 1
    indices : dask.array.Array or array_like of integers, rank r
        ``indices.shape[d] <= data.shape[d]`` for ``d != axis``; any length along `axis`.
        Rechunked off the axis to data's chunks; its chunks along the axis are kept.
    updates : dask.array.Array or array_like, shape of `indices`
        Must have data's dtype (lists and scalars are converted, a scalar is broadcast).
    axis : int, default 0
    reduction : {"none", "add", "mul", "max", "min"}
    method : {"auto", "blockwise", "routed"}
        The strategy (see the module docstring). "blockwise" rechunks data to one chunk along
        `axis` when it is not already.
    split_every : int, optional
        How many indices blocks (blockwise) or routed pieces (routed) one task folds into an
        output block; default 4. Larger means fewer tasks and more memory per task.

    Returns
    -------
    dask.array.Array
        data's shape, native-byte-order dtype and chunks. Fixed-width strings (``U``, ``S``)
        widen as the NumPy path does, except that with "add" the width the values need is not
        known before computing: the result is declared as wide as they can need, data's width
        plus ``indices.shape[axis]`` times updates' width (the values equal the NumPy path's).

    Raises
    ------
    ValueError, TypeError
        At graph-build time, with the messages of the NumPy path: shapes, ranks, axis,
        dtypes, reduction; also an unknown `method` or a bad `split_every`.
    IndexError
        At compute time, for an index outside ``[-s, s-1]``; the message names the value and its
        position in the whole `indices` array. When several are out of bounds, the one reported
        may differ from the NumPy path's (blocks run in any order).
    """
    method = check_method(method)
    split_every = check_split_every(split_every)
    plan, reduction = scatter_plan(data, indices, updates, axis, reduction)
    out = _graph.SCATTER[choose(method, plan.data, plan.axis)](plan, reduction, split_every)
    return out.rechunk(plan.data.chunks) if out.chunks != plan.data.chunks else out


def gather_elements(data, indices, axis=0, *, method: Method = "auto", split_every=None) -> da.Array:
    """ONNX GatherElements on dask (or NumPy) arrays, lazily.

    ``out[k] = data[k with its axis coordinate replaced by indices[k]]``, as
    `scatterx.gather_elements`.

    Parameters
    ----------
    data : dask.array.Array or array_like, rank r >= 1
    indices : dask.array.Array or array_like of integers, rank r
    axis : int, default 0
    method : {"auto", "blockwise", "routed"}
        "routed" reads data chunked along `axis` without rechunking it: every output block
        fills itself from the data blocks along the axis, `split_every` of them per task.
    split_every : int, optional
        Data blocks per task for "routed" (default 4); unused by "blockwise".

    Returns
    -------
    dask.array.Array
        The shape and chunks of `indices` (NumPy indices: data's chunks off the axis), data's
        native-byte-order dtype.

    Raises
    ------
    ValueError, TypeError
        At graph-build time, as for `scatter_elements`.
    IndexError
        At compute time, as for `scatter_elements`.
    """
    method = check_method(method)
    split_every = check_split_every(split_every)
    plan = gather_plan(data, indices, axis)
    out = _graph.GATHER[choose(method, plan.data, plan.axis)](plan, split_every)
    if isinstance(indices, da.Array) and out.chunks != indices.chunks:
        out = out.rechunk(indices.chunks)
    return out
