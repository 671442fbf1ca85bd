"""The functions that run inside dask tasks: NumPy in, NumPy out, no dask import.

Every function here sees one block (or a short ordered list of blocks) and calls the NumPy path
of scatterx, so the rules of the operators hold per block. Blocks that come from an earlier task
of the same strategy are owned by that chain and may be updated in place; blocks of the user's
arrays never are.
"""

from __future__ import annotations

import numpy as np

from .. import _core
from .._ops import gather_elements, scatter_elements
from .._rules import as_indices, is_string_dtype, out_of_bounds_message

_INT64_MAX = np.iinfo(np.int64).max


def _raise_at(block: np.ndarray, flat: int, offset: tuple, axis: int, size: int):
    local = np.unravel_index(flat, block.shape)
    position = tuple(int(p) + int(o) for p, o in zip(local, offset))
    raise IndexError(out_of_bounds_message(int(block[local]), position, axis, size))


def prepare_indices(block: np.ndarray, axis: int, size: int, offset: tuple) -> np.ndarray:
    """An indices block as int32/int64 with every value checked against ``[-size, size)``.

    `offset` is the block's position in the whole indices array, so the IndexError names the
    global position, with the NumPy path's message.
    """
    if block.dtype == np.uint64 and block.size:
        big = np.flatnonzero(block.ravel() > _INT64_MAX)
        if big.size:
            _raise_at(block, int(big[0]), offset, axis, size)
    idx = as_indices(block, size, axis)
    bad = _core.first_bad_index(idx, size)
    if bad >= 0:
        _raise_at(idx, bad, offset, axis, size)
    return idx


def checked_indices(block, axis, size, block_info=None):
    """``map_blocks`` wrapper of `prepare_indices` (the offset comes from `block_info`)."""
    offset = tuple(start for start, _ in block_info[0]["array-location"])
    return prepare_indices(block, axis, size, offset)


