"""The long fuzz run: at least a million calls of the public entry points.

It drives the case generator of ``tests/test_fuzz.py`` with plain seeds (case ``i`` comes from
``random.Random(seed + i)``), which is much faster than going through hypothesis, and checks each
case the same way: the right result, or the exception class the spec names, and unchanged inputs.

Usage, from the repository root::

    python scripts/fuzz_long.py --calls 1000000
    scripts/sanitize.sh --run python scripts/fuzz_long.py --calls 1000000   # under ASan + UBSan
    python scripts/fuzz_long.py --seed 1234 --cases 1                       # replay one case

A failing case prints its seed; the exit status is the number of failures (capped at 100).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import test_fuzz  # the generator and the checks live with the tests

import scatterx as sx


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000,
                        help="stop after this many calls of scatter_elements / gather_elements / set_num_threads as the case says "
                        "(the set_num_threads calls between repeats not counted)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first case")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this much time")
    parser.add_argument("--repeats", type=int, default=4,
                        help="run each case this many times, under other thread counts")
    parser.add_argument("--every", type=int, default=50_000, help="progress line every N calls")
    args = parser.parse_args(argv)

    threads = sx.get_num_threads()
    calls = cases = failures = set_threads = 0
    kinds = collections.Counter()
    start = time.perf_counter()
    next_report = args.every
    i = args.seed
    try:
        while calls - set_threads < args.calls and (args.cases is None or cases < args.cases):
            if args.minutes is not None and time.perf_counter() - start > 60 * args.minutes:
                break
            case = test_fuzz.make_case(random.Random(i))
            try:
                made, thread_calls = test_fuzz.check_case(case, args.repeats)
                calls += made
                set_threads += thread_calls
            except Exception:  # noqa: BLE001 -- every failure is reported with its seed, the run goes on
                failures += 1
                calls += 1
                print(f"FAIL seed={i} ({case.note})", file=sys.stderr)
                traceback.print_exc(limit=4)
            kinds[case.note] += 1
            cases += 1
            i += 1
            if calls - set_threads >= next_report:
                elapsed = time.perf_counter() - start
                print(f"{calls - set_threads:>10,} calls  {cases:>9,} cases  {elapsed:8.1f} s  {failures} failures", flush=True)
                next_report += args.every
    finally:
        sx.set_num_threads(threads)
    elapsed = time.perf_counter() - start
    print(f"done: {calls - set_threads:,} calls (+ {set_threads:,} set_num_threads) in {cases:,} cases (seeds {args.seed}..{i - 1}), {elapsed:.1f} s, "
          f"{(calls - set_threads) / max(elapsed, 1e-9):,.0f} calls/s, {failures} failures")
    for note, n in sorted(kinds.items()):
        print(f"  {n:>9,}  {note}")
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
