"""Element counts and byte offsets beyond 2**31: scatter and gather on a 3 GiB array.

Not part of CI (it needs about 7 GiB of free memory and a minute or two). Run once, from the
repository root::

    python scripts/huge.py

Every check compares against values written by hand at known positions; the rest of the array
must stay zero (counted with np.count_nonzero). Prints one line per step and "all checks passed".
"""

from __future__ import annotations

import sys
import time

import numpy as np

import scatterx as sx

N = 3 * 2**30 + 17  # elements (uint8): > 2**31, and byte offsets beyond 2**31 everywhere
NEED = 7 * 2**30


def available_memory() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def step(name: str, fn):
    t = time.perf_counter()
    result = fn()
    print(f"{name:70s} {time.perf_counter() - t:7.2f} s", flush=True)
    return result


def expect_index_error(fn) -> str:
    try:
        fn()
    except IndexError as e:
        return str(e)
    raise AssertionError("an out-of-bounds index did not raise IndexError")


def check_copy(data: np.ndarray, positions: np.ndarray, expected: dict) -> None:
    """A scatter into a new array: the 3 GiB copy of data, then three updates."""
    result = step("scatter max into a new array (3 GiB copy)",
                  lambda: sx.scatter_elements(data, positions[:3], np.full(3, 200, np.uint8), 0, "max"))
    assert result[0] == 200 and result[2**31 - 1] == 200 and result[2**31] == 200
    assert result[N - 1] == expected[N - 1]
    assert step("  count_nonzero of the copy", lambda: np.count_nonzero(result)) == len(expected)
    assert step("  the copy equals data elsewhere", lambda: np.array_equal(result[2**31 + 1 :], data[2**31 + 1 :]))


def main() -> None:
    free = available_memory()
    if free and free < NEED:
        sys.exit(f"huge.py needs about {NEED / 2**30:.0f} GiB of free memory, {free / 2**30:.1f} GiB available")
    print(f"data: {N:,} uint8 elements ({N / 2**30:.2f} GiB); 2**31 = {2**31:,}; threads {sx.get_num_threads()}")
    data = np.zeros(N, np.uint8)

    # 1-D, int64 indices past 2**31, negative ones counting from the far end.
    positions = np.array([0, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 2**30, N - 2, N - 1], dtype=np.int64)
    indices = np.concatenate([positions, positions[1:3] - N])  # -N + p is p
    updates = np.arange(1, len(indices) + 1, dtype=np.uint8)
    expected = {int(p): 0 for p in positions}
    for p, u in zip(indices, updates):
        p = int(p) + (N if p < 0 else 0)
        expected[p] = (expected[p] + int(u)) % 256
    step("scatter add in place, int64 indices up to N-1", lambda: sx.scatter_elements(data, indices, updates, 0, "add", out=data))
    for p, v in expected.items():
        assert data[p] == v, (p, data[p], v)
    assert step("  count_nonzero", lambda: np.count_nonzero(data)) == len(expected)

    got = step("gather, int64 indices", lambda: sx.gather_elements(data, indices, 0))
    np.testing.assert_array_equal(got, [expected[int(p) + (N if p < 0 else 0)] for p in indices])

    check_copy(data, positions, expected)  # its 3 GiB result is freed on return

    # Out-of-bounds values around the size and the 32-bit limits: IndexError, nothing written.
    for bad in (N, -N - 1, 2**32, 2**63 - 1):
        msg = expect_index_error(lambda bad=bad: sx.scatter_elements(
            data, np.array([5, bad]), np.array([9, 9], np.uint8), 0, "none", out=data))
        assert str(bad) in msg and data[5] == 0, msg
    print(f"{'IndexError for N, -N-1, 2**32, 2**63-1; nothing written':70s}")

    # A negative-stride view: index 0 is the last byte of the buffer.
    rev = data[::-1]
    step("scatter none in place through a reversed view", lambda: sx.scatter_elements(rev, np.array([0, 2**31 + 5]), np.array([77, 78], np.uint8), 0, "none", out=rev))
    assert data[N - 1] == 77 and data[N - 1 - (2**31 + 5)] == 78

    # 2-D: rows of 2**30 bytes. int32 indices whose products with the stride pass 2**31.
    rows = data[: 3 * (2**30 + 5)].reshape(3, -1)[:, : 2**30]  # row stride 2**30 + 5 bytes
    assert rows.strides[0] * 2 > 2**31
    idx0 = np.array([[2, 2, 1], [2, 0, 2]], dtype=np.int32)
    upd0 = np.array([[10, 11, 12], [13, 14, 15]], dtype=np.uint8)
    before = [int(rows[2, 0]), int(rows[2, 1]), int(rows[1, 2]), int(rows[0, 1]), int(rows[2, 2])]
    step("2-D scatter add along axis 0, int32 indices, row offsets > 2**31", lambda: sx.scatter_elements(rows, idx0, upd0, 0, "add", out=rows))
    assert int(rows[2, 0]) == (before[0] + 10 + 13) % 256
    assert int(rows[2, 1]) == (before[1] + 11) % 256 and int(rows[0, 1]) == (before[3] + 14) % 256
    assert int(rows[1, 2]) == (before[2] + 12) % 256 and int(rows[2, 2]) == (before[4] + 15) % 256
    idx1 = np.array([[2**30 - 1, 0], [5, 2**30 - 2], [2**30 - 1, -1]], dtype=np.int32)
    got = step("2-D gather along axis 1, int32 indices near 2**30", lambda: sx.gather_elements(rows, idx1, 1))
    np.testing.assert_array_equal(got, [[rows[0, -1], rows[0, 0]], [rows[1, 5], rows[1, -2]], [rows[2, -1], rows[2, -1]]])
    msg = expect_index_error(lambda: sx.gather_elements(rows, np.array([[3]], np.int32), 0))
    print(f"{'IndexError on the 2-D view: ' + msg[:40]:70s}")

    # Every other byte: element strides of 2, 1.6e9 elements, offsets to the end of the buffer.
    evens = data[::2]
    step("gather through a stride-2 view, last element", lambda: np.testing.assert_array_equal(
        sx.gather_elements(evens, np.array([len(evens) - 1, 2**30]), 0), [evens[-1], evens[2**30]]))
    print("all checks passed")


if __name__ == "__main__":
    main()
