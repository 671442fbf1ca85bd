"""max and min of float16 and bfloat16 on every pair of bit patterns (2^32 pairs per type).

scatterx decides a 16-bit max/min without converting to float32 where that is faster (float16:
``Arith16``'s ``OnBits`` in ``cpp/include/scatterx/types.h``). This checks the result of
``scatter_elements(..., reduction="max"/"min")`` for every (current, update) pair of bit
patterns against the rule computed by NumPy on the values widened to float32: the update
replaces the current value when it lies strictly beyond it, or when it is NaN and the current
value is not (ties, -0.0 against 0.0 included, keep the current bits). The test suite checks
each pattern against 17 partners (``test_16_bit_max_min_on_every_bit_pattern``); this is the
whole square, about two minutes per type.

Usage, from the repository root::

    python scripts/every_16bit_pair.py            # float16 and bfloat16, max and min
    python scripts/every_16bit_pair.py float16    # one type

The exit status is 1 when a pair differs.
"""

from __future__ import annotations

import sys
import time

import ml_dtypes
import numpy as np

import scatterx as sx

TYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
ROLLS = 256  # rotations of the 65536 patterns per call: 16.7 M pairs


def mismatches(dtype: np.dtype, reduction: str) -> int:
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    current_bits = np.tile(every, ROLLS)
    positions = np.arange(current_bits.size)
    bad = 0
    for first in range(0, 65536, ROLLS):
        update_bits = np.concatenate([np.roll(every, s) for s in range(first, first + ROLLS)])
        current, updates = current_bits.view(dtype), update_bits.view(dtype)
        got = sx.scatter_elements(current, positions, updates, axis=0, reduction=reduction)
        a, b = current.astype(np.float32), updates.astype(np.float32)
        with np.errstate(invalid="ignore"):
            beyond = b > a if reduction == "max" else b < a
        take = beyond | (np.isnan(b) & ~np.isnan(a))
        bad += int(np.count_nonzero(got.view(np.uint16) != np.where(take, update_bits, current_bits)))
    return bad


def main(argv: list[str]) -> int:
    names = argv or list(TYPES)
    failed = False
    for name in names:
        for reduction in ("max", "min"):
            start = time.perf_counter()
            bad = mismatches(TYPES[name], reduction)
            failed |= bad > 0
            print(f"{name} {reduction}: {bad} of 4294967296 pairs differ ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