def _fresh(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.array(block, dtype=dtype, order="C", copy=True)


def _writable(block: np.ndarray, owned: bool) -> bool:
    """Whether a fold may write into `block`: made by the chain, and not a read-only buffer
    (distributed may hand over a block received from another worker as one)."""
    return owned and block.flags.writeable and block.flags.c_contiguous and not is_string_dtype(block.dtype)


def _declared(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return block if block.dtype == dtype else block.astype(dtype)


def scatter_fold(out, indices_blocks, updates_blocks, *, axis, reduction, owned, result_dtype):
    """Applies (indices, updates) blocks to an output block one after the other.

    The blocks follow each other along `axis`, so folding them in list order is the row-major
    order of the whole indices array restricted to this block: the result is the NumPy path's,
    bit for bit. `owned` says that `out` was made by the previous fold and may be overwritten;
    `result_dtype` is the declared dtype of the result (wider than the values need for fixed-width
    strings with "add").
    """
    fresh = owned
    in_place = _writable(out, owned)
    for idx, upd in zip(indices_blocks, updates_blocks):
        if in_place:
            scatter_elements(out, idx, upd, axis, reduction, out=out)
        else:
            out = scatter_elements(out, idx, upd, axis, reduction)
            fresh = True
            in_place = not is_string_dtype(out.dtype)
    return _declared(out, result_dtype) if fresh else _fresh(out, result_dtype)


def route(indices, updates, *, axis, size, starts, data_chunks, block_info=None):
    """Splits one (indices, updates) block by destination chunk along `axis`.

    Returns an object array of shape ``(1, ..., 1, K)``: entry ``k`` is ``None`` or a pair
    (flat positions in output block ``k``, values), both in the row-major order of the block,
    so that applying the pieces in block order keeps the sequential order of the updates.
    """
    info = block_info[0]
    offset = tuple(start for start, _ in info["array-location"])
    where = info["chunk-location"]
    idx = prepare_indices(indices, axis, size, offset)
    starts = np.asarray(starts, np.int64)
    n_dest = len(starts)
    pieces = np.empty((1,) * indices.ndim + (n_dest,), object)
    slots = pieces.reshape(-1)  # a view: a scalar index stores a pair as one object
    if idx.size == 0:
        return pieces
    shape = [data_chunks[d][where[d]] if d != axis else 0 for d in range(indices.ndim)]
    lengths = np.diff(np.append(starts, size))
    block_size = int(np.prod([n for d, n in enumerate(shape) if d != axis], dtype=np.int64)) * int(lengths.max())
    # Positions are offsets inside one data block: int32 when every block and the axis fit in it
    # (a third less memory per routed update, and fewer bytes to move).
    work = np.dtype(np.int32) if max(block_size, size) < 2**31 else np.dtype(np.int64)
    dest, flat = _destinations(idx, size, starts, lengths, work)
    # flat = ((outer * L_k) + local) * inner + tail, with outer/tail the coordinates before/after
    # the axis ravelled in the data block's shape (indices share the block's origin).
    if any(indices.shape[d] > 1 for d in range(axis)):
        outer, stride = np.zeros((1,) * indices.ndim, work), 1
        for d in range(axis - 1, -1, -1):
            outer = outer + _coordinate(d, indices.shape, work) * stride
            stride *= shape[d]
        flat += outer * (lengths[0] if dest is None else lengths[dest].astype(work))
    if axis < indices.ndim - 1:
        tail, inner = np.zeros((1,) * indices.ndim, work), 1
        for d in range(indices.ndim - 1, axis, -1):
            tail = tail + _coordinate(d, indices.shape, work) * inner
            inner *= shape[d]
        flat *= inner
        flat += tail
    flat = flat.ravel()
    values = np.ascontiguousarray(updates).ravel()
    if dest is None:
        slots[0] = (flat, values)
        return pieces
    dest = dest.ravel()
    counts = np.bincount(dest, minlength=n_dest)
    hit = np.flatnonzero(counts)
    if len(hit) == 1:
        slots[int(hit[0])] = (flat, values)
    elif len(hit) <= 8:
        # A few destinations: one compress per destination beats a sort.
        mask = np.empty(dest.shape, bool)
        for k in hit:
            np.equal(dest, k, out=mask)
            slots[k] = (np.compress(mask, flat), np.compress(mask, values))
    else:
        order = np.argsort(dest.astype(np.uint8 if n_dest <= 256 else np.uint16 if n_dest <= 65536 else np.int64),
                           kind="stable")
        flat, values = flat[order], values[order]
        bounds = np.concatenate(([0], np.cumsum(counts)))
        for k in hit:
            slots[k] = (flat[bounds[k]:bounds[k + 1]], values[bounds[k]:bounds[k + 1]])
    return pieces


def _destinations(idx: np.ndarray, size: int, starts: np.ndarray, lengths: np.ndarray, work: np.dtype):
    """(destination chunk, or None when there is one chunk; axis coordinate in that chunk).

    The coordinates are a new array of dtype `work` (the caller writes into it).
    """
    v = idx
    negative = v < 0
    if negative.any():
        v = np.where(negative, v.astype(np.int64) + size, v)
    v = v.astype(work, copy=v is idx)
    if len(starts) == 1:
        return None, v
    chunk = int(lengths[0])
    if np.all(lengths[:-1] == chunk) and lengths[-1] <= chunk:
        return np.divmod(v, work.type(chunk))
    dest = np.searchsorted(starts, v, side="right") - 1
    return dest, v - starts[dest].astype(work)


def _coordinate(d: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    view = [1] * len(shape)
    view[d] = shape[d]
    return np.arange(shape[d], dtype=dtype).reshape(view)


def apply_pieces(out, piece_blocks, *, reduction, owned, result_dtype):
    """Applies routed pieces (in block order) to one output block; see `scatter_fold`."""
    shape = out.shape
    fresh = owned
    in_place = _writable(out, owned)
    for block in piece_blocks:
        piece = block.reshape(-1)[0]
        if piece is None:
            continue
        flat_pos, values = piece
        if in_place:
            flat = out.reshape(-1)
            scatter_elements(flat, flat_pos, values, 0, reduction, out=flat)
        else:
            out = scatter_elements(out.reshape(-1), flat_pos, values, 0, reduction).reshape(shape)
            fresh = True
            in_place = not is_string_dtype(out.dtype)
    return _declared(out, result_dtype) if fresh else _fresh(out, result_dtype)


def gather_whole(indices, data_blocks, *, axis):
    """GatherElements of one indices block from the data block holding its whole axis."""
    (data,) = data_blocks
    return gather_elements(data, indices, axis)


def route_positions(indices, *, axis, size, starts, data_chunks, block_info=None):
    """`route` for GatherElements: each piece pairs flat positions in data block ``k`` with the
    flat positions in this indices block that read them."""
    dtype = np.int32 if indices.size < 2**31 else np.int64
    positions = np.arange(indices.size, dtype=dtype).reshape(indices.shape)
    return route(indices, positions, axis=axis, size=size, starts=starts, data_chunks=data_chunks,
                 block_info=block_info)


def gather_pieces(out, piece_blocks, data_blocks, *, result_dtype, shape=None):
    """Fills the positions of an output block that read from `data_blocks` (one piece each).

    Every position is filled by exactly one data block over the chain. The first link gets
    ``out=None`` and the block's `shape`; later links own `out` (copied if read-only).
    """
    if out is None:
        out = np.empty(shape, result_dtype)
    elif not out.flags.writeable or not out.flags.c_contiguous:
        out = np.array(out, order="C")
    flat_out = out.reshape(-1)
    for block, data in zip(piece_blocks, data_blocks):
        piece = block.reshape(-1)[0]
        if piece is not None:
            data_pos, out_pos = piece
            flat_out[out_pos] = np.ravel(data)[data_pos]
    return out


def gather_pieces_first(indices, piece_blocks, data_blocks, *, result_dtype):
    """`gather_pieces` for the first link: the checked indices block gives the shape."""
    return gather_pieces(None, piece_blocks, data_blocks, result_dtype=result_dtype, shape=indices.shape)
