"""The engine of ``scatterx bench``: scatterx against its peers, in one table.

For every case (``_bench_cases``) and every implementation (``_bench_peers``) the engine
checks the result against scatterx's (that first call is the warm-up), then times at least
five samples; a sample repeats the call enough times to last `min_time` and reports the time of
one call; the figure is the median sample. The samples are taken in windows, one
implementation at a time, and the windows come in rounds (3 by default), so that the machine's
drift touches every implementation alike (`run_case`). Between scatterx's samples it times a large
``np.copyto``: the copy bandwidth of the machine at that moment, and from it the streaming
bound of the case, the time to move the bytes the operation must read and write (see
``_bench_cases.moved_bytes``). It probes the random-access floor of every case: how fast the
machine touches the case's own random targets, reading the values that move with them, and
nothing else (`probe_ways`), and, for one fiber whose adds must keep their order, how fast one
thread runs that loop of adds alone (`ordered_loop_run`) and how fast each of scatterx's threads
reads both of its streams whole (`streams_run`), all sampled between scatterx's samples as the
copy is. It also shows the peak memory of a scatterx call beyond its output, and the time that
``out=data`` saves. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import itertools
import json
import math
import mmap
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ._bench_cases import CASES, Case, Touches, build_inputs, index_bytes, moved_bytes, select, touches
from ._bench_peers import IMPLEMENTATIONS, Impl, Unsupported, _prepare_scatterx

_RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-2, "bfloat16": 8e-2}
_MEMORY_CASES = (
    "mp_add", "rows_none", "max0", "hist_add", "mid_mul", "mp_add_dense", "gather_mp", "gather_rows",
    "vjp_none", "vjp_add", "vjp_mul", "vjp_mul_long", "vjp_max", "vjp_gather",
)
_INPLACE_CASES = ("mp_add", "rows_none", "max0", "hist_add", "mid_mul")
_SETTLE = 0.25  # seconds of pause before a window of a later round (see `run_case`)


@dataclass
class Settings:
    quick: bool
    threads: int
    repeat: int
    min_time: float
    rounds: int = 1  # windows per implementation and case, taken in turn (see `run_case`)


@dataclass
class Timing:
    """The median time of one call (seconds), the samples it is the median of, and the median
    of each window's samples (see `Sampler`)."""

    median: float
    number: int
    samples: list[float]
    windows: list[float] = field(default_factory=list)


@dataclass
class ImplResult:
    status: str  # "ok", "skipped", "mismatch" or "error"
    note: str = ""
    ms: float | None = None
    number: int = 0
    samples_ms: list[float] = field(default_factory=list)
    windows_ms: list[float] = field(default_factory=list)  # the median of each window's samples


@dataclass
class CaseResult:
    name: str
    description: str
    moved_bytes: int
    bound_ms: float | None
    impls: dict[str, ImplResult]
    floor_ms: float | None = None  # the probe: the case's memory accesses alone (see `probe_floor`)
    loop_ms: float | None = None  # one ordered fiber: its loop of adds alone (see `ordered_loop`)
    # One ordered fiber: both its streams read whole by each of scatterx's threads (two at most),
    # alone (see `streams_run`): the least each thread of a split of the bins reads.
    reads_ms: float | None = None
    # The probe's fastest way in which several threads each apply a share of the targets (no
    # thread walks them all): what a kernel that does not keep a fiber on one thread can reach.
    shared_floor_ms: float | None = None
    # Which of the probe's ways gave each of those two (`ProbeWay.describe`), e.g. "2 threads,
    # targets, 32 ahead": which way of sharing the accesses set the floor.
    floor_way: str | None = None
    shared_floor_way: str | None = None
    bandwidth: float | None = None  # bytes/s of the copy timed between this case's samples
    steal: float | None = None  # share of the CPUs' time the host took while this case ran (`steal_share`)

    def peer_best(self) -> tuple[str, float] | None:
        peers = [(n, r.ms) for n, r in self.impls.items() if n != "scatterx" and r.status == "ok"]
        return min(peers, key=lambda p: p[1]) if peers else None

    @property
    def ours(self) -> float | None:
        r = self.impls.get("scatterx")
        return r.ms if r is not None and r.status == "ok" else None

    @property
    def speedup(self) -> float | None:
        best = self.peer_best()
        return best[1] / self.ours if best and self.ours else None

    @property
    def bound_ratio(self) -> float | None:
        return self.ours / self.bound_ms if self.ours and self.bound_ms else None

    @property
    def floor_ratio(self) -> float | None:
        return self.ours / self.floor_ms if self.ours and self.floor_ms else None

    @property
    def loop_ratio(self) -> float | None:
        return self.ours / self.loop_ms if self.ours and self.loop_ms else None

    @property
    def reads_ratio(self) -> float | None:
        return self.ours / self.reads_ms if self.ours and self.reads_ms else None

    def reads_note(self) -> str:
        """" (each thread reading both streams whole: R x bound)" where the run measured it."""
        if not self.reads_ms or not self.bound_ms:
            return ""
        return f" (each thread reading both streams whole: {_fmt(self.reads_ms / self.bound_ms)}x bound)"

    def held_by(self, floor_ms: float | None) -> bool:
        """Whether a measured floor keeps this case beyond 1.5x its bound: the floor alone
        takes longer than that, and scatterx is not faster than it (if it is, the measurement
        shows nothing about the case)."""
        return bool(self.ours) and self._beyond_line(floor_ms) and self.ours >= floor_ms

    def probe_beaten(self) -> float | None:
        """The slowest of the measured floor, ordered loop and fastest way of sharing the
        targets that took longer than 1.5x the bound but longer than scatterx too (so it shows
        no floor for this case); None if none, or if one of them took no longer than 1.5x the
        bound (it shows the line reachable).
        A case beyond the line with such a probe is counted as reachable, but its probes say
        neither that the bound is reachable nor that it is not."""
        measured = [ms for ms in (self.floor_ms, self.loop_ms, self.shared_floor_ms) if ms is not None]
        if not self.ours or not all(self._beyond_line(ms) for ms in measured):
            return None
        beaten = [ms for ms in measured if self.ours < ms]
        return max(beaten) if beaten else None

    def _beyond_line(self, ms: float | None) -> bool:
        """Whether `ms` exceeds 1.5x the streaming bound."""
        return ms is not None and self.bound_ms is not None and ms > 1.5 * self.bound_ms

    @property
    def bound_reachable(self) -> bool:
        """Whether the streaming bound may be met within 1.5x: not when touching the case's
        random targets (with the values that move with them) in its order already takes longer
        than that, nor, for one ordered fiber, when its loop of adds alone does (`held_by`) and
        the probe's fastest way of sharing its targets among threads holds too (the loop holds
        only a kernel that applies the whole fiber on one thread). Until stop 62 that way had
        only to take longer than 1.5x the bound; since then scatterx splits a histogram's
        targets between its threads, faster than that way of the probe, which then shows no
        floor for such a kernel."""
        shared_held = self.shared_floor_ms is None or self.held_by(self.shared_floor_ms)
        return not (self.held_by(self.floor_ms) or (self.held_by(self.loop_ms) and shared_held))

    def windows_won(self) -> tuple[int, int] | None:
        """In how many of the windows (by round) scatterx's median was below the best peer's,
        and of how many; None with fewer than two windows."""
        best = self.peer_best()
        ours = self.impls.get("scatterx")
        if best is None or ours is None or len(ours.windows_ms) < 2:
            return None
        theirs = self.impls[best[0]].windows_ms
        return sum(a < b for a, b in zip(ours.windows_ms, theirs)), min(len(ours.windows_ms), len(theirs))

    @property
    def failed(self) -> bool:
        return any(r.status in ("mismatch", "error") for r in self.impls.values())


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- measuring -------------------------------------------------------------------------------


