"""Memory stays flat over repeated calls, error paths included (a CI-sized scripts/leak_check.py).

A leak of one array, exception or C++ buffer per call would grow memory by at least hundreds of
bytes a call; the bounds below allow 8 bytes a call of interpreter noise (freelists, caches
that fill once) and catch anything bigger.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

import leak_check

CALLS = 6_000


@pytest.fixture(scope="module")
def figures():
    return leak_check.measure(CALLS, warmup=3_000, checkpoints=4)


def test_the_calls_cover_errors_and_every_entry_point():
    names = [name for name, _ in leak_check.call_kinds()]
    assert sum(name.startswith("error") for name in names) >= 10
    assert any(name.startswith("scatter") for name in names)
    assert any(name.startswith("gather") for name in names)
    assert any("set_num_threads" in name for name in names)


def test_python_objects_do_not_accumulate(figures):
    assert figures["traced_growth"] < 8 * CALLS, figures["series"]


@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="under AddressSanitizer freed memory waits in a quarantine of up to 256 MB: RSS says nothing",
)
def test_resident_memory_stays_flat(figures):
    # The second half only: the allocator settles during the first.
    assert figures["rss_growth_second_half"] < 8 * 2**20, figures["series"]
