"""Memory stays flat over many calls, error paths included: tracemalloc and RSS.

Cycles through a fixed list of calls (every reduction, numeric and string dtypes, ``out=``, in
place, and every kind of error: IndexError from the native bounds check and from uint64 indices,
TypeError, ValueError, bad set_num_threads), measures after a warm-up and again at the end.
tracemalloc sees Python objects and NumPy's array buffers; RSS also sees what the C++ core
allocates (the bounds-check scratch vectors, the thread pool's task objects).

Usage, from the repository root::

    python scripts/leak_check.py                # 100 000 calls
    python scripts/leak_check.py --calls 20000
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc

import ml_dtypes
import numpy as np

import scatterx as sx


def rss_bytes() -> int:
    """Resident set size from /proc (psutil when there is no /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


def call_kinds() -> list:
    """(name, zero-argument function) pairs; each function makes one public call."""
    rng = np.random.default_rng(0)
    f64 = rng.standard_normal((64, 48))
    idx = rng.integers(-64, 64, size=(80, 48))
    upd = rng.standard_normal((80, 48))
    big = rng.standard_normal((300, 300))
    big_idx = rng.integers(0, 300, size=(300, 300)).astype(np.int32)
    bf = f64.astype(ml_dtypes.bfloat16)
    words = np.array([f"w{i % 5}" for i in range(24)], dtype=object).reshape(4, 6)
    fixed = np.array(["ab", "c", "def"] * 4, dtype="U3").reshape(3, 4)
    out = np.empty_like(f64)
    in_place = f64.copy()
    oob = idx.copy()
    oob[40, 7] = 2**40
    huge_u = np.full((2, 48), 2**63 + 5, dtype=np.uint64)
    threads = sx.get_num_threads()

    def expect(exc, fn):
        def call():
            try:
                fn()
            except exc:
                return
            raise AssertionError(f"expected {exc.__name__}")

        return call

    kinds = [(f"scatter {r}", lambda r=r: sx.scatter_elements(f64, idx, upd, 0, r)) for r in ("none", "add", "mul", "max", "min")]
    kinds += [
        ("scatter bfloat16 add axis 1", lambda: sx.scatter_elements(bf, idx[:64, :20] % 48, bf[:, :20], 1, "add")),
        ("scatter threaded", lambda: sx.scatter_elements(big, big_idx, big, 0, "add")),
        ("scatter out=", lambda: sx.scatter_elements(f64, idx, upd, 0, "max", out=out)),
        ("scatter in place", lambda: sx.scatter_elements(in_place, idx, upd, 0, "none", out=in_place)),
        ("scatter list updates", lambda: sx.scatter_elements(f64[:4, :3], [[0, 1, 2]], [[1.0, 2.0, 3.0]], 0, "add")),
        ("scatter object strings", lambda: sx.scatter_elements(words, [[0, 1], [3, 3]], [["x", "y"], ["z", "q"]], 0, "add")),
        ("scatter U strings", lambda: sx.scatter_elements(fixed, [[2, 0, 1, 1]], np.array([["zzzz"] * 4]), 0, "add")),
        ("gather", lambda: sx.gather_elements(f64, idx, 0)),
        ("gather threaded", lambda: sx.gather_elements(big, big_idx, 1)),
        ("gather strings", lambda: sx.gather_elements(words, [[0, 5], [1, 1]], 1)),
        ("error: index out of bounds (native)", expect(IndexError, lambda: sx.scatter_elements(f64, oob, upd, 0, "add"))),
        ("error: index out of bounds (gather)", expect(IndexError, lambda: sx.gather_elements(f64, oob, 0))),
        ("error: uint64 above 2**63", expect(IndexError, lambda: sx.gather_elements(f64, huge_u, 0))),
        ("error: string index out of bounds", expect(IndexError, lambda: sx.gather_elements(words, [[9]], 0))),
        ("error: float indices", expect(TypeError, lambda: sx.scatter_elements(f64, idx.astype(float), upd))),
        ("error: dtype mismatch", expect(TypeError, lambda: sx.scatter_elements(f64, idx, upd.astype(np.float32)))),
        ("error: unknown reduction", expect(ValueError, lambda: sx.scatter_elements(f64, idx, upd, 0, "sum"))),
        ("error: complex max", expect(TypeError, lambda: sx.scatter_elements(f64.astype(complex), idx, upd.astype(complex), 0, "max"))),
        ("error: shape mismatch", expect(ValueError, lambda: sx.scatter_elements(f64, idx, upd[:, :3]))),
        ("error: axis", expect(ValueError, lambda: sx.gather_elements(f64, idx, 5))),
        ("error: rank 0", expect(ValueError, lambda: sx.gather_elements(np.float64(1.0), 0))),
        ("error: out read-only", expect(ValueError, lambda: sx.gather_elements(f64, idx, 0, out=np.broadcast_to(upd, upd.shape)))),
        ("error: garbage data", expect(TypeError, lambda: sx.scatter_elements(np.zeros(3, "M8[s]"), [0], [0]))),
        ("error: ragged list", expect(ValueError, lambda: sx.gather_elements([[1], [2, 3]], [[0]]))),
        ("set_num_threads", lambda: sx.set_num_threads(threads)),
        ("error: set_num_threads(0)", expect(ValueError, lambda: sx.set_num_threads(0))),
        ("error: set_num_threads('2')", expect(TypeError, lambda: sx.set_num_threads("2"))),
    ]
    return kinds


def measure(calls: int, warmup: int = 10_000, checkpoints: int = 10) -> dict:
    """Runs `calls` calls after `warmup` ones; returns memory figures."""
    kinds = call_kinds()
    fns = [fn for _, fn in kinds]

    def run(n, offset=0):
        for i in range(n):
            fns[(i + offset) % len(fns)]()

    run(warmup)
    gc.collect()
    tracemalloc.start()
    rss0 = rss_bytes()
    traced0, _ = tracemalloc.get_traced_memory()
    start = time.perf_counter()
    series = []
    step = calls // checkpoints
    for c in range(checkpoints):
        run(step, offset=c * step)
        gc.collect()
        traced, peak = tracemalloc.get_traced_memory()
        series.append((step * (c + 1), traced - traced0, rss_bytes() - rss0))
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "kinds": len(kinds),
        "calls": step * checkpoints,
        "seconds": elapsed,
        "series": series,
        "traced_growth": series[-1][1],
        "traced_peak_above_start": peak - traced0,
        "rss_growth": series[-1][2],
        "rss_growth_second_half": series[-1][2] - series[len(series) // 2 - 1][2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=10_000)
    args = parser.parse_args()
    r = measure(args.calls, args.warmup)
    print(f"{r['calls']:,} calls over {r['kinds']} call kinds (errors included) in {r['seconds']:.1f} s, "
          f"after {args.warmup:,} warm-up calls")
    print(f"{'calls':>10} {'tracemalloc growth':>20} {'RSS growth':>14}")
    for n, traced, rss in r["series"]:
        print(f"{n:>10,} {traced:>18,} B {rss / 1024:>11,.0f} KiB")
    print(f"tracemalloc: {r['traced_growth']:,} B net growth, peak {r['traced_peak_above_start']:,} B above start")
    print(f"RSS: {r['rss_growth'] / 1024:,.0f} KiB growth in all, {r['rss_growth_second_half'] / 1024:,.0f} KiB "
          "in the second half")


if __name__ == "__main__":
    main()
