"""scatterx.dask on a distributed.LocalCluster with worker processes (tasks are pickled).

One small cluster for the module: two single-threaded worker processes.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from conftest import REDUCTIONS, assert_identical

import scatterx as sx
import scatterx.dask as sxd

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="1GiB"
    ) as cluster, distributed.Client(cluster) as client:
        yield client


def _case(rng, data_shape, axis, n_axis):
    index_shape = list(data_shape)
    index_shape[axis] = n_axis
    index_shape[1 - axis] -= 1
    data = np.round(rng.normal(0, 3, data_shape), 1)
    indices = rng.integers(-data_shape[axis], data_shape[axis], index_shape)
    updates = np.round(rng.normal(0, 3, index_shape), 1)
    return data, indices, updates


# (method, axis, data chunks, reductions): routed along a chunked axis, blockwise with chunks off
# the axis (test_dask.py covers every reduction with both; here the point is the pickling).
SETUPS = [("routed", 0, (5, 10), REDUCTIONS), ("blockwise", 1, (4, 10), ("none", "mul"))]


def test_scatter_and_gather_on_worker_processes(client):
    lazy, expected = [], []
    for method, axis, chunks, reductions in SETUPS:
        rng = np.random.default_rng(axis)
        data, indices, updates = _case(rng, (12, 10), axis, 17)
        d = da.from_array(data, chunks=chunks)
        i = da.from_array(indices, chunks=(8, 5))
        u = da.from_array(updates, chunks=(6, 3))
        for reduction in reductions:
            lazy.append(sxd.scatter_elements(d, i, u, axis, reduction, method=method, split_every=2))
            expected.append(sx.scatter_elements(data, indices, updates, axis, reduction))
        lazy.append(sxd.gather_elements(d, i, axis, method=method))
        expected.append(sx.gather_elements(data, indices, axis))
    for result, want in zip(client.compute(lazy, sync=True), expected):
        assert_identical(result, want)


def test_out_of_bounds_reaches_the_client(client):
    idx = np.zeros((6, 2), np.int64)
    idx[4, 1] = -9
    lazy = sxd.scatter_elements(da.zeros((8, 2), chunks=(3, 1)), da.from_array(idx, chunks=2), 1.0, method="routed")
    message = "index -9 at indices[4, 1] is out of bounds for axis 0 with size 8 (allowed: -8..7)"
    with pytest.raises(IndexError) as e:
        client.compute(lazy, sync=True)
    assert str(e.value) == message


def test_random_data_generated_on_workers(client):
    rng = da.random.default_rng(5)
    data = rng.random((30, 4), chunks=(10, 4))
    indices = rng.integers(0, 30, (40, 4), chunks=(20, 4))
    updates = rng.random((40, 4), chunks=(20, 4))
    lazy = sxd.scatter_elements(data, indices, updates, 0, "add", method="routed")
    result, d, i, u = client.compute([lazy, data, indices, updates], sync=True)
    assert_identical(result, sx.scatter_elements(d, i, u, 0, "add"))
