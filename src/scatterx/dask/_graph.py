"""The task graphs of the two strategies, built from public dask.array calls only.

Both strategies are a short chain of ``blockwise`` layers over the output blocks. Each layer folds
the next `split_every` indices blocks along the axis (blockwise) or the next `split_every` routed
pieces (routed) into every output block, in block order, so the row-major order of the updates
is kept exactly. See docs/dask.md for the memory bound of each.
"""

from __future__ import annotations

import string

import dask.array as da
import numpy as np

from . import _tasks
from ._inputs import Plan, kernel_index_dtype

_LETTERS = string.ascii_letters


def _indices(plan: Plan) -> tuple[str, str, str]:
    """Index strings for blockwise: the output's, and the one with the axis contracted."""
    ind = _LETTERS[: plan.data.ndim]
    contracted = ind[: plan.axis] + _LETTERS[plan.data.ndim] + ind[plan.axis + 1 :]
    return ind, contracted, ind[plan.axis]


def _meta(ndim: int, dtype: np.dtype) -> np.ndarray:
    return np.empty((0,) * ndim, dtype)


def _groups(n: int, split_every: int):
    return [(layer, slice(g0, g0 + split_every)) for layer, g0 in enumerate(range(0, n, split_every))]


def _along(axis: int, ndim: int, sel: slice) -> tuple:
    return tuple(sel if d == axis else slice(None) for d in range(ndim))


def _checked(plan: Plan) -> da.Array:
    dtype = kernel_index_dtype(plan.indices.dtype)
    return plan.indices.map_blocks(
        _tasks.checked_indices,
        axis=plan.axis,
        size=plan.data.shape[plan.axis],
        dtype=dtype,
        meta=_meta(plan.indices.ndim, dtype),
        token="scatterx-check-indices",
    )


def _starts(data: da.Array, axis: int) -> tuple[int, ...]:
    return tuple(int(s) for s in np.cumsum((0,) + data.chunks[axis][:-1]))


def _whole_axis(data: da.Array, axis: int) -> da.Array:
    return data if data.numblocks[axis] == 1 else data.rechunk({axis: -1})


def scatter_blockwise(plan: Plan, reduction: str, split_every: int) -> da.Array:
    ndim, axis = plan.data.ndim, plan.axis
    ind, contracted, _ = _indices(plan)
    indices = _checked(plan)
    out = _whole_axis(plan.data, axis)
    for layer, sel in _groups(indices.numblocks[axis], split_every):
        where = _along(axis, ndim, sel)
        out = da.blockwise(
            _tasks.scatter_fold, ind,
            out, ind,
            indices.blocks[where], contracted,
            plan.updates.blocks[where], contracted,
            concatenate=False, align_arrays=False,
            dtype=plan.dtype, meta=_meta(ndim, plan.dtype),
            axis=axis, reduction=reduction, owned=layer > 0, result_dtype=plan.dtype,
            token="scatterx-scatter-blockwise",
        )
    return out


def scatter_routed(plan: Plan, reduction: str, split_every: int) -> da.Array:
    data, ndim, axis = plan.data, plan.data.ndim, plan.axis
    ind, contracted, axis_letter = _indices(plan)
    pieces = _routed_pieces(plan, _tasks.route, plan.indices, plan.updates)
    out = data
    for layer, sel in _groups(pieces.numblocks[axis], split_every):
        out = da.blockwise(
            _tasks.apply_pieces, ind,
            out, ind,
            pieces.blocks[_along(axis, ndim + 1, sel)], contracted + axis_letter,
            concatenate=False, align_arrays=False,
            dtype=plan.dtype, meta=_meta(ndim, plan.dtype),
            reduction=reduction, owned=layer > 0, result_dtype=plan.dtype,
            token="scatterx-scatter-routed",
        )
    return out


def gather_blockwise(plan: Plan, split_every: int) -> da.Array:
    """One task per indices block; `split_every` does not apply (one data block per task)."""
    ind, contracted, _ = _indices(plan)
    return da.blockwise(
        _tasks.gather_whole, ind,
        _checked(plan), ind,
        _whole_axis(plan.data, plan.axis), contracted,
        concatenate=False, align_arrays=False,
        dtype=plan.dtype, meta=_meta(plan.data.ndim, plan.dtype),
        axis=plan.axis,
        token="scatterx-gather-blockwise",
    )


def _routed_pieces(plan: Plan, func, *arrays) -> da.Array:
    """Per indices block, its pieces by destination data chunk: one object per (block, chunk)."""
    data, ndim, axis = plan.data, plan.data.ndim, plan.axis
    n_dest = data.numblocks[axis]
    return da.map_blocks(
        func, *arrays,
        axis=axis, size=data.shape[axis], starts=_starts(data, axis), data_chunks=data.chunks,
        dtype=object, meta=_meta(ndim + 1, np.dtype(object)),
        chunks=tuple((1,) * n for n in plan.indices.numblocks) + ((n_dest,),),
        new_axis=ndim,
        token="scatterx-route",
    ).rechunk({ndim: 1})


def gather_routed(plan: Plan, split_every: int) -> da.Array:
    data, ndim, axis = plan.data, plan.data.ndim, plan.axis
    ind, contracted, _ = _indices(plan)
    dest = _LETTERS[ndim]
    pieces = _routed_pieces(plan, _tasks.route_positions, plan.indices)
    out = None
    for _, sel in _groups(data.numblocks[axis], split_every):
        group = pieces.blocks[(slice(None),) * ndim + (sel,)], ind + dest
        blocks = data.blocks[_along(axis, ndim, sel)], contracted
        common = {
            "concatenate": False, "align_arrays": False, "dtype": plan.dtype, "meta": _meta(ndim, plan.dtype),
            "result_dtype": plan.dtype, "token": "scatterx-gather-routed",
        }
        if out is None:
            out = da.blockwise(_tasks.gather_pieces_first, ind, plan.indices, ind, *group, *blocks, **common)
        else:
            out = da.blockwise(_tasks.gather_pieces, ind, out, ind, *group, *blocks, **common)
    return out


SCATTER = {"blockwise": scatter_blockwise, "routed": scatter_routed}
GATHER = {"blockwise": gather_blockwise, "routed": gather_routed}
