"""Many Python threads calling scatterx at once get exactly the serial results.

The native pool has one owner at a time; a second caller runs its work on its own thread, and
set_num_threads may change between calls. None of that may change a single bit of a result.

``python tests/test_concurrency.py`` prints the timing that shows the GIL is released during a
native call (not asserted: timings depend on the machine).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

import scatterx as sx

REDUCTIONS = ("none", "add", "mul", "max", "min")
DTYPES = (np.float64, np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8, np.complex64, np.bool_)


def _jobs(seed: int = 0, shape: tuple = (160, 256), length: int = 480) -> list:
    """Calls large enough for the multi-threaded kernels (>= 2 x 32768 elements of work: fibers
    times `length`, the indices' length along the axis), over dtypes, reductions and axes, each
    with many duplicate targets so that order matters."""
    rng = np.random.default_rng(seed)
    jobs = []
    for k, dtype in enumerate(DTYPES):
        for reduction in REDUCTIONS:
            if np.dtype(dtype).kind == "c" and reduction in ("max", "min"):
                continue
            axis = (k + len(jobs)) % 2
            data = rng.standard_normal(shape).astype(dtype)
            ishape = (length, shape[1]) if axis == 0 else (shape[0], length)
            indices = rng.integers(-data.shape[axis], data.shape[axis], size=ishape)
            updates = (rng.standard_normal(ishape) * 1.5).astype(dtype)
            jobs.append(("scatter", (data, indices, updates, axis, reduction)))
            if reduction == "none":
                jobs.append(("gather", (data, indices, axis)))
    strings = np.array([str(i % 7) for i in range(60)], dtype=object).reshape(6, 10)
    jobs.append(("scatter", (strings, np.array([[1, 0, 5, 5]] * 3), np.full((3, 4), "x", object), 1, "add")))
    jobs.append(("error", (np.zeros((50, 50)), np.full((50, 50), 50), np.ones((50, 50)), 0, "add")))
    return jobs


def _run(job):
    kind, args = job
    if kind == "scatter":
        return sx.scatter_elements(*args)
    if kind == "gather":
        return sx.gather_elements(*args)
    try:
        sx.scatter_elements(*args)
    except IndexError as e:
        return str(e)
    raise AssertionError("an out-of-bounds index did not raise")


def _same(a, b) -> bool:
    if isinstance(a, str) or a.dtype == object:
        return (a == b) if isinstance(a, str) else a.tolist() == b.tolist()
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(autouse=True)
def _restore_threads():
    before = sx.get_num_threads()
    yield
    sx.set_num_threads(before)


def test_threads_get_the_serial_results():
    jobs = _jobs()
    sx.set_num_threads(1)
    serial = [_run(job) for job in jobs]
    stop = threading.Event()

    def churn_thread_count():
        n = 0
        while not stop.is_set():
            sx.set_num_threads(1 + n % 4)
            n += 1
            time.sleep(0.0005)

    order = [i for _ in range(3) for i in range(len(jobs))]
    np.random.default_rng(1).shuffle(order)
    churner = threading.Thread(target=churn_thread_count)
    churner.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda i: (i, _run(jobs[i])), order))
    finally:
        stop.set()
        churner.join()
    for i, result in results:
        assert _same(result, serial[i]), f"job {i} ({jobs[i][0]}, {jobs[i][1][-1]!r}) differs from its serial result"


def _gradient_jobs(seed: int = 3) -> list:
    """Backward calls of each reduction (and of a gather) large enough to be cut into up to 18
    pieces, along an outer axis and the last, with duplicate targets and ties."""
    rng = np.random.default_rng(seed)
    jobs = []
    for axis in (0, 1):
        data = rng.integers(-3, 4, (400, 512)).astype(np.float32)
        ishape = (1200, 512) if axis == 0 else (400, 1500)
        indices = rng.integers(-data.shape[axis], data.shape[axis], size=ishape)
        updates = rng.integers(-3, 4, ishape).astype(np.float32)
        for reduction in REDUCTIONS:
            out = sx.scatter_elements(data, indices, updates, axis, reduction)
            grad = rng.standard_normal(out.shape).astype(np.float32)
            jobs.append(("scatter_vjp", (grad, data, indices, updates, axis, reduction)))
        jobs.append(("gather_vjp", (rng.standard_normal(ishape).astype(np.float32), data.shape, indices, axis)))
    return jobs


def _run_gradient(job):
    kind, args = job
    if kind == "scatter_vjp":
        return list(sx.scatter_elements_vjp(*args))
    return [sx.gather_elements_vjp(*args)]


@pytest.fixture(scope="module")
def serial_cut_jobs():
    """The jobs of the test below with their serial results, computed once for all its cases."""
    jobs, gradient_jobs = _jobs(shape=(400, 512), length=1200), _gradient_jobs()
    before = sx.get_num_threads()
    sx.set_num_threads(1)
    try:
        return jobs, gradient_jobs, [_run(job) for job in jobs], [_run_gradient(job) for job in gradient_jobs]
    finally:
        sx.set_num_threads(before)


@pytest.mark.parametrize("pieces", [1, 3, 8, 64])
@pytest.mark.parametrize("threads", [2, 3])
def test_results_do_not_depend_on_how_a_call_is_cut(pieces, threads, serial_cut_jobs):
    """A multi-threaded call is cut into pieces handed out as threads come free; how many, and
    which thread runs which, never changes a bit of a forward result or a gradient."""
    from scatterx import _core

    jobs, gradient_jobs, serial, serial_gradients = serial_cut_jobs
    sx.set_num_threads(threads)
    before = _core.set_pieces_per_thread(pieces)
    try:
        results = [_run(job) for job in jobs]
        gradients = [_run_gradient(job) for job in gradient_jobs]
    finally:
        _core.set_pieces_per_thread(before)
    for i, (result, expected) in enumerate(zip(results, serial)):
        assert _same(result, expected), f"job {i} ({jobs[i][0]}, {jobs[i][1][-1]!r}) differs with {pieces} pieces"
    for i, (got, expected) in enumerate(zip(gradients, serial_gradients)):
        for a, b in zip(got, expected):
            assert _same(a, b), f"gradient job {i} {gradient_jobs[i][0]} {gradient_jobs[i][1][-1]!r} differs"


def test_threads_writing_to_their_own_out_arrays():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((200, 300))
    indices = rng.integers(0, 200, size=(500, 300))
    updates = rng.standard_normal((500, 300))
    sx.set_num_threads(2)
    expected = sx.scatter_elements(data, indices, updates, 0, "add")
    outs = [np.full_like(data, np.nan) for _ in range(12)]

    def work(out):
        return sx.scatter_elements(data, indices, updates, 0, "add", out=out)

    with ThreadPoolExecutor(max_workers=6) as pool:
        returned = list(pool.map(work, outs))
    for out, r in zip(outs, returned):
        assert r is out
        assert out.tobytes() == expected.tobytes()


def test_in_place_calls_on_separate_arrays_in_many_threads():
    base = np.arange(100_000, dtype=np.int64).reshape(100, 1000)
    indices = np.tile(np.arange(99, -1, -1)[:, None], (1, 1000))
    expected = base[::-1] * 3
    arrays = [base.copy() for _ in range(8)]

    def work(a):
        return sx.scatter_elements(a, indices, a * 3, 0, "none", out=a)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, arrays))
    for a in arrays:
        np.testing.assert_array_equal(a, expected)


def gil_release_timing(seconds_of_work: float = 0.5) -> dict:
    """How much pure-Python work another thread gets done while a native call runs.

    With the GIL held the counter thread stalls for the whole call (the control: ``sorted``);
    released, it keeps counting at about its solo rate (on a machine with a free core).
    """
    rng = np.random.default_rng(0)
    n = 4_000_000
    data = np.zeros(n // 4)
    indices = rng.integers(0, n // 4, size=n)
    updates = rng.standard_normal(n)
    sx.set_num_threads(1)

    def native_call():
        return sx.scatter_elements(data, indices, updates, 0, "add")

    t = time.perf_counter()
    native_call()
    call_s = time.perf_counter() - t
    repeats = max(1, int(seconds_of_work / call_s))

    def count_for(stop):
        c = 0
        while not stop.is_set():
            c += 1
        return c

    # The control: list.sort runs in C and never lets go of the GIL.
    shuffled = rng.random(3_000_000).tolist()
    t = time.perf_counter()
    sorted(shuffled)
    sort_s = time.perf_counter() - t

    def counter_rate(during_calls, call=native_call, call_s=call_s) -> float:
        stop = threading.Event()
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("c", count_for(stop)))
        start = time.perf_counter()
        th.start()
        if during_calls:
            for _ in range(max(1, int(seconds_of_work / call_s))):
                call()
        else:
            time.sleep(repeats * call_s)
        stop.set()
        th.join()
        return box["c"] / (time.perf_counter() - start)

    solo = counter_rate(False)
    during = counter_rate(True)
    during_sort = counter_rate(True, lambda: sorted(shuffled), sort_s)

    def serial_then_parallel(threads: int) -> tuple:
        t = time.perf_counter()
        for _ in range(threads):
            native_call()
        serial_s = time.perf_counter() - t
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda _: native_call(), range(threads)))
        return serial_s, time.perf_counter() - t

    serial_s, parallel_s = serial_then_parallel(2)
    return {
        "one call (s)": call_s,
        "counter rate alone (1/s)": solo,
        "counter rate during native calls (1/s)": during,
        "counter rate during sorted(), GIL held (1/s)": during_sort,
        "2 calls one after another (s)": serial_s,
        "2 calls in 2 Python threads (s)": parallel_s,
    }


if __name__ == "__main__":
    for key, value in gil_release_timing().items():
        print(f"{key:46s} {value:,.3f}")
