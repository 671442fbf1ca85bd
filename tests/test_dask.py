"""scatterx.dask against the NumPy path, on random chunkings, with laziness and error checks.

The NumPy path (``scatterx.scatter_elements``) is itself checked against the literal oracle and
onnx.reference elsewhere; here every dask result must equal it bit for bit (all reductions,
since the dask strategies fold in the sequential order). Corner cases have hand-computed values.
"""

from __future__ import annotations

import zlib

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import (
    REDUCTIONS,
    TYPES,
    assert_identical,
    is_defined,
    random_indices,
    random_values,
)

import scatterx as sx
import scatterx.dask as sxd

METHODS = ("blockwise", "routed", "auto")


class CountingScheduler:
    """A dask scheduler that counts computations and refuses more than `max_computes`."""

    def __init__(self, max_computes: int = 0):
        self.max_computes = max_computes
        self.total = 0

    def __call__(self, dsk, keys, **kwargs):
        self.total += 1
        if self.total > self.max_computes:
            raise RuntimeError(f"dask computed {self.total} times, allowed {self.max_computes}")
        return dask.get(dsk, keys, **kwargs)


def raise_if_computes(max_computes: int = 0):
    return dask.config.set(scheduler=CountingScheduler(max_computes))


@pytest.fixture(autouse=True)
def synchronous():
    """The synchronous scheduler: deterministic and cheap on a shared 2-core machine."""
    with dask.config.set(scheduler="synchronous"):
        yield


def random_chunks(n: int, rng: np.random.Generator) -> tuple:
    """One-element, whole, or uneven random chunks of a dimension of length n."""
    if n == 0:
        return (0,)
    style = rng.integers(0, 3)
    if style == 0:
        return (1,) * n
    if style == 1:
        return (n,)
    cuts = np.sort(rng.choice(np.arange(1, n), size=rng.integers(0, n), replace=False)) if n > 1 else []
    return tuple(int(c) for c in np.diff(np.concatenate(([0], cuts, [n]))))


