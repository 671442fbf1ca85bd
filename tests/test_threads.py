"""Results do not depend on the number of native threads (SPEC section 2, "Order").

The arrays have over 100k updates, so the kernels split the fibers among the threads. The
sequential reference for the large cases is NumPy's unbuffered ``ufunc.at``, which applies the
updates one by one in row-major order of the index arrays, as the spec orders them.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_identical, random_values, with_layout

import scatterx as sx

THREAD_COUNTS = (1, 2, 7)
# (name, data shape, index shape, axis): every layout of fibers against the axis.
GEOMETRIES = [
    ("axis0", (2000, 64), (4000, 64), 0),
    ("axis-last", (400, 300), (400, 600), -1),
    ("middle", (16, 100, 64), (16, 200, 64), 1),
]
KINDS = ("float32", "float64", "float16", "bfloat16", "complex128", "int32", "uint8", "bool")
AT = {"add": np.add, "mul": np.multiply}


def _case(kind, data_shape, index_shape, axis, seed=0):
    rng = np.random.default_rng(seed)
    data = random_values(kind, data_shape, rng, nan=False)
    updates = random_values(kind, index_shape, rng, nan=False)
    if kind not in ("bool",) and not kind.startswith(("int", "uint")):
        # Values near 1 keep long products finite and sums inexact, so the order shows.
        data = (1 + rng.random(data_shape) / 8).astype(data.dtype)
        updates = (1 + rng.random(index_shape) / 8).astype(data.dtype)
    indices = rng.integers(-data_shape[axis], data_shape[axis], index_shape)
    return data, indices, updates


def _positions(indices, data_shape, axis):
    """Index tuple into data for np.ufunc.at, in row-major order of `indices`."""
    axis %= len(data_shape)
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = np.where(indices < 0, indices + data_shape[axis], indices)
    return tuple(grid)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("data_shape", "index_shape", "axis"), [g[1:] for g in GEOMETRIES], ids=[g[0] for g in GEOMETRIES]
)
def test_scatter_is_bitwise_identical_for_any_thread_count(
    restore_threads, kind, data_shape, index_shape, axis
):
    data, indices, updates = _case(kind, data_shape, index_shape, axis)
    assert indices.size > 100_000
    for reduction in ("none", "add", "mul", "max") if kind != "complex128" else ("none", "add", "mul"):
        results = []
        for n in THREAD_COUNTS:
            sx.set_num_threads(n)
            results.append(sx.scatter_elements(data, indices, updates, axis, reduction))
        for other in results[1:]:
            assert_identical(other, results[0])
        if reduction in AT and kind != "bool":
            expected = data.copy()
            with np.errstate(over="ignore"):
                AT[reduction].at(expected, _positions(indices, data_shape, axis), updates)
            assert_identical(results[0], expected)


@pytest.mark.parametrize(
    ("data_shape", "index_shape", "axis"), [g[1:] for g in GEOMETRIES], ids=[g[0] for g in GEOMETRIES]
)
def test_gather_is_identical_for_any_thread_count(restore_threads, data_shape, index_shape, axis):
    data, indices, _ = _case("float64", data_shape, index_shape, axis)
    expected = data[_positions(indices, data_shape, axis)]
    for n in THREAD_COUNTS:
        sx.set_num_threads(n)
        assert_identical(sx.gather_elements(data, indices, axis), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_copy_matches_numpy(restore_threads, kind):
    # _kernels.copy (the backward of "add" copies the incoming gradient with it) splits the copy
    # over the threads; every layout must come out element for element as NumPy's copy.
    from scatterx import _kernels

    rng = np.random.default_rng(3)
    base = random_values(kind, (300, 2, 700), rng, nan=False)
    for source in (base, base[:, 1, ::-3], np.swapaxes(base, 0, 2), base[::2, :, 5:]):
        for n in THREAD_COUNTS:
            sx.set_num_threads(n)
            result = _kernels.copy(source)
            assert result.flags.c_contiguous
            assert_identical(result, np.ascontiguousarray(source))


def test_parallel_copy_checks_shapes():
    from scatterx import _core

    with pytest.raises(ValueError, match="shape or element size"):
        _core.copy(np.zeros((3, 4)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="shape or element size"):
        _core.copy(np.zeros(5), np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="read-only"):
        _core.copy(np.zeros(5), np.broadcast_to(np.zeros(1), (5,)))


def test_large_bounds_check_with_threads(restore_threads):
    data = np.zeros((1000, 200))
    indices = np.zeros((1000, 200), np.int64)
    indices[777, 3] = 1000
    for n in THREAD_COUNTS:
        sx.set_num_threads(n)
        with pytest.raises(IndexError, match=r"indices\[777, 3\]"):
            sx.scatter_elements(data, indices, data, 0, "add")


def test_concurrent_callers_get_the_sequential_result(restore_threads):
    """Several Python threads at once share the pool; every result is still the sequential one."""
    sx.set_num_threads(4)
    data, indices, updates = _case("float32", (2000, 64), (4000, 64), 0)
    expected = data.copy()
    np.add.at(expected, _positions(indices, data.shape, 0), updates)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(sx.scatter_elements, data, indices, updates, 0, "add") for _ in range(8)]
        for f in futures:
            assert_identical(f.result(), expected)


def test_set_num_threads_validates_and_round_trips(restore_threads):
    sx.set_num_threads(3)
    assert sx.get_num_threads() == 3
    with pytest.raises(ValueError, match="0"):
        sx.set_num_threads(0)
    with pytest.raises(TypeError, match="float"):
        sx.set_num_threads(2.5)
    assert sx.get_num_threads() == 3


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("zero", None)])
def test_default_comes_from_the_environment(value, expected):
    """SCATTERX_NUM_THREADS sets the default; a bad value warns and falls back to the usable cores."""
    code = "import os, warnings, scatterx as sx; print(sx.get_num_threads(), len(os.sched_getaffinity(0)))"
    env = {**os.environ, "SCATTERX_NUM_THREADS": value}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    threads, cores = map(int, run.stdout.split())
    if expected is None:
        assert threads == cores
        assert "SCATTERX_NUM_THREADS" in run.stderr
    else:
        assert threads == expected


@pytest.mark.parametrize(
    ("data_shape", "index_shape", "axis"), [g[1:] for g in GEOMETRIES], ids=[g[0] for g in GEOMETRIES]
)
@pytest.mark.parametrize(
    "layouts", [("F", "negative", "strided", "F"), ("strided", "F", "negative", "negative")]
)
def test_large_non_contiguous_layouts(restore_threads, data_shape, index_shape, axis, layouts):
    """Fiber splitting over Fortran, negative-stride and strided arrays (inputs and out)."""
    data, indices, updates = _case("float64", data_shape, index_shape, axis, seed=1)
    expected = data.copy()
    np.add.at(expected, _positions(indices, data_shape, axis), updates)
    args = [with_layout(a, lay) for a, lay in zip((data, indices, updates), layouts[:3], strict=True)]
    for n in THREAD_COUNTS:
        sx.set_num_threads(n)
        out = with_layout(np.zeros(data_shape), layouts[3])
        assert sx.scatter_elements(*args, axis, "add", out=out) is out
        assert_identical(np.array(out), expected)