def _sample(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def _calls_per_sample(fn, min_time: float, first: float | None) -> int:
    """How many calls make a sample of at least `min_time`; the calls made here warm up.

    `first` is the duration of a call already made (the correctness check), which then serves
    as the warm-up of a slow call.
    """
    number, elapsed = 1, first
    if elapsed is None:
        elapsed = _sample(fn, number)
    while elapsed < min_time:
        per_call = max(elapsed / number, 1e-9)
        number = max(number * 2, min(math.ceil(1.2 * min_time / per_call), number * 100))
        elapsed = _sample(fn, number)
    return number


class Sampler:
    """Samples of callables timed in turn, gathered over one or more windows of time.

    A window takes `count` samples of each callable, in turn, so that a change of load on the
    machine affects them alike; a sample repeats the call so that it lasts at least `min_time`
    (a 3x3 call is timed over thousands of calls). The first window settles how many calls make
    a sample, which warms the callables up (`first` may give, by key, the duration of a call
    already made: see `_calls_per_sample`); a later window starts with one untimed call of each,
    since what ran between the windows has pushed their arrays out of the cache. Within a
    window, each sample of many calls starts after one untimed call when several callables are
    sampled in turn, for the same reason.
    """

    def __init__(self, fns: dict, min_time: float, first: dict | None = None):
        self.fns = fns
        self.min_time = min_time
        self.first = first or {}
        self.numbers: dict | None = None
        self.samples: dict = {k: [] for k in fns}
        self.sizes: list[int] = []  # samples per window, in order

    def window(self, count: int) -> None:
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            if self.numbers is None:
                self.numbers = {
                    k: _calls_per_sample(fn, self.min_time, self.first.get(k)) for k, fn in self.fns.items()
                }
            else:
                for fn in self.fns.values():
                    fn()
            for _ in range(count):
                for k, fn in self.fns.items():
                    if self.numbers[k] > 1 and len(self.fns) > 1:
                        fn()
                    self.samples[k].append(_sample(fn, self.numbers[k]) / self.numbers[k])
            self.sizes.append(count)
        finally:
            if enabled:
                gc.enable()

    def timings(self) -> dict[str, Timing]:
        """For each callable, the median of all its samples so far, and of each window's."""
        ends = list(itertools.accumulate(self.sizes))
        return {
            k: Timing(statistics.median(v), self.numbers[k], v,
                      [statistics.median(v[end - n:end]) for n, end in zip(self.sizes, ends)])
            for k, v in self.samples.items()
        }


def time_calls(fns: dict, min_time: float, repeat: int, first: dict | None = None) -> dict[str, Timing]:
    """For each callable, the median over `repeat` samples of the time of one call, after a
    warm-up: the samples of one window of a `Sampler`."""
    sampler = Sampler(fns, min_time, first)
    sampler.window(repeat)
    return sampler.timings()


def window_sizes(repeat: int, rounds: int) -> list[int]:
    """`repeat` samples dealt out to `rounds` windows, as evenly as they go (7 over 3: 3, 2, 2)."""
    if not 1 <= rounds <= repeat:
        raise ValueError(f"rounds must be between 1 and the number of samples ({repeat}), got {rounds}")
    return [repeat // rounds + (k < repeat % rounds) for k in range(rounds)]


def time_call(fn, min_time: float, repeat: int, first: float | None = None) -> Timing:
    """`time_calls` of one callable."""
    return time_calls({"fn": fn}, min_time, repeat, {"fn": first})["fn"]


class Copier:
    """``np.copyto`` of an array of `nbytes`: what the copy bandwidth is measured with."""

    def __init__(self, nbytes: int):
        self.src = np.ones(nbytes // 8)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)

    @property
    def moved(self) -> int:
        """Bytes read plus bytes written by one copy."""
        return 2 * self.src.nbytes

    def __call__(self) -> None:
        np.copyto(self.dst, self.src)


def copy_bandwidth(copier: Copier, repeat: int) -> float:
    """Bytes moved per second (read plus written) by `copier`, median of `repeat` copies."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        copier()
        times.append(time.perf_counter() - start)
    return copier.moved / statistics.median(times)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fiuV" else a


def compare(case: Case, exact: bool, ours: tuple[np.ndarray, ...], theirs: tuple[np.ndarray, ...]):
    """None when `theirs` agrees with `ours` (bitwise if `exact`); otherwise a message saying what differs."""
    if len(ours) != len(theirs):
        return f"{len(theirs)} results instead of {len(ours)}"
    for k, (a, b) in enumerate(zip(ours, theirs)):
        which = f"result {k}: " if len(ours) > 1 else ""
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{which}{b.dtype}{b.shape} instead of {a.dtype}{a.shape}"
        if exact:
            differ = _bits(a) != _bits(b)
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            rtol = _RTOL[case.dtype]
            scale = float(np.mean(np.abs(a64[np.isfinite(a64)]))) if a64.size else 0.0
            differ = ~np.isclose(b64, a64, rtol=rtol, atol=rtol * scale, equal_nan=True)
        if differ.any():
            first = np.unravel_index(int(np.argmax(differ)), differ.shape)
            kind = "bitwise" if exact else f"beyond rtol {_RTOL[case.dtype]}"
            return (
                f"{which}{int(differ.sum())} of {differ.size} elements differ {kind}; first at "
                f"{tuple(int(i) for i in first)}: scatterx {a[first]!r}, peer {b[first]!r}"
            )
    return None


# Prefetch distances the probe tries, in accesses. 0 asks for none, and then a walk by ranges
# that reads one line per access reads its positions by vector gathers where the CPU has
# AVX-512F (probe.h, TouchRange::gathered; since stop 60) or AVX2 (gathered_avx2; since stop 67).
_PROBE_AHEAD = (0, 8, 32, 128)
_HUGE_PAGE = 2 << 20  # bytes of a transparent huge page on x86-64


def pages_of_their_own(nbytes: int) -> np.ndarray:
    """`nbytes` ones (uint8) on pages of their own: the probe's table and stream.

    Ones: pages never written are mapped, when only read, to the kernel's one zero page, so a
    probe that reads its table and never writes it (a gather's, the backward of add, max and
    min) would read the same page over and over (stop 53). Of their own: where the system has
    private anonymous mappings, a mapping of their own, from a 2 MB boundary, wholly marked
    for transparent huge pages where Linux offers them. An `np.ones` array of a case's size
    lay about 80 % on huge pages (NumPy marks from the first page boundary inside, and its
    ends are not whole huge pages), as the case's own data did; wholly on them the probe ran
    faster for the cases of single random elements. Stop 56, the Zen 3 machine, one process,
    five rounds of medians of seven: `gather_max0`'s probe 13.56 -> 9.75 ms (32 ahead),
    `max0`'s 13.75 -> 11.64, scatterx 10.57 and 17.47 ms beside them (why the last fifth
    weighs so much was not pinned down); the ways of the message-passing cases, whose
    accesses are whole rows, did not change. Smaller than a huge page, or without such
    mappings: np.ones.
    """
    private, anonymous = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if nbytes < _HUGE_PAGE or private is None or anonymous is None:
        return np.ones(nbytes, np.uint8)
    # Room for whole huge pages from the first boundary on, the last one included.
    pages = (nbytes + _HUGE_PAGE - 1) // _HUGE_PAGE
    mapping = mmap.mmap(-1, (pages + 1) * _HUGE_PAGE, flags=private | anonymous)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        mapping.madvise(mmap.MADV_HUGEPAGE)
    whole = np.frombuffer(mapping, np.uint8)  # keeps the mapping alive
    start = -whole.ctypes.data % _HUGE_PAGE
    own = whole[start : start + nbytes]
    own[...] = 1
    return own


@dataclass(frozen=True)
class ProbeWay:
    """One configuration of the probe: `threads` sharing the accesses by `split` (one of
    `Touches.splits`, or "ranges" on one thread), each prefetching `ahead` accesses ahead (0:
    none, see `_PROBE_AHEAD`)."""

    threads: int
    split: str
    ahead: int

    @property
    def shared(self) -> bool:
        """Whether several threads each apply a share of the targets (no thread walks them all:
        a second thread that only reads ahead, "reader", shares nothing)."""
        return self.threads > 1 and self.split != "reader"

    def describe(self) -> str:
        ahead = f"{self.ahead} ahead" if self.ahead else "none ahead"
        return f"{self.threads} thread{'s' if self.threads > 1 else ''}, {self.split}, {ahead}"


@dataclass(frozen=True)
class ProbeFloor:
    """What `probe_floor` measured: the fastest way and the fastest shared way (`ProbeWay`),
    each with its median time in ms; None where there was none."""

    ms: float | None = None
    way: ProbeWay | None = None
    shared_ms: float | None = None
    shared_way: ProbeWay | None = None


def probe_ways(t: Touches | None, settings: Settings) -> dict[ProbeWay, Callable[[], object]]:
    """The probe's configurations (`ProbeWay`) for a case's memory accesses `t` alone
    (``_bench_cases.touches``; none for None, the latency cases), each a callable that does
    them once: `probe_floor` times them alone, `run_case` beside scatterx's samples.

    The same target positions in the same order, one byte per cache line, read or read and
    stored back, without index checks or arithmetic (``_core.touch``), while the values that
    move in sequence with them (one per index: updates read, gathered elements written, ...,
    `Touches.stream_bytes`; the positions, as wide as the index, stand for it) go in step:
    read one byte per line, or, where the kernel writes them (`Touches.stream_written`), written
    in full by streaming stores as a large call's kernel writes them (on the Zen 3 machine a
    read of each line cost more than that). On one thread, and on scatterx's threads shared out
    in each of the ways a kernel may share them (`Touches.splits`: contiguous ranges of the
    positions, except for fibers of float adds or products, which must keep their order), each
    prefetched at each of `_PROBE_AHEAD` (a walk by ranges asks for its positions and the stream
    it reads a fixed distance ahead as well, as the kernels ask for theirs: probe.h,
    kProbeStreamAheadBytes, since stop 59): the fastest of these. A case whose kernel must pass
    over its targets twice (`Touches.passes`: the backward of max, min and mul) has both passes
    in each call, block by block (`Touches.block`). The streaming bound counts every
    byte once; a random access moves a whole line, fetched again (and, when written, stored
    again) each time if the table exceeds the cache.
    This is a measurement, not a proof: an algorithm that brings a dense region in whole, or
    that first reorders the updates (a partitioning pass), can beat it -- which is why a case
    counts as out of reach only when scatterx itself is not faster than the probe (`targets`).
    """
    import scatterx as sx

    from . import _core

    if t is None:
        return {}
    # Ones on pages of their own, in the table as in the stream (stop 53: gather_max0's 12.8 MB
    # table of zeros left the process's resident memory 0.1 MB larger after the probe had read
    # every line of it; until then its table was zeros; stop 56: on huge pages).
    table = pages_of_their_own(t.table_bytes)
    stream = pages_of_their_own(t.stream_bytes)

    second = t.then
    if second is not None and (second.then is not None or second.positions is not t.positions):
        raise ValueError("the probe takes at most two passes, over the same positions")
    # The second pass, when there is one, goes in the same call (block by block).
    then = () if second is None else (second.write, second.stream_written, t.block)

    def probe(way: ProbeWay):
        # The checked part of the stream, for the split that reads it by ranges; the fibers of a
        # row of positions, for the split that shares them.
        extra = {"checked": t.checked_bytes} if way.split == "checked" else {}
        if way.split == "columns":
            extra = {"fibers": t.fibers}

        # Its own thread count for the call, and scatterx's again after it: its samples come in
        # turn with scatterx's (`run_case`).
        def run():
            sx.set_num_threads(way.threads)
            try:
                _core.touch(table, t.positions, t.span, t.write, way.ahead, stream, way.split, t.stream_written,
                            *then, **extra)
            finally:
                sx.set_num_threads(settings.threads)
        return run

    shares = [(1, "ranges")] + ([(settings.threads, split) for split in t.splits] if settings.threads > 1 else [])
    return {way: probe(way) for way in (ProbeWay(n, split, a) for n, split in shares for a in _PROBE_AHEAD)}


def floor_of(medians: dict[ProbeWay, float]) -> ProbeFloor:
    """The least of the probe's median times (ms, by way), and the least of the ways in which
    several threads each take a share of the targets (None with one thread), each with the way
    that gave it: ``CaseResult.floor_ms`` and ``CaseResult.shared_floor_ms``, ``floor_way`` and
    ``shared_floor_way``. An empty `ProbeFloor` for no medians."""
    if not medians:
        return ProbeFloor()
    way = min(medians, key=medians.__getitem__)
    shared = [w for w in medians if w.shared]
    shared_way = min(shared, key=medians.__getitem__) if shared else None
    return ProbeFloor(medians[way], way, medians[shared_way] if shared_way else None, shared_way)


def probe_floor(t: Touches | None, settings: Settings) -> ProbeFloor:
    """`floor_of` the probe's ways (`probe_ways`) for the accesses `t`, timed alone: one window
    of `settings.repeat` samples each. A run times them beside scatterx's samples instead
    (`run_case`)."""
    ways = probe_ways(t, settings)
    timings = time_calls(ways, settings.min_time, settings.repeat) if ways else {}
    return floor_of({way: 1e3 * timing.median for way, timing in timings.items()})


# Positions and values of an ordered fiber that `ordered_loop` applies over and over: 1024 of
# each (16 KB of int64 and float64) stay in L1 once read.
_LOOP_STRETCH = 1024


def ordered_loop(case: Case, inputs, t: Touches | None, settings: Settings) -> float | None:
    """The median time (ms) of `ordered_loop_run`, timed alone (one window of `settings.repeat`
    samples); None where it gives no loop. A run times it beside scatterx's samples instead
    (`run_case`)."""
    run = ordered_loop_run(case, inputs, t)
    return None if run is None else 1e3 * time_call(run, settings.min_time, settings.repeat).median


def ordered_loop_run(case: Case, inputs, t: Touches | None) -> Callable[[], object] | None:
    """A callable in which one thread applies the adds of an ordered fiber, memory aside (`t`:
    the case's accesses, ``_bench_cases.touches``).

    SPEC section 2 orders the adds of each target of one fiber of float adds (`Touches.ordered`,
    one element per access: a 1-D histogram), so a kernel that keeps the fiber on one thread (as
    scatterx does) takes no less time than that loop, whatever it overlaps with it; a kernel
    that splits the targets between threads is measured by the probe instead
    (`CaseResult.shared_floor_ms`). ``_core.ordered_adds`` runs it alone: the first
    `_LOOP_STRETCH` positions and updates of the case, in L1 once read, applied over and over
    until there have been as many adds as the case has, into a copy of data, without index
    checks. Its table's lines are those of 1024 targets at most, where the case's are spread
    over all of data: the loop's work with the least memory traffic it can have, a floor
    beside the probe's (`CaseResult.held_by`). None for other cases, and for products (repeated,
    they would drift into subnormal values, whose arithmetic is slower) and types other than
    float32 and float64.
    """
    from . import _core

    item = inputs.data.dtype.itemsize
    # One element per access: a fiber of rows (message passing) is shared by columns or rows.
    if (t is None or not t.ordered or t.span != item or case.reduction != "add"
            or inputs.data.dtype not in (np.float32, np.float64)):
        return None
    positions = np.ascontiguousarray(t.positions[:_LOOP_STRETCH] // item)
    values = np.ascontiguousarray(inputs.updates.reshape(-1)[:_LOOP_STRETCH])
    table = inputs.data.reshape(-1).copy()
    count = t.positions.size
    return lambda: _core.ordered_adds(table, positions, values, count)


def streams_run(case: Case, inputs, t: Touches | None) -> Callable[[], object] | None:
    """A callable in which each of scatterx's threads (two at most, as many as split a fiber's
    bins) reads the index and the updates of a case of one ordered fiber (a 1-D histogram) whole,
    alone (``_core.read_streams``; probe.h, read_streams_whole), as scatterx's split by targets
    walks them; None for other cases.

    A kernel that splits the bins between threads has each of them read every index, to find its
    own, and every line of the updates, on which its own lie; one that keeps the fiber on one
    thread reads both streams there. Either reads what this walk reads, and lists and adds on top
    of it. It is a measurement, not a proof (a kernel may read the same lines faster), and a kernel
    whose threads handed each other what they read would read each stream once, so no verdict
    rests on it: the run shows it beside the cases beyond the line (`CaseResult.reads_note`).
    """
    from . import _core

    item = inputs.data.dtype.itemsize
    if t is None or not t.ordered or t.span != item or inputs.data.ndim != 1:
        return None
    index = np.ascontiguousarray(inputs.expanded_indices()).reshape(-1)
    updates = np.ascontiguousarray(inputs.updates).reshape(-1)
    return lambda: _core.read_streams(index, updates)


def run_case(case: Case, impls: list[Impl], settings: Settings, copier: Copier | None = None,
             bandwidth: float | None = None) -> CaseResult:
    """Checks and times every implementation on `case` (scatterx first: it is the reference).

    scatterx's samples alternate with samples of `copier`'s copy, whose bandwidth gives the
    case's streaming bound (or `bandwidth`, given, without a copier): the two figures of the
    ratio come from the same moment of a machine whose bandwidth drifts. The implementations
    are timed in windows, each alone in its window: sampled in turn call by call, every
    implementation ran slower after onnxruntime's (its threads keep spinning after a run
    returns; on 2 cores, a quick `mp_add` took scatterx 0.32 ms alone and 0.92 ms in turn with
    onnxruntime). With `settings.rounds` above one, the windows come in rounds: scatterx's,
    then each peer's, then scatterx's again, and so on, the samples dealt out to them by
    `window_sizes`, so that the machine's drift over the case's time touches every
    implementation alike; a figure is the median of all its samples. The yardsticks that tell
    whether the bound is reachable, the probe's ways (`probe_ways`) and a fiber's ordered loop
    (`ordered_loop_run`), are sampled in turn with scatterx's samples too, as the copy is, so
    that scatterx and the floor it is held against come from the same moments (until stop 55
    they were timed after every implementation's windows, alone: the labels that compare them,
    `CaseResult.held_by` and `probe_beaten`, then compared two moments of the machine).
    """
    inputs = build_inputs(case, settings.quick)
    nbytes = moved_bytes(case, inputs)
    result = CaseResult(case.name, case.describe(settings.quick), nbytes, None, {})
    # The yardsticks of the case's bound, sampled in turn with scatterx's samples: the probe's
    # ways and the ordered loop (and the copy, when given).
    accesses = touches(case, inputs)  # once: for a 1-D histogram, 80 MB of positions in 0.7 s
    yardsticks: dict = dict(probe_ways(accesses, settings))
    loop = ordered_loop_run(case, inputs, accesses)
    if loop is not None:
        yardsticks["loop"] = loop
    reads = streams_run(case, inputs, accesses)
    if reads is not None:
        yardsticks["reads"] = reads
    del accesses, loop, reads
    yardstick_ms: dict = {}
    sizes = window_sizes(settings.repeat, settings.rounds)
    samplers: dict[str, Sampler] = {}  # by implementation, in the order of `impls`
    reference = None
    for impl in impls:
        absent = impl.missing()
        if absent:
            result.impls[impl.name] = ImplResult("skipped", f"{absent} is not installed")
            continue
        try:
            prepared = impl.prepare(case, inputs, settings.threads)
            start = time.perf_counter()
            first = prepared.run()
            first_time = time.perf_counter() - start
            arrays = prepared.to_numpy(first)
            del first
        except Unsupported as exc:
            result.impls[impl.name] = ImplResult("skipped", str(exc))
            continue
        except Exception as exc:  # a peer failing on a case it claims is a finding, not a skip
            result.impls[impl.name] = ImplResult("error", f"{type(exc).__name__}: {exc}")
            _progress(f"    ERROR {impl.name}: {type(exc).__name__}: {exc}")
            continue
        if impl.name == "scatterx":
            reference = arrays
        elif reference is not None:
            exact = case.check == "exact" or impl.sequential
            mismatch = compare(case, exact, reference, arrays)
            if mismatch:
                result.impls[impl.name] = ImplResult("mismatch", mismatch)
                _progress(f"    MISMATCH {impl.name}: {mismatch}")
                continue
        del arrays
        runs = {"impl": prepared.run}
        if impl.name == "scatterx" and case.has_bound:
            if copier is not None:
                runs["copy"] = copier
            runs.update(yardsticks)
        samplers[impl.name] = Sampler(runs, settings.min_time, {"impl": first_time})
        samplers[impl.name].window(sizes[0])
        result.impls[impl.name] = ImplResult("ok")  # its place in the row; figures below
        del prepared, runs
    for count in sizes[1:]:
        for sampler in samplers.values():
            if len(samplers) > 1:
                # The window before was another implementation's, whose threads may still spin
                # (PyTorch's for a few ms, onnxruntime's for up to 0.2 s: docs/performance.md).
                time.sleep(_SETTLE)
            sampler.window(count)
    for name, sampler in samplers.items():
        timings = sampler.timings()
        if "copy" in timings:
            bandwidth = copier.moved / timings["copy"].median
        yardstick_ms.update({k: 1e3 * timings[k].median for k in yardsticks if k in timings})
        timing = timings["impl"]
        entry = result.impls[name]
        entry.ms, entry.number = 1e3 * timing.median, timing.number
        entry.samples_ms = [1e3 * x for x in timing.samples]
        entry.windows_ms = [1e3 * x for x in timing.windows]
    del samplers
    if case.has_bound and bandwidth:
        result.bandwidth = bandwidth
        result.bound_ms = 1e3 * nbytes / bandwidth
    if yardsticks and not yardstick_ms:
        # scatterx did not run: the yardsticks alone.
        timings = time_calls(yardsticks, settings.min_time, settings.repeat)
        yardstick_ms = {k: 1e3 * timing.median for k, timing in timings.items()}
    del yardsticks
    floor = floor_of({k: ms for k, ms in yardstick_ms.items() if isinstance(k, ProbeWay)})
    result.floor_ms, result.shared_floor_ms = floor.ms, floor.shared_ms
    result.floor_way = floor.way.describe() if floor.way else None
    result.shared_floor_way = floor.shared_way.describe() if floor.shared_way else None
    result.loop_ms = yardstick_ms.get("loop")
    result.reads_ms = yardstick_ms.get("reads")
    ours = result.impls.get("scatterx")
    if ours is not None and ours.status == "ok" and result.peer_best() is None:
        ours.note = "unchecked: no peer ran this case"
    return result


def inplace_check(case: Case, settings: Settings) -> dict:
    """Times a scatterx call with a new output, with ``out=data``, and a copy of data alone."""
    import scatterx as sx

    inputs = build_inputs(case, settings.quick)
    # The index as the case's own timing passes it (a stride-0 view where it is expanded).
    d, i, u = inputs.data, inputs.expanded_indices(), inputs.updates
    expected = sx.scatter_elements(d, i, u, case.axis, case.reduction)
    buffer = d.copy()
    got = sx.scatter_elements(buffer, i, u, case.axis, case.reduction, out=buffer)
    if got is not buffer or not np.array_equal(_bits(got), _bits(expected)):
        raise AssertionError(f"{case.name}: scatter_elements(out=data) differs from the new-output call")
    target = np.empty_like(d)
    times = time_calls(
        {
            "new_output": lambda: sx.scatter_elements(d, i, u, case.axis, case.reduction),
            "out_data": lambda: sx.scatter_elements(buffer, i, u, case.axis, case.reduction, out=buffer),
            "copy_data": lambda: np.copyto(target, d),
        },
        settings.min_time, settings.repeat,
    )
    return {"case": case.name, **{k: 1e3 * t.median for k, t in times.items()}}


# -- memory ----------------------------------------------------------------------------------


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"no {field_name} in /proc/self/status")


def peak_extra(run, output_bytes: int) -> dict:
    """Peak memory of one call of `run` beyond `output_bytes`, seen two ways.

    "numpy_extra_bytes": the peak of the allocations that tracemalloc sees (NumPy reports its
    arrays to it). "rss_extra_bytes": the peak resident set during the call minus the one
    before (Linux: ``/proc/self/clear_refs`` resets the peak, ``VmHWM`` reads it), which also
    sees native allocations; None where the peak cannot be reset.
    """
    import tracemalloc

    report = {}
    gc.collect()
    try:
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        result = run()
        report["rss_extra_bytes"] = 1024 * (_status_kib("VmHWM") - before) - output_bytes
        del result
    except OSError:
        report["rss_extra_bytes"] = None
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = run()
        report["numpy_extra_bytes"] = tracemalloc.get_traced_memory()[1] - base - output_bytes
    finally:
        tracemalloc.stop()
    del result
    return report


def memory_probe(name: str, quick: bool, threads: int) -> dict:
    """`peak_extra` of one scatterx call of case `name`, after a warm-up call.

    Run it in a fresh process (``memory_subprocess``), so that earlier work does not leave
    freed pages that the call could reuse unseen.
    """
    import scatterx as sx

    case = next(c for c in CASES if c.name == name)
    inputs = build_inputs(case, quick)
    run = _prepare_scatterx(case, inputs, threads).run
    output_bytes = sum(a.nbytes for a in _as_arrays(run()))
    # Outputs handed out again from the output cache are resident before the call, so the
    # resident set minus the outputs would hide as much of anything else: with the cache
    # emptied and kept empty, every measured call's outputs are fresh pages.
    sx.set_output_cache_limit(0)
    arrays = (inputs.data, inputs.updates, inputs.grad)
    return {
        "case": name,
        "output_bytes": output_bytes,
        # The index as the call is handed it (a stride-0 view where it is expanded).
        "input_bytes": index_bytes(inputs) + sum(a.nbytes for a in arrays if a is not None),
        **peak_extra(run, output_bytes),
    }


def _as_arrays(result) -> tuple[np.ndarray, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


def memory_subprocess(names: list[str], quick: bool, threads: int) -> list[dict]:
    """`memory_probe` of each case, one after the other, in one fresh Python process."""
    # A fixed mmap threshold makes every large allocation a fresh mapping, unmapped when freed,
    # so that it shows in the resident set instead of reusing pages freed by earlier work.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536")
    code = (
        "import json, sys; from scatterx._bench import memory_probe; "
        "print(json.dumps([memory_probe(n, sys.argv[1] == 'quick', int(sys.argv[2])) for n in sys.argv[3:]]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "quick" if quick else "full", str(threads), *names],
        capture_output=True, text=True, env=env, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory probe of {', '.join(names)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- reporting -------------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if x < 0:
        return "-" + _fmt(-x, digits)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(x)))
    return f"{x:.{decimals}f}"


def _cell(r: ImplResult | None) -> str:
    if r is None:
        return ""
    return {"ok": _fmt(r.ms), "skipped": "-", "mismatch": "WRONG", "error": "ERROR"}[r.status]


def geometric_mean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def format_table(results: list[CaseResult], names: list[str]) -> str:
    head = ["case", "operation", *names, "best peer", "speedup", "bound", "x bound", "floor", "x floor"]
    rows = []
    for r in results:
        best = r.peer_best()
        rows.append([
            r.name, r.description, *(_cell(r.impls.get(n)) for n in names),
            best[0] if best else "-",
            f"{_fmt(r.speedup)}x" if r.speedup else "-",
            _fmt(r.bound_ms), f"{_fmt(r.bound_ratio)}x" if r.bound_ratio else "-",
            _fmt(r.floor_ms), f"{_fmt(r.floor_ratio)}x" if r.floor_ratio else "-",
        ])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    left = {0, 1, len(head) - 6}

    def line(cells):
        return "  ".join(
            str(c).ljust(w) if k in left else str(c).rjust(w) for k, (c, w) in enumerate(zip(cells, widths))
        )

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _notes(results: list[CaseResult], names: list[str]) -> list[str]:
    notes, seen = [], set()
    for r in results:
        for name in names:
            res = r.impls.get(name)
            if res is None or not res.note:
                continue
            if res.note.endswith("is not installed"):
                key = (name, res.note)
                if key in seen:
                    continue
                seen.add(key)
                notes.append(f"{name}: {res.note} (its column is empty)")
            else:
                status = "" if res.status == "ok" else f"{res.status}: "
                notes.append(f"{r.name} / {name}: {status}{res.note}")
    return notes


def format_memory(memory: list[dict]) -> str:
    lines = [
        "Peak memory of one scatterx call beyond its output (MB; % of the inputs):",
        f"  {'case':<12} {'inputs':>9} {'output':>9} {'numpy allocs':>14} {'peak RSS':>16}",
    ]
    for m in memory:
        mb = 1 / 2**20
        rss = m["rss_extra_bytes"] if m["rss_extra_bytes"] is None else max(0, m["rss_extra_bytes"])
        rss_text = "n/a" if rss is None else f"{rss * mb:.2f} ({100 * rss / m['input_bytes']:.1f}%)"
        lines.append(
            f"  {m['case']:<12} {m['input_bytes'] * mb:>9.1f} {m['output_bytes'] * mb:>9.1f} "
            f"{m['numpy_extra_bytes'] * mb:>14.2f} {rss_text:>16}"
        )
    return "\n".join(lines)


def format_inplace(inplace: list[dict]) -> str:
    lines = [
        "out=data skips the copy of data (ms):",
        f"  {'case':<12} {'new output':>11} {'out=data':>9} {'saved':>8} {'copy of data':>13}",
    ]
    for p in inplace:
        lines.append(
            f"  {p['case']:<12} {_fmt(p['new_output']):>11} {_fmt(p['out_data']):>9} "
            f"{_fmt(p['new_output'] - p['out_data']):>8} {_fmt(p['copy_data']):>13}"
        )
    return "\n".join(lines)


def targets(results: list[CaseResult], cases: list[Case], memory: list[dict]) -> list[tuple[str, bool, str]]:
    """The goals of SPEC section 8, each as (goal, met, the figures that decide it)."""
    timed = [r for r in results if r.speedup and not r.failed]
    out = []
    if timed:
        slower = [r.name for r in timed if r.speedup < 1]
        closest = min(timed, key=lambda r: r.speedup)
        won = closest.windows_won()
        out.append((
            "no case slower than the best peer", not slower,
            f"{len(slower)} of {len(timed)} slower" + (f": {', '.join(slower)}" if slower else "")
            + f"; closest {closest.name} {_fmt(closest.speedup)}x {closest.peer_best()[0]}"
            + (f", scatterx the faster in {won[0]} of {won[1]} windows" if won else ""),
        ))
        geomean = geometric_mean([r.speedup for r in timed])
        out.append(("geometric mean >= 2x the best peer", geomean >= 2, f"{_fmt(geomean)}x"))
    bounded = [r for r in results if r.bound_ratio and not r.failed]
    if bounded:
        reachable = [r for r in bounded if r.bound_reachable]
        far = [(r, r.probe_beaten()) for r in reachable if r.bound_ratio > 1.5]
        missed = [f"{r.name} {_fmt(r.bound_ratio)}x{r.reads_note()}" for r, probe in far if probe is None]
        unknown = [f"{r.name} {_fmt(r.bound_ratio)}x (probe {_fmt(probe / r.bound_ms)}x){r.reads_note()}"
                   for r, probe in far if probe is not None]
        beyond_reach = [
            f"{r.name} (ordered loop {_fmt(r.loop_ms / r.bound_ms)}x bound; ours {_fmt(r.loop_ratio)}x loop)"
            if r.held_by(r.loop_ms) else
            f"{r.name} (floor {_fmt(r.floor_ms / r.bound_ms)}x bound; ours {_fmt(r.floor_ratio)}x floor)"
            for r in bounded if not r.bound_reachable
        ]
        out.append((
            "large cases within 1.5x of the streaming bound (where reachable)", not far,
            f"{len(reachable) - len(far)} of {len(reachable)} reachable within"
            + (f"; beyond: {', '.join(missed)}" if missed else "")
            + (f"; beyond, with a probe slower than scatterx that shows no floor: {', '.join(unknown)}"
               if unknown else "")
            + (f"; out of reach, a measured floor alone takes longer: {', '.join(beyond_reach)}"
               if beyond_reach else ""),
        ))
    latency = {c.name: r.ours for r, c in zip(results, cases) if c.family == "tiny" and r.ours}
    if latency:
        out.append((
            "a 3x3 call <= 2 us", all(ms <= 2e-3 for ms in latency.values()),
            ", ".join(f"{name} {_fmt(1e3 * ms)} us" for name, ms in latency.items()),
        ))
    if memory:
        shares = {
            m["case"]: max(m["numpy_extra_bytes"], m["rss_extra_bytes"] or 0) / m["input_bytes"] for m in memory
        }
        worst = max(shares, key=shares.get)
        out.append((
            "extra memory beyond the output <= 5% of the inputs", shares[worst] <= 0.05,
            f"at most {100 * shares[worst]:.1f}% ({worst})",
        ))
    return out


def plot(results: list[CaseResult], names: list[str], path: str, title: str) -> None:
    """Horizontal bars from 1 (scatterx) to each peer's time relative to scatterx (log scale).

    A bar to the right is a peer slower than scatterx; the streaming bound is marked with a bar,
    the random-access floor (`probe_floor`) with a cross.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.ours]
    peers = [n for n in names if n != "scatterx"]
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(shown) * max(1, len(peers) / 3) + 1.5))
    height = 0.8 / max(1, len(peers))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, name in enumerate(peers):
        ys, xs = [], []
        for row, r in enumerate(shown):
            res = r.impls.get(name)
            if res is not None and res.status == "ok":
                ys.append(row + (k - (len(peers) - 1) / 2) * height)
                xs.append(res.ms / r.ours)
        color = colors[(k + 1) % len(colors)]
        ax.barh(ys, [x - 1 for x in xs], left=1, height=height, label=name, color=color)
    bounds = [(row, r.bound_ms / r.ours) for row, r in enumerate(shown) if r.bound_ms]
    if bounds:
        ax.scatter([b[1] for b in bounds], [b[0] for b in bounds], marker="|", s=300, color="black",
                   zorder=3, label="streaming bound")
    floors = [(row, r.floor_ms / r.ours) for row, r in enumerate(shown) if r.floor_ms]
    if floors:
        ax.scatter([f[1] for f in floors], [f[0] for f in floors], marker="x", s=60, color="black",
                   zorder=3, label="random-access floor")
    ax.set_xscale("log")
    ax.axvline(1.0, color=colors[0], linewidth=1.5, label="scatterx")
    ax.set_yticks(range(len(shown)), [r.name for r in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlabel("time relative to scatterx (log scale; right of 1: slower than scatterx)")
    ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _versions() -> dict:
    import importlib.metadata

    out = {"python": platform.python_version()}
    for dist in ("scatterx", "numpy", "ml_dtypes", "torch", "onnxruntime"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_times(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) time of all CPUs so far, in clock ticks, from Linux's /proc/stat; None
    where there is no such file. Steal is the time a virtual machine's CPUs were ready to run
    but the host ran something else."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the CPUs' time that the host stole between two `cpu_times`."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# -- command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``scatterx bench`` (shared with benchmarks/run.py)."""
    add = parser.add_argument
    add("--quick", action="store_true", help="smaller arrays and shorter samples (under a minute)")
    add("--cases", metavar="PATTERNS", help="comma-separated names or shell patterns, e.g. 'mp_*,tiny_3x3'")
    add("--peers", metavar="NAMES", help="comma-separated peers (default: all of numpy, torch, onnxruntime)")
    add(
        "--threads", type=int, metavar="N",
        help="threads of scatterx, PyTorch and onnxruntime (default: scatterx's)",
    )
    add("--repeat", type=int, metavar="N", help="samples per figure, at least 5 (default: 7, quick: 5)")
    add(
        "--rounds", type=int, metavar="N",
        help="windows per implementation and case, taken in turn, the samples dealt out to them (default: 3, quick: 1)",
    )
    add("--json", metavar="FILE", help="write every figure to FILE as JSON")
    add("--plot", metavar="FILE.png", help="draw the table to FILE.png (needs matplotlib)")
    add("--no-memory", action="store_true", help="skip the memory and out=data checks")
    add("--list", action="store_true", help="list the cases and exit")


def _implementations(peers: str | None) -> list[Impl]:
    by_name = {impl.name: impl for impl in IMPLEMENTATIONS}
    if peers is None:
        return list(IMPLEMENTATIONS)
    wanted = [p.strip() for p in peers.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in by_name or p == "scatterx"]
    if unknown:
        choices = ", ".join(n for n in by_name if n != "scatterx")
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; choose from {choices}")
    return [by_name["scatterx"], *(by_name[p] for p in wanted)]


def _available_cases() -> list[Case]:
    import scatterx as sx

    backward = hasattr(sx, "scatter_elements_vjp") and hasattr(sx, "gather_elements_vjp")
    return [c for c in CASES if backward or not c.op.endswith("_vjp")]


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark that `args` (see `add_arguments`) describe; 1 if a result was wrong."""
    import scatterx as sx

    available = _available_cases()
    if args.list:
        for case in available:
            print(f"{case.name:<18} {case.describe()}")
        return 0
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("scatterx bench --plot needs matplotlib: pip install 'scatterx[plot]'") from None
    try:
        cases = select(available, args.cases)
        impls = _implementations(args.peers)
    except ValueError as exc:
        raise SystemExit(f"scatterx bench: {exc}") from None
    names = [impl.name for impl in impls]
    if args.repeat is not None and args.repeat < 5:
        raise SystemExit("--repeat must be at least 5")
    if args.threads is not None and args.threads < 1:
        raise SystemExit("--threads must be at least 1")
    settings = Settings(
        quick=args.quick,
        threads=args.threads or sx.get_num_threads(),
        repeat=args.repeat or (5 if args.quick else 7),
        min_time=0.005 if args.quick else 0.1,
        rounds=args.rounds if args.rounds is not None else (1 if args.quick else 3),
    )
    try:
        window_sizes(settings.repeat, settings.rounds)
    except ValueError as exc:
        raise SystemExit(f"--rounds: {exc}") from None
    # A peer that crashes the process (it happens: docs/performance.md) then says where.
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable()
        except (OSError, ValueError):  # stderr without a file descriptor (captured)
            pass
    load_before = _load()
    times_before = cpu_times()
    started = time.perf_counter()
    _progress(f"scatterx bench: {len(cases)} cases, {', '.join(names)}, {settings.threads} threads")
    copier = Copier((64 if args.quick else 256) * 2**20)
    bandwidth_start = copy_bandwidth(copier, 7)
    _progress(f"copy bandwidth (np.copyto, read + write): {bandwidth_start / 1e9:.2f} GB/s")

    results = []
    for k, case in enumerate(cases, 1):
        _progress(f"[{k:>2}/{len(cases)}] {case.name}: {case.describe(settings.quick)}")
        case_start, case_times = time.perf_counter(), cpu_times()
        r = run_case(case, impls, settings, copier)
        r.steal = steal_share(case_times, cpu_times())
        results.append(r)
        parts = [f"{n} {_cell(r.impls[n])}" for n in names]
        tail = f" -> {_fmt(r.speedup)}x best peer" if r.speedup else ""
        tail += f", {_fmt(r.bound_ratio)}x bound" if r.bound_ratio else ""
        tail += f", {_fmt(r.floor_ratio)}x floor ({r.floor_way})" if r.floor_ratio else ""
        tail += f", {_fmt(r.loop_ratio)}x ordered loop" if r.loop_ratio else ""
        tail += f", {_fmt(r.reads_ratio)}x streams read whole" if r.reads_ratio else ""
        tail += f", host stole {100 * r.steal:.1f}% of the CPUs" if r.steal is not None else ""
        _progress("        " + " | ".join(parts) + tail + f" ({time.perf_counter() - case_start:.1f} s)")

    bandwidth_end = copy_bandwidth(copier, 7)
    stolen = steal_share(times_before, cpu_times())
    _progress(f"copy bandwidth again: {bandwidth_end / 1e9:.2f} GB/s")
    del copier
    beside = [r.bandwidth for r in results if r.bandwidth]
    bandwidths = f"{min(beside) / 1e9:.1f}-{max(beside) / 1e9:.1f}" if beside else "-"

    memory, inplace = [], []
    if not args.no_memory:
        chosen = {c.name for c in cases}
        probed = [n for n in _MEMORY_CASES if n in chosen]
        if probed:
            _progress(f"memory: {', '.join(probed)}")
            memory = memory_subprocess(probed, settings.quick, settings.threads)
        for case in (c for c in cases if c.name in _INPLACE_CASES):
            _progress(f"out=data: {case.name}")
            inplace.append(inplace_check(case, settings))

    speedups = [r.speedup for r in results if r.speedup and not r.failed]
    geomean = geometric_mean(speedups)
    from . import _core

    stream_mib = _core.get_stream_bytes() / 2**20
    header = (
        f"scatterx bench{' --quick' if args.quick else ''}: {settings.threads} threads, "
        f"copy bandwidth {bandwidth_start / 1e9:.1f} GB/s before, {bandwidths} beside the cases, "
        f"{bandwidth_end / 1e9:.1f} after, ms per call (median of {settings.repeat} "
        f"in {settings.rounds} round{'s' if settings.rounds > 1 else ''}), "
        f"{_cpu_model()}, {os.cpu_count()} CPUs, streaming stores above {stream_mib:.0f} MiB, "
        f"load {load_before} -> {_load()}"
        + (f", host stole {100 * stolen:.1f}% of the CPUs' time" if stolen is not None else "")
    )
    print(header)
    print(format_table(results, names))
    mean = f"{_fmt(geomean)}x" if geomean else "-"
    print(f"geometric mean speedup over the best peer: {mean} ({len(speedups)} cases)")
    notes = _notes(results, names)
    if notes:
        print("notes:")
        for note in notes:
            print(f"  {note}")
    if memory:
        print(format_memory(memory))
    if inplace:
        print(format_inplace(inplace))
    goals = targets(results, cases, memory)
    if goals:
        print("SPEC section 8 targets:")
        for goal, met, figures in goals:
            print(f"  [{'met' if met else 'NOT met'}] {goal}: {figures}")
    failures = [r.name for r in results if r.failed]
    _progress(f"done in {time.perf_counter() - started:.0f} s")

    if args.json:
        payload = {
            "settings": asdict(settings),
            "machine": {"cpu": _cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_before": load_before, "load_after": _load(), "steal_share": stolen,
                        "stream_bytes": _core.get_stream_bytes()},
            "versions": _versions(),
            "copy_bandwidth_measurements": [bandwidth_start, bandwidth_end],
            "cases": [
                {**{k: v for k, v in asdict(r).items()}, "speedup": r.speedup, "bound_ratio": r.bound_ratio,
                 "floor_ratio": r.floor_ratio, "loop_ratio": r.loop_ratio, "reads_ratio": r.reads_ratio,
                 "bound_reachable": r.bound_reachable,
                 "best_peer": r.peer_best()[0] if r.peer_best() else None}
                for r in results
            ],
            "geometric_mean_speedup": geomean,
            "memory": memory,
            "inplace": inplace,
            "targets": [{"goal": g, "met": m, "figures": f} for g, m, f in goals],
            "failures": failures,
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
    if args.plot:
        plot(results, names, args.plot, header.split(", ms per")[0])
    if failures:
        print(f"FAILED: results differ from scatterx's in {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m scatterx._bench`` / benchmarks/run.py: the same options as ``scatterx bench``."""
    parser = argparse.ArgumentParser(prog="scatterx bench", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
