"""The output cache: large result blocks that NumPy frees are kept and reused, within a limit."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import scatterx as sx
from scatterx import _core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cache needs glibc")

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _default_limit():
    sx.set_output_cache_limit(0)  # start empty
    sx.set_output_cache_limit(256 * MIB)
    yield
    sx.set_output_cache_limit(256 * MIB)


def _inputs(n=300_000, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(1000)
    indices = rng.integers(-1000, 1000, n)
    return data, indices


def test_a_freed_result_block_is_reused():
    data, indices = _inputs()
    first = sx.gather_elements(data, indices)  # 2.4 MB: through the cache
    address = first.ctypes.data
    np.testing.assert_array_equal(first, data[indices])
    del first
    assert _core.output_cache_bytes() >= 300_000 * 8
    second = sx.gather_elements(data, indices[::-1].copy())
    assert second.ctypes.data == address
    assert _core.output_cache_bytes() == 0
    np.testing.assert_array_equal(second, data[indices[::-1]])
    assert second.flags.owndata and second.flags.writeable and second.flags.c_contiguous


def test_small_results_do_not_use_it():
    data, indices = _inputs(1000)
    sx.gather_elements(data, indices)
    assert _core.output_cache_bytes() == 0


def test_limit_zero_frees_and_disables():
    data, indices = _inputs()
    sx.gather_elements(data, indices)
    assert _core.output_cache_bytes() > 0
    assert sx.set_output_cache_limit(0) == 0
    assert _core.output_cache_bytes() == 0
    sx.gather_elements(data, indices)
    assert _core.output_cache_bytes() == 0


def test_the_limit_bounds_what_is_kept():
    sx.set_output_cache_limit(3 * MIB)
    data, indices = _inputs(200_000)  # 1.6 MB results: only one fits under 3 MiB
    results = [sx.gather_elements(data, indices) for _ in range(4)]
    del results
    assert 0 < _core.output_cache_bytes() <= 3 * MIB


def test_cached_arrays_resize_pickle_and_scatter_results():
    data, indices = _inputs()
    result = sx.gather_elements(data, indices)
    want = data[indices]
    result.resize((600_000,), refcheck=False)  # realloc through the handler
    np.testing.assert_array_equal(result[:300_000], want)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(result))[:300_000], want)
    del result
    big = np.zeros((600, 600))
    rows = np.broadcast_to(np.arange(600)[::-1, None], (600, 600))
    for _ in range(3):
        got = sx.scatter_elements(big, rows, np.ones((600, 600)), reduction="add")
        np.testing.assert_array_equal(got, 1.0)
        gd, gu = sx.scatter_elements_vjp(got, big, rows, np.ones((600, 600)), 0, "mul")
        np.testing.assert_array_equal(gd, 1.0)


def test_threads_allocating_and_freeing_at_once():
    data, indices = _inputs(200_000)
    want = data[indices]
    errors = []

    def work():
        for _ in range(40):
            got = sx.gather_elements(data, indices)
            if not np.array_equal(got, want):
                errors.append("mismatch")
            del got

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError)])
def test_bad_limits(bad, error):
    with pytest.raises(error):
        sx.set_output_cache_limit(bad)


_ALIGNMENT_CHECK = """
import json
import mmap
import numpy as np
import scatterx as sx

rng = np.random.default_rng(0)
data = rng.standard_normal((5000, 64)).astype(np.float32)  # 1.28 MB results, rows of 256 bytes
rows = rng.integers(0, 5000, (40000, 1))
index = np.broadcast_to(rows, (40000, 64))
updates = rng.standard_normal((40000, 64)).astype(np.float32)
cols = np.arange(64)[None, :]
want_scatter = data.copy()
np.add.at(want_scatter, (index, cols), updates)  # in order, as scatterx adds
want_vjp = np.zeros_like(data)
np.add.at(want_vjp, (index, cols), updates)
offsets = {}
for limit in (256 << 20, 0):
    sx.set_output_cache_limit(limit)
    for _ in range(2):  # the second time from a block the cache kept, where it keeps any
        scattered = sx.scatter_elements(data, index, updates, 0, "add")
        gathered = sx.gather_elements(data, index, 0)
        grad = sx.gather_elements_vjp(updates, data.shape, index, 0)
        np.testing.assert_array_equal(scattered, want_scatter)
        np.testing.assert_array_equal(gathered, data[index, cols])
        np.testing.assert_array_equal(grad, want_vjp)
        offsets.setdefault(str(limit), []).extend(a.ctypes.data % mmap.PAGESIZE for a in (scattered, gathered, grad))
        del scattered, gathered, grad
print(json.dumps(offsets))
"""


def _report_with_own_mappings(script: str) -> dict:
    """The JSON that `script` prints last, run in a fresh process where every large block is a
    mapping of its own (as the benchmark's memory probe runs)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_large_results_start_on_a_page_boundary():
    # Where malloc's blocks start 16 bytes past a page (rows of 256 bytes then span five cache
    # lines), with the cache's limit on and at 0.
    offsets = _report_with_own_mappings(_ALIGNMENT_CHECK)
    assert offsets == {"268435456": [0] * 6, "0": [0] * 6}


_HUGE_PAGE_CHECK = """
import json
import mmap
import numpy as np
import scatterx as sx
from scatterx import _core

def advised(address):
    # Whether the mapping that holds `address` is marked for huge pages ("hg" in its VmFlags).
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside and head == "VmFlags:":
                return "hg" in line.split()[1:]
    raise AssertionError(hex(address))

PAGE = mmap.PAGESIZE

def first_page(a):  # the marked range starts at the first page boundary inside a block
    return (a.ctypes.data + PAGE) // PAGE * PAGE

following = _core.set_huge_pages(True)
indices = np.zeros((512, 1024), np.int64)
updates = np.ones((512, 1024), np.float32)
marked = {}
for on, rows in ((True, 1024), (False, 1536)):
    sx.set_output_cache_limit(0)  # drop kept blocks: the result is a new block of the cache's
    sx.set_output_cache_limit(256 << 20)
    _core.set_huge_pages(on)
    data = np.zeros((rows, 1024), np.float32)  # 4 and 6 MiB: as large as NumPy's own rule marks
    result = sx.scatter_elements(data, indices, updates, 0, "add")
    assert (result[0] == 512).all() and (result[1:] == 0).all()
    assert _core.output_cache_bytes() == 0
    marked[str(on)] = advised(first_page(result))
    del result
    assert _core.output_cache_bytes() > 0  # it was the cache's
own = np.empty((1024, 1024), np.float32)
print(json.dumps({"marked": marked, "following": following, "numpy": advised(first_page(own))}))
"""


@pytest.mark.skipif(
    not (os.path.exists("/sys/kernel/mm/transparent_hugepage") and os.path.exists("/proc/self/smaps")),
    reason="no transparent huge pages",
)
def test_large_results_are_marked_for_huge_pages_as_numpy_marks_its_own():
    # Every large block a mapping of its own, so that no block lands in memory that an earlier
    # array had marked.
    report = _report_with_own_mappings(_HUGE_PAGE_CHECK)
    assert report["marked"] == {"True": True, "False": False}
    # At import scatterx follows NumPy, whose own 4 MiB array is marked or not alike.
    assert report["following"] == report["numpy"]
