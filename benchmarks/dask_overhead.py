"""The overhead of scatterx.dask against the NumPy path on in-memory arrays.

    python benchmarks/dask_overhead.py            # all cases, 7 repeats
    python benchmarks/dask_overhead.py --quick    # smaller arrays, 5 repeats

Each case runs the NumPy path (``scatterx.scatter_elements`` / ``gather_elements``) and the dask
path with each strategy, on the threaded scheduler and on the synchronous one. A dask time
covers building the graph and computing it from in-memory dask arrays (their blocks already
exist). Results are checked equal to the NumPy path before timing; the table gives the median
of the repeats after one warm-up, and the ratio dask / NumPy (lower is better, 1 = no overhead).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import dask
import dask.array as da
import numpy as np

import scatterx as sx
import scatterx.dask as sxd


def cases(scale: float):
    """(name, op, data, indices, updates, axis, reduction, data chunks, indices chunks)."""
    rng = np.random.default_rng(0)

    def n(x):
        return max(1, int(x * scale))

    rows, feat, edges = n(50_000), 64, n(400_000)
    data = rng.standard_normal((rows, feat)).astype(np.float32)
    idx = np.broadcast_to(rng.integers(0, rows, (edges, 1)), (edges, feat)).copy()
    upd = rng.standard_normal((edges, feat)).astype(np.float32)
    yield ("message passing add", "scatter", data, idx, upd, 0, "add", (n(12_500), feat), (n(100_000), feat))
    yield ("gather rows", "gather", data, idx, None, 0, None, (n(12_500), feat), (n(100_000), feat))
    bins, count = n(100_000), n(10_000_000)
    hist = np.zeros(bins)
    yield ("1-D histogram add", "scatter", hist, rng.integers(0, bins, count), rng.random(count), 0, "add",
           (n(25_000),), (n(2_500_000),))
    d3 = rng.standard_normal((64, 512, 128))
    i3 = rng.integers(0, 512, (64, 256, 128))
    yield ("3-D middle-axis max", "scatter", d3, i3, rng.standard_normal(i3.shape), 1, "max",
           (16, 128, 128), (16, 64, 128))


def _numpy_path(op, data, idx, upd, axis, reduction):
    if op == "scatter":
        return sx.scatter_elements(data, idx, upd, axis, reduction)
    return sx.gather_elements(data, idx, axis)


def _dask_path(op, data, idx, upd, axis, reduction, method, scheduler):
    """Builds and computes; returns the result and the number of tasks of the graph."""
    if op == "scatter":
        lazy = sxd.scatter_elements(data, idx, upd, axis, reduction, method=method)
    else:
        lazy = sxd.gather_elements(data, idx, axis, method=method)
    return lazy.compute(scheduler=scheduler), len(lazy.__dask_graph__())


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    repeats = args.repeats or (5 if args.quick else 7)
    print(f"median of {repeats} after a warm-up; ratio = dask / NumPy path; native threads: {sx.get_num_threads()}")
    print(f"{'case':<22} {'numpy ms':>9}  {'strategy':<9} {'scheduler':<11} {'dask ms':>9} {'ratio':>6} {'tasks':>6}")
    for name, op, data, idx, upd, axis, reduction, dchunks, ichunks in cases(scale):
        numpy_path = functools.partial(_numpy_path, op, data, idx, upd, axis, reduction)
        expected = numpy_path()
        base = median_time(numpy_path, repeats)
        ddata = da.from_array(data, chunks=dchunks).persist()
        didx = da.from_array(idx, chunks=ichunks).persist()
        dupd = None if upd is None else da.from_array(upd, chunks=ichunks).persist()
        for method in ("blockwise", "routed"):
            for scheduler in ("threads", "synchronous"):
                dask_path = functools.partial(_dask_path, op, ddata, didx, dupd, axis, reduction, method, scheduler)
                with dask.config.set(scheduler=scheduler):
                    result, tasks = dask_path()
                    np.testing.assert_array_equal(result, expected)
                    t = median_time(dask_path, repeats)
                print(f"{name:<22} {base * 1e3:9.1f}  {method:<9} {scheduler:<11} {t * 1e3:9.1f} "
                      f"{t / base:6.2f} {tasks:6d}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