def chunked(arr: np.ndarray, rng: np.random.Generator, *, along: int | None = None) -> da.Array:
    """`arr` as a dask array with random chunks; `along` is forced to several chunks if it can be."""
    chunks = [random_chunks(n, rng) for n in arr.shape]
    if along is not None and arr.shape[along] > 1 and len(chunks[along]) == 1:
        n = arr.shape[along]
        chunks[along] = (n // 2, n - n // 2)
    return da.from_array(arr, chunks=tuple(chunks))


def case(kind: str, data_shape: tuple, axis: int, n_axis: int, rng: np.random.Generator, *, shrink=True):
    data = random_values(kind, data_shape, rng)
    index_shape = list(data_shape)
    index_shape[axis] = n_axis
    if shrink:
        index_shape = [n if d == axis else int(rng.integers(max(0, n - 2), n + 1)) for d, n in enumerate(index_shape)]
    indices = random_indices(tuple(index_shape), data_shape[axis], np.dtype(np.int64), rng)
    updates = random_values(kind, tuple(index_shape), rng)
    return data, indices, updates


@pytest.mark.parametrize("method", ["blockwise", "routed"])
@pytest.mark.parametrize("kind", TYPES)
def test_every_type_matches_numpy_path(kind, method):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{method}".encode()))
    axis = int(rng.integers(0, 2))
    data, indices, updates = case(kind, (5, 6), axis, 9, rng)
    d = chunked(data, rng, along=axis)
    i, u = chunked(indices, rng), chunked(updates, rng)
    reductions = [r for r in REDUCTIONS if is_defined(kind, r)]
    lazy = [sxd.scatter_elements(d, i, u, axis, r, method=method) for r in reductions]
    assert all(result.chunks == d.chunks for result in lazy)
    for reduction, result, computed in zip(reductions, lazy, da.compute(*lazy)):
        expected = sx.scatter_elements(data, indices, updates, axis, reduction)
        if (kind, reduction) in DIVERGENCES:
            assert result.dtype == computed.dtype == DIVERGENCES[kind, reduction]
            computed = computed.astype(expected.dtype)
        assert_identical(computed, expected)


# Known divergences from the NumPy path, as data: (type, reduction) -> the dask result's dtype.
# Fixed-width string "add" widens to the width the values need, which a lazy array cannot
# declare; the dask result takes the widest they can need: data's 3 characters + 9 updates per
# fiber x 3 characters. Values are equal.
DIVERGENCES = {("U", "add"): np.dtype("U30"), ("S", "add"): np.dtype("S30")}


@pytest.mark.parametrize("kind", ["float32", "int16", "object-str", "bfloat16", "StringDType", "U"])
@pytest.mark.parametrize("method", METHODS)
def test_gather_every_type(kind, method):
    rng = np.random.default_rng(7)
    data, indices, _ = case(kind, (4, 7), 1, 10, rng)
    expected = sx.gather_elements(data, indices, 1)
    i = chunked(indices, rng)
    result = sxd.gather_elements(chunked(data, rng, along=1), i, 1, method=method)
    assert result.chunks == i.chunks
    assert_identical(result.compute(), expected)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("method", ["blockwise", "routed"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_random_chunkings_3d(axis, method, seed):
    rng = np.random.default_rng([seed, axis + 3])
    shape = tuple(int(n) for n in rng.integers(1, 6, 3))
    n_axis = int(rng.integers(0, 9))
    kind = ("float64", "float16", "int32")[seed % 3]
    data, indices, updates = case(kind, shape, axis % 3, n_axis, rng)
    split_every = (None, 1, 2)[(seed + axis) % 3]
    d = chunked(data, rng, along=axis % 3 if (seed + axis) % 2 else None)
    i, u = chunked(indices, rng), chunked(updates, rng)
    lazy = [sxd.scatter_elements(d, i, u, axis, r, method=method, split_every=split_every) for r in REDUCTIONS]
    lazy.append(sxd.gather_elements(d, i, axis, method=method, split_every=split_every))
    assert all(result.chunks == d.chunks for result in lazy[:-1])
    assert lazy[-1].chunks == i.chunks
    *scattered, gathered = da.compute(*lazy)
    for reduction, result in zip(REDUCTIONS, scattered):
        assert_identical(result, sx.scatter_elements(data, indices, updates, axis, reduction))
    assert_identical(gathered, sx.gather_elements(data, indices, axis))


# Hand-computed: order across blocks. data = 0; four updates to position 1, one per indices
# block, spread over destination blocks; float "add" in sequential order: ((1e16 + 1) - 1e16) + 1
# = 1 (1e16 + 1 rounds to 1e16); any regrouping gives 0 or 2.
ORDER_CASES = [
    ("none", [5.0, 6.0, 7.0, 8.0], [0.0, 8.0, 0.0, 0.0, 0.0, 0.0]),
    ("add", [1e16, 1.0, -1e16, 1.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    ("mul", [2.0, 3.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    ("max", [5.0, np.nan, 7.0, 8.0], [0.0, np.nan, 0.0, 0.0, 0.0, 0.0]),
    ("min", [-5.0, 6.0, -7.0, 8.0], [0.0, -7.0, 0.0, 0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("split_every", [1, None])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("reduction", "values", "expected"), ORDER_CASES)
def test_order_across_blocks(reduction, values, expected, method, split_every):
    data = da.from_array(np.zeros(6), chunks=(1, 2, 3))
    indices = da.from_array(np.array([1, -5, 1, 1, 3, 5])[[0, 1, 2, 3]], chunks=1)
    updates = da.from_array(np.array(values), chunks=1)
    result = sxd.scatter_elements(data, indices, updates, 0, reduction, method=method, split_every=split_every)
    np.testing.assert_array_equal(result.compute(), np.array(expected))


def test_none_last_writer_over_destinations():
    data = da.from_array(np.arange(8.0).reshape(2, 4), chunks=(1, 1))
    indices = da.from_array(np.array([[3, 0, 3], [1, -1, 1]]), chunks=1)
    updates = da.from_array(np.array([[100.0, 101.0, 102.0], [103.0, 104.0, 105.0]]), chunks=(2, 1))
    expected = np.array([[101.0, 1.0, 2.0, 102.0], [4.0, 105.0, 6.0, 104.0]])
    for method in METHODS:
        for split_every in (1, 2, None):
            result = sxd.scatter_elements(data, indices, updates, 1, method=method, split_every=split_every)
            np.testing.assert_array_equal(result.compute(), expected)


def test_build_never_computes():
    rng = np.random.default_rng(0)
    data, indices, updates = case("float32", (6, 8), 0, 11, rng)
    d, i, u = chunked(data, rng, along=0), chunked(indices, rng), chunked(updates, rng)
    counter = CountingScheduler(max_computes=0)
    with dask.config.set(scheduler=counter):
        built = [
            sxd.scatter_elements(d, i, u, 0, reduction, method=method)
            for reduction in REDUCTIONS for method in METHODS
        ] + [sxd.gather_elements(d, i, 0, method=method) for method in METHODS]
        built.append(sxd.scatter_elements(d, i[:, :3], 1.5, 0, "add"))
        built.append(sxd.scatter_elements(d, i + 100, u, 0))
    assert counter.total == 0
    counter = CountingScheduler(max_computes=1)
    with dask.config.set(scheduler=counter):
        da.compute(*built[:-1])
    assert counter.total == 1


def test_out_of_bounds_raises_at_compute_with_global_position():
    data = da.zeros((6, 3), chunks=(2, 3))
    idx = np.zeros((5, 3), np.int64)
    idx[3, 1] = 7
    indices = da.from_array(idx, chunks=(2, 2))
    message = "index 7 at indices[3, 1] is out of bounds for axis 0 with size 6 (allowed: -6..5)"
    with pytest.raises(IndexError) as numpy_error:
        sx.scatter_elements(np.zeros((6, 3)), idx, np.ones((5, 3)), 0)
    assert str(numpy_error.value) == message
    for method in METHODS:
        lazy = sxd.scatter_elements(data, indices, da.ones((5, 3), chunks=2), 0, method=method)
        with pytest.raises(IndexError) as e:
            lazy.compute()
        assert str(e.value) == message
        lazy = sxd.gather_elements(data, indices, 0, method=method)
        with pytest.raises(IndexError) as e:
            lazy.compute()
        assert str(e.value) == message


def test_uint64_beyond_int64_is_out_of_bounds():
    idx = np.array([0, 1, 2**63 + 5], np.uint64)
    message = f"index {2**63 + 5} at indices[2] is out of bounds for axis 0 with size 4 (allowed: -4..3)"
    with pytest.raises(IndexError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        sx.scatter_elements(np.zeros(4), idx, np.ones(3))
    for method in METHODS:
        lazy = sxd.scatter_elements(da.zeros(4, chunks=2), da.from_array(idx, chunks=2), np.ones(3), method=method)
        with pytest.raises(IndexError) as e:
            lazy.compute()
        assert str(e.value) == message


def _error(fn, *args, **kwargs):
    with pytest.raises(Exception) as e:
        fn(*args, **kwargs)
    return type(e.value), str(e.value)


BAD_CALLS = [
    ("rank 0", np.float64(1.0), np.int64(0), np.float64(1.0), 0, "none"),
    ("rank mismatch", np.zeros((3, 2)), np.zeros(2, np.int64), np.zeros(2), 0, "none"),
    ("does not fit", np.zeros((3, 2)), np.zeros((2, 3), np.int64), np.zeros((2, 3)), 0, "none"),
    ("axis", np.zeros((3, 2)), np.zeros((2, 2), np.int64), np.zeros((2, 2)), 2, "none"),
    ("float indices", np.zeros((3, 2)), np.zeros((2, 2)), np.zeros((2, 2)), 0, "none"),
    ("updates dtype", np.zeros((3, 2)), np.zeros((2, 2), np.int64), np.zeros((2, 2), np.float32), 0, "none"),
    ("updates shape", np.zeros((3, 2)), np.zeros((2, 2), np.int64), np.zeros((2, 1)), 0, "none"),
    ("unknown reduction", np.zeros(3), np.zeros(2, np.int64), np.zeros(2), 0, "sum"),
    ("complex max", np.zeros(3, np.complex64), np.zeros(2, np.int64), np.zeros(2, np.complex64), 0, "max"),
    ("string mul", np.array(["a", "b"], object), np.zeros(1, np.int64), np.array(["c"], object), 0, "mul"),
]


@pytest.mark.parametrize("as_dask", [False, True])
@pytest.mark.parametrize(("name", "data", "indices", "updates", "axis", "reduction"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_build_time_errors(name, data, indices, updates, axis, reduction, as_dask):
    expected = _error(sx.scatter_elements, data, indices, updates, axis, reduction)
    wrap = (lambda a: da.from_array(a, chunks=-1) if a.ndim else a) if as_dask else (lambda a: a)
    with raise_if_computes():
        got = _error(sxd.scatter_elements, wrap(data), wrap(indices), wrap(updates), axis, reduction)
    assert got == expected
    if reduction == "none" and name != "updates dtype" and name != "updates shape":
        with raise_if_computes():
            assert _error(sxd.gather_elements, wrap(data), wrap(indices), axis) == _error(
                sx.gather_elements, data, indices, axis
            )


def test_bad_method_and_split_every():
    d = da.zeros(4, chunks=2)
    with pytest.raises(ValueError, match="unknown method 'tree'"):
        sxd.scatter_elements(d, [0], [1.0], method="tree")
    with pytest.raises(ValueError, match="split_every must be a positive integer"):
        sxd.scatter_elements(d, [0], [1.0], split_every=0)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        sxd.gather_elements(d[d > 0], da.zeros(1, dtype=int, chunks=1))


def test_numpy_inputs_scalar_and_list_updates():
    data = np.arange(12.0).reshape(3, 4)
    result = sxd.scatter_elements(data, [[2, 0], [0, 0]], 10.0, 0, "add")
    assert isinstance(result, da.Array)
    expected = data.copy()
    expected[2, 0] += 10.0  # indices[0, 0]
    expected[0, 1] += 20.0  # indices[0, 1] and indices[1, 1]
    expected[0, 0] += 10.0  # indices[1, 0]
    np.testing.assert_array_equal(result.compute(), expected)
    listed = sxd.scatter_elements(data, [[1, 2, 0]], [[-1.0, -2.0, -3.0]], 0)
    np.testing.assert_array_equal(listed.compute()[:, :3], [[0.0, 1.0, -3.0], [-1.0, 5.0, 6.0], [8.0, -2.0, 10.0]])
    gathered = sxd.gather_elements(data, [[2, 0, 1]], 0)
    np.testing.assert_array_equal(gathered.compute(), [[8.0, 1.0, 6.0]])


def test_indices_smaller_than_data_off_axis():
    data = np.zeros((5, 7))
    indices = np.array([[4, 0, 4], [1, 1, 1]])
    updates = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    expected = np.zeros((5, 7))
    expected[4, 0], expected[0, 1], expected[4, 2] = 1.0, 2.0, 3.0
    expected[1, 0], expected[1, 1], expected[1, 2] = 4.0, 5.0, 6.0
    d = da.from_array(data, chunks=((2, 3), (1, 2, 4)))
    for method in METHODS:
        for i in (indices, da.from_array(indices, chunks=1)):
            result = sxd.scatter_elements(d, i, updates, 0, "add", method=method)
            np.testing.assert_array_equal(result.compute(), expected)
            assert result.chunks == d.chunks


def test_inputs_and_persisted_blocks_are_not_modified():
    rng = np.random.default_rng(3)
    data, indices, updates = case("float64", (6, 5), 0, 8, rng, shrink=False)
    original = data.copy()
    persisted = da.from_array(data, chunks=(2, 5)).persist()
    for method in METHODS:
        for split_every in (1, None):
            result = sxd.scatter_elements(persisted, indices, updates, 0, "add", method=method, split_every=split_every)
            first = result.compute()
            np.testing.assert_array_equal(result.compute(), first)
    np.testing.assert_array_equal(persisted.compute(), original)
    np.testing.assert_array_equal(data, original)


def test_auto_routes_when_whole_axis_block_is_large():
    data = da.zeros((64, 64), chunks=(8, 64))
    indices = da.zeros((10, 64), dtype=np.int64, chunks=5)

    def layers(arr):
        return " ".join(arr.__dask_graph__().layers)

    with dask.config.set({"array.chunk-size": "64kiB"}):
        assert "scatterx-route" not in layers(sxd.scatter_elements(data, indices, 1.0))
    with dask.config.set({"array.chunk-size": "16kiB"}):
        routed = sxd.scatter_elements(data, indices, 1.0)
        assert "scatterx-route" in layers(routed)
        assert "scatterx-gather-routed" in layers(sxd.gather_elements(data, indices))
    assert "scatterx-route" not in layers(sxd.scatter_elements(data, indices, 1.0, method="blockwise"))
    expected = np.zeros((64, 64))
    expected[0, :] = 10.0  # ten updates per column, all to row 0
    np.testing.assert_array_equal(routed.compute(), np.where(np.arange(64)[:, None] == 0, 1.0, np.zeros((64, 64))))
    np.testing.assert_array_equal(
        sxd.scatter_elements(data, indices, 1.0, reduction="add", method="routed").compute(), expected
    )


def test_empty_arrays():
    for method in METHODS:
        d = da.ones((4, 3), chunks=(1, 2))
        result = sxd.scatter_elements(d, np.zeros((0, 3), np.int64), np.zeros((0, 3)), 0, "add", method=method)
        np.testing.assert_array_equal(result.compute(), np.ones((4, 3)))
        empty_axis = sxd.scatter_elements(np.zeros((0, 2)), np.zeros((0, 2), np.int64), np.zeros((0, 2)), method=method)
        assert empty_axis.compute().shape == (0, 2)
        with pytest.raises(IndexError, match="allowed: none, the axis is empty"):
            sxd.gather_elements(np.zeros((0, 2)), np.zeros((1, 2), np.int64), method=method).compute()


def test_dtype_kinds_and_byte_order():
    big_endian = np.arange(6, dtype=">f8")
    result = sxd.scatter_elements(da.from_array(big_endian, chunks=2), [5, 0], np.array([9.0, 8.0], ">f8"), method="routed")
    assert result.dtype == np.dtype("float64")
    np.testing.assert_array_equal(result.compute(), [8.0, 1.0, 2.0, 3.0, 4.0, 9.0])
    words = np.array(["ab", "c", "d"], dtype="U2")
    concat = sxd.scatter_elements(da.from_array(words, chunks=1), [0, 0], np.array(["xy", "z"]), reduction="add")
    assert concat.dtype == np.dtype("U6")
    assert concat.compute().tolist() == ["abxyz", "c", "d"]
    wider = sxd.scatter_elements(da.from_array(words, chunks=1), [2], np.array(["xyz"]), method="routed")
    assert wider.dtype == np.dtype("U3")
    assert wider.compute().tolist() == ["ab", "c", "xyz"]


def test_import_scatterx_does_not_import_dask():
    import subprocess
    import sys

    code = "import sys, scatterx; sys.exit('dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0



def test_folds_copy_read_only_blocks_they_own():
    """distributed may hand a block received from another worker over as a read-only buffer."""
    from scatterx.dask import _tasks

    block = np.zeros((2, 3))
    block.flags.writeable = False
    idx, upd = np.array([[1, 0, 1]]), np.array([[1.0, 2.0, 3.0]])
    expected = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    out = _tasks.scatter_fold(block, [idx], [upd], axis=0, reduction="add", owned=True, result_dtype=block.dtype)
    np.testing.assert_array_equal(out, expected)
    piece = np.empty((1, 1), object)
    piece[0, 0] = (np.array([3, 1, 5]), np.array([1.0, 2.0, 3.0]))
    out = _tasks.apply_pieces(block, [piece], reduction="add", owned=True, result_dtype=block.dtype)
    np.testing.assert_array_equal(out, expected)
    partial = np.zeros((1, 3))
    partial.flags.writeable = False
    piece[0, 0] = (np.array([3, 1, 5]), np.array([0, 1, 2]))
    gathered = _tasks.gather_pieces(partial, [piece], [np.arange(6.0).reshape(2, 3)], result_dtype=block.dtype)
    np.testing.assert_array_equal(gathered, [[3.0, 1.0, 5.0]])
    assert not block.any() and not partial.any()
