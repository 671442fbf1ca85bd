"""Scatter-add into a dask array several times larger than the memory of its workers.

A float32 array of integer values 0..7 (so that float32 sums stay exact) is generated block by
block on the workers with ``dask.array.random``; random updates are scatter-added into it along
axis 0, where it is chunked, so ``scatterx.dask`` takes the routed strategy. Nothing of the full
array is ever held: each output block is reduced to ``sum(out) - sum(data)`` as soon as it is
made, and the sum of those deltas must equal the sum of the updates exactly.

    python examples/dask_scale.py                   # 8 GiB array, 2 workers x 1 GiB
    python examples/dask_scale.py --size-gib 1      # a quick run

Progress: distributed's progress bar on a terminal, a plain line per 10% otherwise. The closing
lines report the time and the peak memory of each worker (sampled every 0.25 s).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, as_completed, progress

import scatterx.dask as sxd

COLUMNS = 32768


class MemoryWatch:
    """Samples every worker's process memory (and spilled bytes) from the scheduler."""

    def __init__(self, client: Client, interval: float = 0.25):
        self.client, self.interval = client, interval
        self.peak: dict[str, int] = {}
        self.spilled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for address, worker in self.client.scheduler_info(n_workers=-1)["workers"].items():
                metrics = worker.get("metrics", {})
                self.peak[address] = max(self.peak.get(address, 0), int(metrics.get("memory", 0)))
                disk = metrics.get("spilled_bytes", {}).get("disk", 0)
                self.spilled = max(self.spilled, int(disk))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def block_delta(out: np.ndarray, data: np.ndarray) -> np.ndarray:
    """sum(out) - sum(data) of one block, as a (1, 1) float64 block (exact: integer values)."""
    delta = out.sum(dtype=np.float64) - data.sum(dtype=np.float64)
    return np.full((1,) * out.ndim, delta)


def build(size_gib: float, chunk_mib: int, n_updates: int, index_chunk: int):
    rows = int(size_gib * 2**30) // (4 * COLUMNS)
    chunk_rows = max(1, chunk_mib * 2**20 // (4 * COLUMNS))
    update_rows = max(1, n_updates // COLUMNS)
    rng = da.random.default_rng(2026)
    data = da.floor(rng.random((rows, COLUMNS), dtype=np.float32, chunks=(chunk_rows, COLUMNS)) * 8)
    indices = rng.integers(0, rows, (update_rows, COLUMNS), chunks=(index_chunk, COLUMNS))
    updates = rng.integers(1, 4, (update_rows, COLUMNS), chunks=(index_chunk, COLUMNS)).astype(np.float32)
    out = sxd.scatter_elements(data, indices, updates, axis=0, reduction="add")
    deltas = da.map_blocks(block_delta, out, data, chunks=((1,) * out.numblocks[0], (1,)), dtype=np.float64)
    return data, updates, deltas


def report_progress(client: Client, futures: list) -> None:
    if sys.stdout.isatty():
        progress(futures)
        return
    start, step = time.perf_counter(), max(1, len(futures) // 10)
    for done, _ in enumerate(as_completed(futures), start=1):
        if done % step == 0 or done == len(futures):
            print(f"  {done}/{len(futures)} blocks done, {time.perf_counter() - start:6.1f} s", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=8.0, help="size of the float32 data array")
    parser.add_argument("--chunk-mib", type=int, default=64, help="data chunk size")
    parser.add_argument("--updates", type=int, default=2**24, help="number of updates")
    parser.add_argument("--index-chunk", type=int, default=64, help="rows of indices per chunk")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="1GiB", help="per worker")
    args = parser.parse_args(argv)

    data, updates, deltas = build(args.size_gib, args.chunk_mib, args.updates, args.index_chunk)
    total_limit = args.workers * _gib(args.memory_limit)
    print(f"data: {data.shape} float32 = {data.nbytes / 2**30:.2f} GiB in {data.numblocks[0]} chunks of "
          f"{data.chunksize[0] * COLUMNS * 4 / 2**20:.0f} MiB; updates: {updates.size:,} in "
          f"{updates.numblocks[0]} chunks")
    print(f"workers: {args.workers} x {args.memory_limit} (data / worker memory = {data.nbytes / total_limit:.1f})")

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      memory_limit=args.memory_limit, dashboard_address=None) as cluster, \
            Client(cluster) as client, MemoryWatch(client) as watch:
        start = time.perf_counter()
        blocks = [d for d in deltas.to_delayed().ravel()]
        futures = client.compute(blocks + [updates.sum(dtype=np.float64)])
        report_progress(client, futures)
        *block_deltas, updates_sum = client.gather(futures)
        elapsed = time.perf_counter() - start
        total = float(np.sum([b.sum() for b in block_deltas]))
    peaks = ", ".join(f"{p / 2**20:.0f} MiB" for p in watch.peak.values())
    print(f"sum(out) - sum(data) = {total:.1f}; sum(updates) = {updates_sum:.1f}; "
          f"{'equal' if total == updates_sum else 'DIFFERENT'}")
    print(f"time: {elapsed:.1f} s; peak worker memory: {peaks}; spilled to disk at most: "
          f"{watch.spilled / 2**20:.0f} MiB")
    return 0 if total == updates_sum else 1


def _gib(text: str) -> float:
    from dask.utils import parse_bytes

    return parse_bytes(text)


if __name__ == "__main__":
    raise SystemExit(main())
