"""The cases of ``scatterx bench``: the SPEC section 8 matrix, as data.

A case names an operation (forward scatter or gather, or the backward of either), a family of
input shapes, a dtype, an index dtype, and how strictly peers must agree with scatterx. Every
implementation in ``_bench_peers`` runs every case it defines; the engine in ``_bench`` times
them. Inputs are generated from a fixed seed, so every run measures the same arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._rules import bfloat16


@dataclass(frozen=True)
class Family:
    """A shape of the benchmark matrix and how its indices and values are drawn.

    `index_kind` is one of "expanded" (one random target per leading row, repeated along the
    inner dimension: the index of message passing, handed to the implementations that can take
    it as a stride-0 view of its first column, as PyTorch Geometric passes it), "materialised"
    (the same index, every implementation reading all of it, as an ONNX Expand produces it),
    "unique" (distinct targets within each fiber), "random" (uniform, duplicates allowed) or
    "literal" (the 3x3 call). `values` is "normal" or "near_one" (updates close to 1, so that
    products stay finite).
    """

    key: str
    data_shape: tuple[int, ...]
    index_shape: tuple[int, ...]
    quick_data_shape: tuple[int, ...]
    quick_index_shape: tuple[int, ...]
    axis: int
    index_kind: str
    values: str = "normal"


FAMILIES = {
    f.key: f
    for f in (
        Family("mp", (50_000, 64), (400_000, 64), (1_563, 64), (12_500, 64), 0, "expanded"),
        Family("mp_dense", (50_000, 64), (400_000, 64), (1_563, 64), (12_500, 64), 0, "materialised"),
        Family("rows", (4096, 1024), (4096, 256), (128, 1024), (128, 256), 1, "unique"),
        Family("max0", (100_000, 32), (200_000, 32), (3_125, 32), (6_250, 32), 0, "random"),
        Family("hist", (100_000,), (10_000_000,), (100_000,), (312_500,), 0, "random"),
        Family("mid", (64, 512, 128), (64, 256, 128), (2, 512, 128), (2, 256, 128), 1, "random", "near_one"),
        Family("tiny", (3, 3), (2, 3), (3, 3), (2, 3), 0, "literal"),
    )
}


@dataclass(frozen=True)
class Case:
    """One row of the benchmark table.

    `check` is "exact" (peers must agree bit for bit) or "close" (peers may add or multiply in
    another order than the sequential one that scatterx follows); an implementation that
    applies updates sequentially (NumPy's ``ufunc.at``) is always held to "exact".
    """

    name: str
    op: str  # "scatter", "gather", "scatter_vjp" or "gather_vjp"
    family: str
    reduction: str = "none"
    dtype: str = "float32"
    index_dtype: str = "int64"
    check: str = "exact"

    @property
    def axis(self) -> int:
        return FAMILIES[self.family].axis

    @property
    def np_dtype(self) -> np.dtype:
        return bfloat16() if self.dtype == "bfloat16" else np.dtype(self.dtype)

    @property
    def has_bound(self) -> bool:
        """Whether the streaming bound means something (not for a latency case)."""
        return self.family != "tiny"

    def shapes(self, quick: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(data shape, indices shape)."""
        fam = FAMILIES[self.family]
        if quick:
            return fam.quick_data_shape, fam.quick_index_shape
        return fam.data_shape, fam.index_shape

    def describe(self, quick: bool = False) -> str:
        """A short human description, e.g. ``add 50000x64 <- 400000x64 float32 int64 axis 0``."""
        dshape, ishape = self.shapes(quick)
        what = {
            "scatter": self.reduction,
            "gather": "gather",
            "scatter_vjp": f"d/{self.reduction}",
            "gather_vjp": "d/gather",
        }[self.op]
        dims = "x".join(map(str, dshape)), "x".join(map(str, ishape))
        dense = " (index materialised)" if FAMILIES[self.family].index_kind == "materialised" else ""
        return f"{what} {dims[0]} <- {dims[1]} {self.dtype} {self.index_dtype} axis {self.axis}{dense}"


def _case_list() -> tuple[Case, ...]:
    scatter = [
        Case("mp_add", "scatter", "mp", "add", check="close"),
        Case("rows_none", "scatter", "rows"),
        Case("max0", "scatter", "max0", "max"),
        Case("hist_add", "scatter", "hist", "add", "float64", check="close"),
        Case("mid_mul", "scatter", "mid", "mul", check="close"),
        Case("tiny_3x3", "scatter", "tiny"),
        Case("mp_add_f16", "scatter", "mp", "add", "float16", check="close"),
        Case("mp_add_bf16", "scatter", "mp", "add", "bfloat16", check="close"),
        Case("rows_none_f16", "scatter", "rows", dtype="float16"),
        Case("rows_none_bf16", "scatter", "rows", dtype="bfloat16"),
        Case("max0_f16", "scatter", "max0", "max", "float16"),
        Case("max0_bf16", "scatter", "max0", "max", "bfloat16"),
        Case("mp_add_i32", "scatter", "mp", "add", index_dtype="int32", check="close"),
        Case("rows_none_i32", "scatter", "rows", index_dtype="int32"),
        Case("max0_i32", "scatter", "max0", "max", index_dtype="int32"),
        Case("hist_add_i32", "scatter", "hist", "add", "float64", "int32", check="close"),
        Case("mp_add_dense", "scatter", "mp_dense", "add", check="close"),
    ]
    gather = [
        Case("gather_mp", "gather", "mp"),
        Case("gather_rows", "gather", "rows"),
        Case("gather_max0", "gather", "max0"),
        Case("gather_hist", "gather", "hist", dtype="float64"),
        Case("gather_mid", "gather", "mid"),
        Case("gather_3x3", "gather", "tiny"),
        Case("gather_rows_f16", "gather", "rows", dtype="float16"),
        Case("gather_rows_bf16", "gather", "rows", dtype="bfloat16"),
        Case("gather_mp_i32", "gather", "mp", index_dtype="int32"),
        Case("gather_mp_dense", "gather", "mp_dense"),
    ]
    backward = [
        Case("vjp_none", "scatter_vjp", "rows", "none"),
        Case("vjp_add", "scatter_vjp", "mp", "add"),
        Case("vjp_mul", "scatter_vjp", "mid", "mul", check="close"),
        # Fibers of 400 KB along axis 0, longer than the backward's per-thread scratch.
        Case("vjp_mul_long", "scatter_vjp", "max0", "mul", check="close"),
        Case("vjp_max", "scatter_vjp", "max0", "max", check="close"),
        Case("vjp_min", "scatter_vjp", "max0", "min", check="close"),
        Case("vjp_gather", "gather_vjp", "mp", check="close"),
    ]
    return tuple(scatter + gather + backward)


CASES: tuple[Case, ...] = _case_list()


@dataclass
class Inputs:
    """The arrays of one case; `grad` is the incoming gradient of a backward case.

    For an expanded index, `index_rows` holds its first column (shape ``(n, 1, ...)``): a peer
    that can take a stride-0 view, as PyTorch Geometric passes it, expands that instead of
    reading the materialised `indices`.
    """

    data: np.ndarray
    indices: np.ndarray
    updates: np.ndarray | None = None
    grad: np.ndarray | None = None
    index_rows: np.ndarray | None = None

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.indices.shape if self.updates is None else self.data.shape

    def expanded_indices(self) -> np.ndarray:
        """`indices`, as a stride-0 view of `index_rows` when there is one (read-only)."""
        if self.index_rows is None:
            return self.indices
        return np.broadcast_to(self.index_rows, self.indices.shape)


def _indices(fam: Family, dshape, ishape, rng: np.random.Generator) -> np.ndarray:
    size = dshape[fam.axis]
    if fam.index_kind == "literal":
        return np.array([[1, 0, 2], [0, 2, 1]])
    if fam.index_kind in ("expanded", "materialised"):
        rows = rng.integers(0, size, ishape[0])
        return np.ascontiguousarray(np.broadcast_to(rows.reshape((-1,) + (1,) * (len(ishape) - 1)), ishape))
    if fam.index_kind == "unique":
        # Distinct targets per fiber: a random permutation of each fiber, cut to length.
        moved = ishape[: fam.axis] + ishape[fam.axis + 1 :] + (size,)
        perm = rng.permuted(np.broadcast_to(np.arange(size), moved), axis=-1)[..., : ishape[fam.axis]]
        return np.ascontiguousarray(np.moveaxis(perm, -1, fam.axis))
    return rng.integers(0, size, ishape)


def _values(kind: str, shape, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if kind == "near_one":
        return rng.uniform(0.9, 1.1, shape).astype(dtype)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def build_inputs(case: Case, quick: bool = False, seed: int = 0) -> Inputs:
    """The arrays of `case`, C-contiguous, drawn from `seed`."""
    fam = FAMILIES[case.family]
    dshape, ishape = case.shapes(quick)
    rng = np.random.default_rng(seed)
    dtype = case.np_dtype
    indices = _indices(fam, dshape, ishape, rng).astype(case.index_dtype)
    if fam.index_kind == "literal":
        data = np.arange(math.prod(dshape), dtype=np.float32).reshape(dshape).astype(dtype)
        updates = (np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)).astype(dtype)
    else:
        data = _values("normal", dshape, dtype, rng)
        updates = _values(fam.values, ishape, dtype, rng)
    rows = None
    if fam.index_kind == "expanded":
        rows = np.ascontiguousarray(indices[(slice(None),) + (slice(0, 1),) * (indices.ndim - 1)])
    if case.op == "scatter":
        return Inputs(data, indices, updates, index_rows=rows)
    if case.op == "gather":
        return Inputs(data, indices, index_rows=rows)
    if case.op == "scatter_vjp":
        return Inputs(data, indices, updates, _values("normal", dshape, dtype, rng), rows)
    return Inputs(data, indices, None, _values("normal", ishape, dtype, rng), rows)


def index_bytes(inputs: Inputs) -> int:
    """The bytes of the index as the case's timing hands it to scatterx (`expanded_indices`)."""
    return (inputs.indices if inputs.index_rows is None else inputs.index_rows).nbytes


def moved_bytes(case: Case, inputs: Inputs) -> int:
    """The fewest bytes the operation must read and write: what the streaming bound streams.

    Scatter: data read, result written, indices and updates read (2*data + indices + updates).
    Gather: data, indices and the result. A backward case reads the incoming gradient, the
    indices and (for mul, max, min) data and updates, and writes its gradients. The indices
    are counted as scatterx is handed them: an expanded index as its stride-0 view, whose bytes
    are its first column's (before stop 29 the bound counted the materialised index, 64 times
    as many bytes, which scatterx never reads; the `mp_dense` cases time that one).
    """
    d, i = inputs.data.nbytes, index_bytes(inputs)
    item = inputs.data.dtype.itemsize
    out_of_indices = inputs.indices.size * item
    if case.op == "scatter":
        return 2 * d + i + inputs.updates.nbytes
    if case.op == "gather":
        return d + i + out_of_indices
    if case.op == "gather_vjp":
        return out_of_indices + i + d
    u = inputs.updates.nbytes
    needs_values = case.reduction in ("mul", "max", "min")
    return d + i + (d + u if needs_values else 0) + d + u


@dataclass
class Touches:
    """The accesses of a case's pass over its random targets, for the probe of the machine.

    `positions` are byte offsets into a table of `table_bytes` (data's size), in the order the
    operation visits them, as wide as the indices they stand for (int32 for an int32 index whose
    table's offsets fit it, else int64); each access covers `span` bytes, and is a
    read-modify-write when `write` is set. `stream_bytes` are the values that move in sequence
    beside them, one per index: the updates a scatter reads, the elements a gather writes, the
    update gradients the backward of a scatter writes, the incoming gradient the backward of a
    gather reads (the positions, read in sequence too, stand for the indices, except where they
    stand for the first column of a materialised expanded index: a scatter's stream then holds
    the whole index as well, see `touches`); `stream_written`
    says the kernel writes it (a gather's result, a scatter's update gradients). `splits` are the
    ways threads may share the accesses (``_core.touch``; probe.h, TouchSplit): by contiguous
    ranges of positions, unless the targets are fibers whose floating-point adds or products
    must follow the order of the indices (SPEC section 2) and a range would cut a fiber (one
    fiber, a 1-D histogram; the column fibers of the message-passing rows). Those leave a kernel
    one thread walking them all with a second reading ahead ("reader"), a split of the table
    ("targets"), and, where an access spans several lines (the fibers of a row), a split of its
    lines ("lines"), or where accesses are single elements of several fibers, a split of the
    fibers ("columns", `fibers`); with a materialised index in the stream (`checked_bytes`), the
    split of the table with that index read by ranges ("checked", as scatterx's kernel checks
    it).
    """

    table_bytes: int
    positions: np.ndarray
    span: int
    write: bool
    stream_bytes: int = 0
    splits: tuple[str, ...] = ("ranges",)
    stream_written: bool = False
    # A second pass over the same targets that must follow this one (`passes`): the backward
    # of max and min, which cannot hand out a target's share before it has counted every tie,
    # and of mul, whose suffix products follow its prefix products (SPEC section 5).
    then: Touches | None = None
    # With `then`: the positions of one coordinate before the axis (a slab of a middle axis), over
    # which both passes go before the next block's (0: all the positions, one block).
    block: int = 0
    # Of `stream_bytes`, the last that stand for a materialised expanded index (see `touches`):
    # read whole by any kernel, to know that each row holds one value, and by contiguous ranges
    # if it likes, whatever way it applies the rows; the "checked" split reads them so (0: none).
    checked_bytes: int = 0
    # With the "columns" split: the positions come in rows of this many, one element of each
    # fiber a row, and each thread takes its share of the fibers (0: no such split).
    fibers: int = 0

    @property
    def passes(self) -> list[Touches]:
        """This pass and those that must follow it, in order."""
        return [self] + (self.then.passes if self.then is not None else [])

    @property
    def ordered(self) -> bool:
        """Whether no thread may take a range of the positions (their order must be kept)."""
        return "ranges" not in self.splits


def _splits(case: Case, data: np.ndarray, indices: np.ndarray, span: int) -> tuple[str, ...]:
    """How threads may share the accesses of `case` (`Touches.splits`). Float adds and products
    depend on their order (integer ones wrap around whatever their order; max and min do not
    depend on it; "none" keeps the last writer, which a split can find): the forward "add" and
    "mul", the backward of a gather (the output gradient added into the data gradient at the
    targets, as a scatter "add") and the backward of "mul" (the running products at the
    targets; until stop 61 these two backwards were shared by ranges, a split that no kernel
    keeping the order may take, and their floors were too low). Their fibers lie in
    blocks along the positions, one block per coordinate before the axis: with one block (the
    axis outermost: a 1-D histogram, the message-passing rows) a range of positions cuts every
    fiber; with several (a middle axis: one slab each) the cases' ranges meet between blocks.
    Accesses of several lines (a row of fibers) can also be split by lines, and single elements
    of several fibers (rows of one element per fiber, `_fibers`) by fibers ("columns", since stop
    62: scatterx's backward of "mul" along an outermost axis gives each thread its share of the
    columns; in stop 61's run the probe's other ordered ways were slower than that kernel)."""
    # Whether the operation adds or multiplies floats at its targets, in the order of the updates.
    accumulates = {
        "scatter": case.reduction in ("add", "mul"), "gather_vjp": True, "scatter_vjp": case.reduction == "mul",
    }
    ordered = (
        accumulates.get(case.op, False)
        and not np.issubdtype(data.dtype, np.integer) and math.prod(indices.shape[:case.axis]) == 1
    )
    if not ordered:
        return ("ranges",)
    if span > 64:
        return ("reader", "targets", "lines")
    if span == data.dtype.itemsize and _fibers(case, indices) > 1:
        return ("reader", "targets", "columns")
    return ("reader", "targets")


def _fibers(case: Case, indices: np.ndarray) -> int:
    """The fibers that the positions of one coordinate along the axis visit, one element each, in
    C order: rows of this many positions (the columns of an index along an outermost axis)."""
    return math.prod(indices.shape[case.axis + 1:])


def touches(case: Case, inputs: Inputs) -> Touches | None:
    """The target accesses of `case`: of a scatter (written) or a gather (read), or of the
    passes over random targets that each backward needs at least: one for "add" (the gradient
    read at the targets), "none" and the backward of a gather (written, and so read and written
    back); two for "max" and "min", each reading the targets (`Touches.then`). An update's share
    there is the target's gradient over the number of ties at the target, so no share is known
    before every update of the target has been compared with the result there: a first pass
    reads the result at the targets beside the updates, a second reads each target's share
    beside the update gradients it writes. Two for "mul" as well, each reading and writing a
    running product at the targets: SPEC section 5 computes its update gradients without
    division, from prefix and suffix products, so a first pass carries the product of the
    updates before each one beside the updates, and a second the product of those after it
    beside the update gradients it writes (until stop 52 one pass, which left the suffix out).
    Both passes go over the positions of one coordinate before the axis (`Touches.block`: a
    slab of a middle axis, where a kernel keeps them in its cache between the passes) before
    the next. None for the latency case.

    An expanded index visits one whole row per leading index; any other index one element per
    index, at the flat position of its target in C order. A materialised expanded index visits
    rows too (scatterx applies them whole once it has checked them), and its positions stand for
    its first column only. Every other index of it must be read as well: no kernel knows that a
    row holds one value before it has read the row. So a scatter's probe reads the whole index
    in its stream, beside the updates: a share of index row and update row per position (since
    stop 53; until then it left the rest of the index out, and its floor was lower than any
    kernel's: `mp_add_dense`'s floor stood for 102 MB of the 307 MB that such a kernel must
    read). Stop 29 had measured that probe slower than scatterx (48.4 ms against 38.9); in stop
    53, one process, four rounds, 20.3-22.3 ms against scatterx's 18.4-25.7, scatterx the faster
    in 3 of 4 (the first column alone: 8.5-10.2 ms). Such an index may be read by contiguous
    ranges whatever way the rows are applied (scatterx's threads check it in chunks and apply
    the rows by target): `checked_bytes`, and the "checked" split (since stop 55). A gather's
    stream is the result it writes, so its probe still leaves the index out, and its floor
    stays below any kernel's.
    """
    if not case.has_bound:
        return None
    data, indices, axis = inputs.data, inputs.indices, case.axis
    item = data.dtype.itemsize
    size = data.shape[axis]
    if case.op == "scatter_vjp":
        write = case.reduction != "add"  # "none" writes its targets, "add" reads them; max, min, mul: below
    else:
        write = case.op != "gather"
    stream = indices.size * item
    written = case.op in ("gather", "scatter_vjp")  # the result, the update gradients
    first_column = inputs.index_rows
    if first_column is None and FAMILIES[case.family].index_kind == "materialised":
        first_column = indices[:, :1]
    if first_column is not None:
        rows = first_column.reshape(-1).astype(np.int64)
        rows = np.where(rows < 0, rows + size, rows)
        row_bytes = item * math.prod(data.shape[1:])
        span = item * math.prod(indices.shape[1:])
        positions = _as_wide_as(rows * row_bytes, first_column, data.nbytes)
        splits, checked = _splits(case, data, indices, span), 0
        if inputs.index_rows is None and not written:
            # A materialised index, read whole (see above), and by ranges in the "checked" way.
            stream += indices.nbytes
            checked = indices.nbytes
            if splits != ("ranges",):
                splits += ("checked",)
        return Touches(data.nbytes, positions, span, write, stream, splits, written, checked_bytes=checked)
    coords = list(np.indices(indices.shape, sparse=True))
    coords[axis] = np.where(indices < 0, indices + size, indices)
    flat = np.ravel_multi_index(np.broadcast_arrays(*coords), data.shape).reshape(-1)
    positions = _as_wide_as(flat * item, indices, data.nbytes)  # flat is intp: no int32 overflow
    splits = _splits(case, data, indices, item)
    fibers = _fibers(case, indices) if "columns" in splits else 0
    if case.op == "scatter_vjp" and case.reduction in ("max", "min", "mul"):
        # Max and min read the targets, mul reads and writes its running products there; both
        # passes over one coordinate before the axis, a block, before the next block's.
        carried = case.reduction == "mul"
        block = math.prod(indices.shape[axis:])
        second = Touches(data.nbytes, positions, item, carried, stream, splits, True, fibers=fibers)
        return Touches(data.nbytes, positions, item, carried, stream, splits, False, then=second, block=block,
                       fibers=fibers)
    return Touches(data.nbytes, positions, item, write, stream, splits, written, fibers=fibers)


def _as_wide_as(positions: np.ndarray, index: np.ndarray, table_bytes: int) -> np.ndarray:
    """Byte offsets in the width of the index they stand for: a kernel reads an int32 index as
    it is, so the probe reads int32 positions for it (where the table's offsets fit)."""
    narrow = index.dtype.itemsize == 4 and table_bytes <= np.iinfo(np.int32).max
    return positions.astype(np.int32 if narrow else np.int64)


def select(cases, patterns: str | None) -> list[Case]:
    """The cases whose name matches one of the comma-separated shell patterns (all if None)."""
    import fnmatch

    if not patterns:
        return list(cases)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = [c for c in cases if any(fnmatch.fnmatchcase(c.name, p) for p in wanted)]
    if not chosen:
        names = ", ".join(c.name for c in cases)
        raise ValueError(f"no case matches {patterns!r}; the cases are: {names}")
    return chosen
