"""Smoke tests of ``scatterx bench``: the table is produced and the correctness check bites.

No timing is asserted: the machine is shared. The expected values come from the cases' own
definitions (shapes) and from deliberately wrong peers.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time

import numpy as np
import pytest

from scatterx import _bench
from scatterx._bench_cases import CASES, FAMILIES, build_inputs, moved_bytes, touches
from scatterx._bench_peers import IMPLEMENTATIONS, Impl, Prepared, Unsupported

SETTINGS = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001)
TINY = next(c for c in CASES if c.name == "tiny_3x3")
SCATTERX = next(i for i in IMPLEMENTATIONS if i.name == "scatterx")


def _fake(name, transform):
    """A peer that returns scatterx's result passed through `transform`."""

    def prepare(case, inputs, threads):
        base = SCATTERX.prepare(case, inputs, threads)
        return Prepared(lambda: transform(base.run()), lambda r: (r,))

    return Impl(name, prepare)


def test_quick_run_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    rc = _bench.main(["--quick", "--cases", "tiny_3x3,gather_3x3", "--no-memory", "--json", str(path)])
    out = capsys.readouterr()
    assert rc == 0
    assert "geometric mean speedup over the best peer" in out.out
    lines = out.out.splitlines()
    assert any(line.startswith("tiny_3x3 ") for line in lines)
    assert any(line.startswith("gather_3x3 ") for line in lines)
    assert "[ 1/2] tiny_3x3" in out.err  # progress goes to stderr
    report = json.loads(path.read_text())
    assert [c["name"] for c in report["cases"]] == ["tiny_3x3", "gather_3x3"]
    for case in report["cases"]:
        ours = case["impls"]["scatterx"]
        assert ours["status"] == "ok" and ours["ms"] > 0 and len(ours["samples_ms"]) == 5
        assert case["impls"]["numpy"]["status"] == "ok"
    assert all(b > 0 for b in report["copy_bandwidth_measurements"])
    on_linux = _bench.cpu_times() is not None
    for share in [report["machine"]["steal_share"]] + [c["steal"] for c in report["cases"]]:
        assert (share is not None and 0 <= share <= 1) if on_linux else share is None
    assert all(c["bandwidth"] is None and c["bound_ms"] is None for c in report["cases"])  # latency cases
    assert report["failures"] == []
    latency = next(t for t in report["targets"] if t["goal"] == "a 3x3 call <= 2 us")
    assert latency["met"] == (report["cases"][0]["impls"]["scatterx"]["ms"] <= 2e-3 and
                              report["cases"][1]["impls"]["scatterx"]["ms"] <= 2e-3)


def test_memory_and_out_data_checks_come_under_the_table(capsys):
    rc = _bench.main(["--quick", "--cases", "rows_none", "--peers", "numpy"])
    out = capsys.readouterr().out
    assert rc == 0
    header = out.splitlines()[1].split()
    assert header[:4] == ["case", "operation", "scatterx", "numpy"]
    assert "Peak memory of one scatterx call beyond its output" in out
    assert "out=data skips the copy of data" in out
    assert "extra memory beyond the output <= 5% of the inputs" in out


def test_a_wrong_peer_is_reported_not_timed():
    def off_by_one_ulp(result):
        wrong = result.copy()
        wrong[0, 0] = np.nextafter(wrong[0, 0], np.inf)
        return wrong

    impls = [SCATTERX, _fake("wrong", off_by_one_ulp), _fake("right", np.copy)]
    result = _bench.run_case(TINY, impls, SETTINGS, bandwidth=1e9)
    assert result.impls["wrong"].status == "mismatch"
    assert "1 of 9 elements differ bitwise" in result.impls["wrong"].note
    assert result.impls["wrong"].ms is None
    assert result.impls["right"].status == "ok"
    assert result.failed


def test_implementations_and_the_copy_are_sampled_in_turn():
    calls = []

    def call(name):
        time.sleep(0.002)  # one call makes a sample of min_time
        calls.append(name)

    timings = _bench.time_calls({"a": lambda: call("a"), "b": lambda: call("b")}, 0.001, 5)
    assert calls[-10:] == ["a", "b"] * 5
    assert all(len(t.samples) == 5 and t.number == 1 for t in timings.values())


def test_the_hosts_steal_is_read_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 20 800 5 0 5 70 0 0\ncpu0 50 0 10 400 2 0 3 35 0 0\n")
    assert _bench.cpu_times(str(stat)) == (70, 1000)
    assert _bench.steal_share((70, 1000), (80, 1200)) == pytest.approx(0.05)
    assert _bench.steal_share((70, 1000), (70, 1000)) is None  # no time passed
    assert _bench.steal_share(None, (80, 1200)) is None
    assert _bench.cpu_times(str(tmp_path / "absent")) is None
    stat.write_text("intr 1 2 3\n")
    assert _bench.cpu_times(str(stat)) is None


def test_samples_are_dealt_out_to_rounds_as_evenly_as_they_go():
    assert _bench.window_sizes(7, 3) == [3, 2, 2]
    assert _bench.window_sizes(5, 1) == [5]
    assert _bench.window_sizes(9, 3) == [3, 3, 3]
    assert _bench.window_sizes(5, 5) == [1] * 5
    for rounds in (0, 6):
        with pytest.raises(ValueError, match="rounds must be between 1 and the number of samples"):
            _bench.window_sizes(5, rounds)


def test_rounds_take_the_implementations_in_turn_by_windows():
    calls = []

    def logged(name):
        def prepare(case, inputs, threads):
            base = SCATTERX.prepare(case, inputs, threads)

            def run():
                calls.append(name)
                time.sleep(0.002)  # one call makes a sample of min_time
                return base.run()

            return Prepared(run, base.to_numpy)

        return Impl(name, prepare)

    settings = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001, rounds=3)
    result = _bench.run_case(TINY, [logged("scatterx"), logged("peer")], settings, bandwidth=1e9)
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls)]
    # The check (the first round's warm-up) and 2 samples; then a warm-up call and 2 samples,
    # a warm-up call and 1 sample, each implementation in turn.
    assert runs == [("scatterx", 3), ("peer", 3), ("scatterx", 3), ("peer", 3), ("scatterx", 2), ("peer", 2)]
    assert list(result.impls) == ["scatterx", "peer"]
    for r in result.impls.values():
        assert r.status == "ok" and r.number == 1 and len(r.samples_ms) == 5
        assert r.ms == pytest.approx(np.median(r.samples_ms))
        by_window = [r.samples_ms[0:2], r.samples_ms[2:4], r.samples_ms[4:5]]
        assert r.windows_ms == pytest.approx([np.median(w) for w in by_window])
    won, windows = result.windows_won()
    assert windows == 3 and won == sum(
        a < b for a, b in zip(result.impls["scatterx"].windows_ms, result.impls["peer"].windows_ms)
    )


def test_a_later_window_waits_only_after_another_implementations(monkeypatch):
    pauses = []
    monkeypatch.setattr(_bench.time, "sleep", pauses.append)
    settings = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001, rounds=3)
    _bench.run_case(TINY, [SCATTERX, _fake("peer", np.copy)], settings, bandwidth=1e9)
    assert pauses == [_bench._SETTLE] * 4  # two later rounds, two windows each
    pauses.clear()
    alone = _bench.run_case(TINY, [SCATTERX], settings, bandwidth=1e9)
    assert pauses == [] and len(alone.impls["scatterx"].windows_ms) == 3


def test_the_closest_case_is_named_with_the_windows_it_won():
    def result(name, ours, peer, ours_windows, peer_windows):
        impls = {
            "scatterx": _bench.ImplResult("ok", ms=ours, windows_ms=ours_windows),
            "torch": _bench.ImplResult("ok", ms=peer, windows_ms=peer_windows),
            "numpy": _bench.ImplResult("ok", ms=10 * peer, windows_ms=[10 * peer] * len(peer_windows)),
        }
        return _bench.CaseResult(name, "", 0, None, impls)

    close = result("close", 2.0, 2.1, [1.9, 2.0, 2.3], [2.2, 2.1, 2.0])
    wide = result("wide", 1.0, 5.0, [1.0, 1.0, 1.0], [5.0, 5.0, 5.0])
    single = result("single", 1.0, 3.0, [1.0], [3.0])
    assert close.windows_won() == (2, 3) and wide.windows_won() == (3, 3) and single.windows_won() is None
    goals = {g: (met, fig) for g, met, fig in _bench.targets([wide, close, single], [], [])}
    met, figures = goals["no case slower than the best peer"]
    assert met and figures == "0 of 3 slower; closest close 1.05x torch, scatterx the faster in 2 of 3 windows"
    slow = result("slow", 3.0, 2.0, [3.0], [2.0])
    met, figures = {g: (m, f) for g, m, f in _bench.targets([wide, slow], [], [])}["no case slower than the best peer"]
    assert not met and figures == "1 of 2 slower: slow; closest slow 0.667x torch"


def test_the_cli_refuses_rounds_it_cannot_fill(capsys):
    for rounds in ("0", "6"):
        with pytest.raises(SystemExit, match="--rounds: rounds must be between 1 and the number of samples"):
            _bench.main(["--quick", "--cases", "tiny_3x3", "--no-memory", "--rounds", rounds])


def test_the_bound_of_a_case_comes_from_the_copy_timed_beside_it():
    case = next(c for c in CASES if c.name == "gather_rows")
    numpy_impl = next(i for i in IMPLEMENTATIONS if i.name == "numpy")
    copier = _bench.Copier(1 << 20)
    result = _bench.run_case(case, [SCATTERX, numpy_impl], SETTINGS, copier)
    assert list(result.impls) == ["scatterx", "numpy"]
    assert all(r.status == "ok" and len(r.samples_ms) == 5 for r in result.impls.values())
    assert result.bandwidth > 0
    assert result.bound_ms == pytest.approx(1e3 * result.moved_bytes / result.bandwidth)
    # The probe ran, and the result says which of its ways set the floor.
    assert result.floor_ms > 0 and re.fullmatch(r"\d+ threads?, ranges, (\d+|none) ahead", result.floor_way)
    fixed = _bench.run_case(case, [SCATTERX], SETTINGS, bandwidth=1e9)
    assert fixed.bandwidth == 1e9 and fixed.bound_ms == pytest.approx(1e3 * fixed.moved_bytes / 1e9)


def test_the_floor_and_the_loop_are_sampled_in_turn_with_scatterx(monkeypatch):
    # The yardsticks of a case's bound come from the same moments as scatterx's samples: each
    # of scatterx's samples is followed by one of each probe way and of the ordered loop, in
    # every window, and the floor is the fastest way's median.
    from scatterx import _core

    calls = []
    sleep_ms = {0: 5, 8: 3, 32: 2, 128: 4, "loop": 1, "reads": 6}

    def touch(table, positions, span, write, ahead, stream, split, stream_written, *then):
        calls.append(ahead)
        time.sleep(sleep_ms[ahead] / 1e3)
        return 0

    def ordered_adds(table, positions, values, count):
        calls.append("loop")
        time.sleep(sleep_ms["loop"] / 1e3)

    def read_streams(indices, updates):
        calls.append("reads")
        time.sleep(sleep_ms["reads"] / 1e3)
        return 0

    def prepare(case, inputs, threads):
        base = SCATTERX.prepare(case, inputs, threads)

        def run():
            calls.append("scatterx")
            time.sleep(0.002)  # one call makes a sample of min_time
            return base.run()

        return Prepared(run, base.to_numpy)

    monkeypatch.setattr(_core, "touch", touch)
    monkeypatch.setattr(_core, "ordered_adds", ordered_adds)
    monkeypatch.setattr(_core, "read_streams", read_streams)
    case = next(c for c in CASES if c.name == "hist_add")
    settings = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001, rounds=3)
    result = _bench.run_case(case, [Impl("scatterx", prepare)], settings, bandwidth=1e9)
    turn = ["scatterx", 0, 8, 32, 128, "loop", "reads"]
    # The check; the first window settles the yardsticks' calls per sample (scatterx's check
    # did that for it) and takes 2 samples; each later window an untimed call of each, then 2
    # and 1 samples.
    assert calls == ["scatterx"] + turn[1:] + turn * 2 + turn * 3 + turn * 2
    assert result.floor_way == "1 thread, ranges, 32 ahead" and 2 <= result.floor_ms < 3
    assert result.shared_floor_ms is None and 1 <= result.loop_ms < 2 and 6 <= result.reads_ms < 7
    # Without scatterx (here: it fails), the yardsticks are timed alone.
    calls.clear()
    broken = Impl("scatterx", lambda case, inputs, threads: Prepared(lambda: 1 / 0, lambda r: (r,)))
    alone = _bench.run_case(case, [broken], settings, bandwidth=1e9)
    assert alone.impls["scatterx"].status == "error" and "scatterx" not in calls
    assert alone.floor_way == "1 thread, ranges, 32 ahead" and 1 <= alone.loop_ms < 2 and 6 <= alone.reads_ms < 7


def test_the_cli_exits_nonzero_on_a_mismatch(monkeypatch, capsys):
    liar = _fake("liar", lambda r: r + 1)
    monkeypatch.setattr(_bench, "IMPLEMENTATIONS", (SCATTERX, liar))
    rc = _bench.main(["--quick", "--cases", "tiny_3x3", "--peers", "liar", "--no-memory"])
    out = capsys.readouterr()
    assert rc == 1
    assert "WRONG" in out.out and "FAILED" in out.err


def test_peers_get_the_expanded_index_only_where_they_read_it_right():
    # PyTorch 2.13 misreads an int32 stride-0 index (docs/performance.md); the peer must not
    # pass one, while int64 takes PyTorch's fast path.
    pytest.importorskip("torch")
    torch_impl = next(i for i in IMPLEMENTATIONS if i.name == "torch")
    for name in ("gather_mp_i32", "gather_mp"):
        case = next(c for c in CASES if c.name == name)
        result = _bench.run_case(case, [SCATTERX, torch_impl], SETTINGS, bandwidth=1e9)
        assert result.impls["torch"].status == "ok", result.impls["torch"].note


def test_close_cases_tolerate_reordering_but_exact_ones_do_not():
    add = next(c for c in CASES if c.name == "mp_add")
    ours = (np.array([1.0, 2.0, 3.0], np.float32),)
    reordered = (np.nextafter(ours[0], np.float32(np.inf)),)
    assert _bench.compare(add, False, ours, reordered) is None
    assert _bench.compare(add, True, ours, reordered) is not None
    assert _bench.compare(add, False, ours, (ours[0] + 1,)) is not None


def test_an_unsupported_case_becomes_a_note():
    def prepare(case, inputs, threads):
        raise Unsupported("no such kernel")

    result = _bench.run_case(TINY, [SCATTERX, Impl("partial", prepare)], SETTINGS, bandwidth=1e9)
    assert result.impls["partial"].status == "skipped"
    assert result.speedup is None and not result.failed
    notes = _bench._notes([result], ["scatterx", "partial"])
    assert "tiny_3x3 / partial: skipped: no such kernel" in notes
    assert "tiny_3x3 / scatterx: unchecked: no peer ran this case" in notes


def test_a_missing_peer_leaves_its_column_empty_with_one_note():
    absent = Impl("ghost", SCATTERX.prepare, requires=("scatterx_no_such_module",))
    gather = next(c for c in CASES if c.name == "gather_3x3")
    results = [_bench.run_case(c, [SCATTERX, absent], SETTINGS, bandwidth=1e9) for c in (TINY, gather)]
    assert all(r.impls["ghost"].status == "skipped" for r in results)
    notes = _bench._notes(results, ["scatterx", "ghost"])
    assert [n for n in notes if n.startswith("ghost")] == [
        "ghost: scatterx_no_such_module is not installed (its column is empty)"
    ]


def test_moved_bytes_is_the_streaming_formula():
    case = next(c for c in CASES if c.name == "max0")
    inputs = build_inputs(case, quick=True)
    (n, m), (k, _) = FAMILIES["max0"].quick_data_shape, FAMILIES["max0"].quick_index_shape
    data, idx, upd = n * m * 4, k * m * 8, k * m * 4
    assert moved_bytes(case, inputs) == 2 * data + idx + upd
    # An expanded index counts as it is handed to scatterx: a stride-0 view holds its first
    # column only; materialised (the mp_dense family), all of it.
    (n, m), (k, _) = FAMILIES["mp"].quick_data_shape, FAMILIES["mp"].quick_index_shape
    data, upd = n * m * 4, k * m * 4
    for name, idx in (("mp_add", k * 8), ("mp_add_i32", k * 4), ("mp_add_dense", k * m * 8)):
        case = next(c for c in CASES if c.name == name)
        assert moved_bytes(case, build_inputs(case, quick=True)) == 2 * data + idx + upd, name
    gather = next(c for c in CASES if c.name == "gather_mp_dense")
    assert moved_bytes(gather, build_inputs(gather, quick=True)) == data + k * m * 8 + upd


def test_touches_are_the_targets_in_visiting_order():
    def case(name):
        c = next(c for c in CASES if c.name == name)
        return c, build_inputs(c, quick=True)

    c, x = case("max0")  # element k of row j targets row indices[j, k], column k
    t = touches(c, x)
    cols = np.arange(x.indices.shape[1])[None, :]
    np.testing.assert_array_equal(t.positions, ((x.indices * x.data.shape[1] + cols) * 4).reshape(-1))
    assert (t.table_bytes, t.span, t.write) == (x.data.nbytes, 4, True)
    c, x = case("gather_mid")  # (i, j, k) reads data[i, indices[i, j, k], k]
    t = touches(c, x)
    i, _, k = np.indices(x.indices.shape, sparse=True)
    n1, n2 = x.data.shape[1:]
    np.testing.assert_array_equal(t.positions, (((i * n1 + x.indices) * n2 + k) * 4).reshape(-1))
    assert not t.write
    c, x = case("mp_add")  # one whole row per leading index
    t = touches(c, x)
    np.testing.assert_array_equal(t.positions, x.indices[:, 0] * x.data.shape[1] * 4)
    assert t.span == x.data.shape[1] * 4
    assert touches(*case("vjp_add")).write is False and touches(*case("vjp_mul")).write is True
    # The backward of max and min: two passes that read the targets, the result beside the
    # updates (the ties), then the shares beside the update gradients written.
    for name in ("vjp_max", "vjp_min"):
        c, x = case(name)
        first, second = touches(c, x).passes
        assert (first.write, first.stream_written, second.write, second.stream_written) == (False, False, False, True)
        assert second.then is None and first.stream_bytes == second.stream_bytes == x.updates.nbytes
        np.testing.assert_array_equal(first.positions, second.positions)
        cols = np.arange(x.indices.shape[1])[None, :]
        np.testing.assert_array_equal(first.positions, ((x.indices * x.data.shape[1] + cols) * 4).reshape(-1))
    assert [len(touches(*case(n)).passes) for n in ("vjp_none", "vjp_add", "max0")] == [1, 1, 1]
    assert touches(*case("vjp_max")).block == case("vjp_max")[1].indices.size  # axis 0: one block
    # The backward of mul: its prefix products, then its suffix products (SPEC section 5), each
    # pass reading and writing a running product at the targets, the updates read beside the
    # first and the update gradients written beside the second; both over a slab (one
    # coordinate before the middle axis) before the next.
    c, x = case("vjp_mul")
    t = touches(c, x)
    first, second = t.passes
    assert (first.write, first.stream_written, second.write, second.stream_written) == (True, False, True, True)
    assert second.positions is first.positions and first.stream_bytes == second.stream_bytes == x.updates.nbytes
    assert t.block == x.indices.shape[1] * x.indices.shape[2] and x.indices.size == x.indices.shape[0] * t.block
    # The positions are as wide as the index they stand for (a kernel reads int32 as it is).
    for name in ("max0", "mp_add", "hist_add"):
        c, x = case(name)
        c32, x32 = case(name + "_i32")
        t, t32 = touches(c, x), touches(c32, x32)
        assert (t.positions.dtype, t32.positions.dtype) == (np.int64, np.int32)
        np.testing.assert_array_equal(t32.positions, t.positions)
    # Beside the targets, one value per index moves in sequence: the updates of a scatter, the
    # elements a gather writes, the update gradients of a backward.
    c, x = case("max0")
    assert touches(c, x).stream_bytes == x.updates.nbytes
    c, x = case("mp_add")
    assert touches(c, x).stream_bytes == x.updates.nbytes
    c, x = case("gather_mid")
    assert touches(c, x).stream_bytes == x.indices.size * x.data.itemsize
    c, x = case("vjp_none")
    assert touches(c, x).stream_bytes == x.updates.nbytes
    assert touches(*case("tiny_3x3")) is None
    # The kernel writes that stream for a gather (its result) and for a scatter's backward (the
    # update gradients); it reads it for a scatter and for a gather's backward.
    written = {c.name for c in CASES if c.has_bound and touches(*case(c.name)).passes[-1].stream_written}
    assert written == {c.name for c in CASES if c.has_bound and c.op in ("gather", "scatter_vjp")}
    assert "gather_max0" in written and "vjp_none" in written and "vjp_gather" not in written
    # Fibers of float adds or products keep their order: no thread takes a range of positions
    # that cuts one (one fiber; the columns of the message-passing rows). The middle-axis
    # product's fibers come whole in each half of its positions (the halves meet between slabs).
    # So do the backward of a gather (the output gradient added into the data gradient) and of
    # a product along an outermost axis (its running products at the targets).
    ordered = {c.name for c in CASES if c.has_bound and touches(*case(c.name)).ordered}
    assert ordered == {"hist_add", "hist_add_i32", "mp_add", "mp_add_f16", "mp_add_bf16", "mp_add_i32", "mp_add_dense",
                       "vjp_gather", "vjp_mul_long"}
    assert touches(*case("vjp_gather")).splits == ("reader", "targets", "lines")
    assert touches(*case("vjp_mul")).splits == ("ranges",)  # a middle axis: slabs
    # Single elements of 32 column fibers a row: shared by fibers too, as scatterx's backward of
    # "mul" shares them; the positions of a row are its 32 elements (C order of the index).
    c, x = case("vjp_mul_long")
    long = touches(c, x)
    assert (long.splits, long.fibers, long.then.fibers) == (("reader", "targets", "columns"), 32, 32)
    assert x.indices.shape[1:] == (32,) and long.positions.size % 32 == 0
    row = (np.where(x.indices[5] < 0, x.indices[5] + x.data.shape[0], x.indices[5]) * 32 + np.arange(32)) * 4
    np.testing.assert_array_equal(long.positions[5 * 32:6 * 32], row)
    assert touches(*case("hist_add")).fibers == 0
    # The materialised expanded index visits the same whole rows (scatterx applies them whole),
    # and a scatter reads all of it beside the updates: no kernel knows a row holds one value
    # before it has read the row. A gather's stream is its result, which leaves the index out.
    dense, expanded = touches(*case("mp_add_dense")), touches(*case("mp_add"))
    np.testing.assert_array_equal(dense.positions, expanded.positions)
    # That index may be read by ranges whatever way the rows are shared: the "checked" split.
    assert (dense.span, dense.splits) == (expanded.span, expanded.splits + ("checked",))
    dense_inputs = case("mp_add_dense")[1]
    assert dense_inputs.index_rows is None and dense_inputs.indices.flags.c_contiguous
    assert dense.stream_bytes == expanded.stream_bytes + dense_inputs.indices.nbytes
    assert (dense.checked_bytes, expanded.checked_bytes) == (dense_inputs.indices.nbytes, 0)
    assert expanded.stream_bytes == dense_inputs.updates.nbytes
    assert not dense.stream_written
    dense, expanded = touches(*case("gather_mp_dense")), touches(*case("gather_mp"))
    assert dense.stream_bytes == expanded.stream_bytes == case("gather_mp")[1].indices.size * 4
    assert touches(*case("hist_add")).splits == ("reader", "targets")  # one line per access
    assert touches(*case("mp_add")).splits == ("reader", "targets", "lines")  # a row: its fibers
    c, x = case("mid_mul")
    t = touches(c, x)
    assert t.splits == ("ranges",) and (t.positions.size // 2) % (x.indices[0].size) == 0


@pytest.mark.parametrize("width", [np.int32, np.int64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("span", [1, 4, 200])
def test_the_touch_probe_reads_each_line_once_and_writes_nothing_new(threads, span, width):
    import scatterx as sx
    from scatterx import _core

    rng = np.random.default_rng(5)
    table = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    before = table.copy()
    positions = rng.integers(0, table.size - span, 100_000).astype(width)
    # Clamped into the table, never out of it: at the start, and inside a block of the walk by
    # ranges (asked for ahead there, and touched one by one among four).
    for at in (0, 5001):
        positions[at : at + 3] = [-5, table.size, np.iinfo(width).max]
    clamped = np.clip(positions, 0, table.size - span)
    clamped[[0, 5001]] = table.size - span  # -5 as unsigned is huge: the last valid position
    lines = np.minimum(64 * np.arange((span + 63) // 64), span - 1)
    want = int(table[(clamped[:, None] + lines[None, :]).reshape(-1)].astype(np.int64).sum())
    # The same without the last one to three positions (the targets' listing, below).
    want_short = {over: int(table[(clamped[:-over, None] + lines[None, :]).reshape(-1)].astype(np.int64).sum())
                  for over in (1, 2, 3)}
    # The stream is read one byte per line, in step: ones count its lines (a line where two
    # threads' shares meet may be read by both).
    stream = np.ones(1_000_003, np.uint8)
    stream_lines = -(-stream.size // 64)
    # A whole number of bytes per position (8): the shares meet on line boundaries.
    whole = np.ones(8 * positions.size, np.uint8)
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    try:
        for ahead, split in itertools.product((0, 8, 1000), ("ranges", "reader", "targets", "lines", "columns")):
            # Every line of every access is touched once in all: by ranges of positions; by one
            # thread while a second (with two) reads ahead ("reader"); by the thread whose share
            # of the table holds it ("targets"); by the thread whose share of an access's lines
            # holds it ("lines", one share per line at most); by the thread whose share of the
            # fibers holds its position ("columns": rows of 8 positions here, one per fiber).
            fibers = {"fibers": 8} if split == "columns" else {}
            assert _core.touch(table, positions, span, False, ahead, None, split, **fibers) == want
            assert _core.touch(table, positions, span, True, ahead, None, split, **fibers) == want
            # The stream: ranges meet at most once per thread; one walker reads each line once;
            # threads that each walk every position (or their own of every row) read a line once
            # each at most.
            walkers = threads if split in ("targets", "columns") or (split == "lines" and span > 64) else 1
            for write in (False, True):
                extra = _core.touch(table, positions, span, write, ahead, stream, split, **fibers) - want
                most = stream_lines + threads - 1 if split == "ranges" else stream_lines * walkers
                assert stream_lines <= extra <= most
                extra = _core.touch(table, positions, span, write, ahead, whole, split, **fibers) - want
                assert whole.size // 64 <= extra <= whole.size // 64 * walkers
                if split in ("ranges", "reader"):
                    assert extra == whole.size // 64
                if split == "columns":
                    # A row of 8 positions holds one line of 64 bytes: read by each thread.
                    assert extra == whole.size // 64 * threads
            if split == "reader":
                # The reader's walk asks for its streams ahead where the one-fiber scatter does
                # (set_fiber_streams_ahead, by CPU): both ways, each line touched and read once.
                for streams, write in itertools.product((False, True), (False, True)):
                    setting = _core.set_fiber_streams_ahead(streams)
                    try:
                        extra = _core.touch(table, positions, span, write, ahead, whole, split) - want
                    finally:
                        _core.set_fiber_streams_ahead(setting)
                    assert extra == whole.size // 64
            if split == "targets":
                # Each thread lists its own positions four at a time where the CPU has AVX2, the
                # one to three left over one by one.
                for over, expected in want_short.items():
                    for write in (False, True):
                        assert _core.touch(table, positions[:-over], span, write, ahead, None, split) == expected
            assert _core.touch(table, positions, span, True, ahead, np.zeros(10, np.uint8), split, **fibers) == want
            # Two passes: every line touched once by each (block by block with ranges).
            for block, (w1, w2) in itertools.product((0, 1, 4096, 33_333, 10**9), ((False, False), (True, True))):
                assert _core.touch(table, positions, span, w1, ahead, None, split, False, w2, False, block,
                                   **fibers) == 2 * want
            if split == "ranges":
                # A stream the kernel writes is written whole (reads nothing from it), each line
                # by one thread, into a stream of any length and alignment.
                for written in (np.ones(1_000_003, np.uint8), np.ones(8 * positions.size + 1, np.uint8)[1:]):
                    for write in (False, True):
                        written[:] = 1
                        assert _core.touch(table, positions, span, write, ahead, written, "ranges", True) == want
                        assert not written.any()
                        # Read by the first of two passes, written whole by the second. A line
                        # where two parts meet (of the threads' shares, cut into blocks) may be
                        # read by both, or by the later after the earlier's second pass wrote it.
                        lines = -(-written.size // 64)
                        for block in (0, 4096):
                            cuts = (positions.size // block if block else 0) + 2 * threads
                            written[:] = 1
                            extra = _core.touch(table, positions, span, write, ahead, written, "ranges", False,
                                                write, True, block) - 2 * want
                            assert lines - cuts <= extra <= lines + cuts
                            assert not written.any()
    finally:
        sx.set_num_threads(previous)
    np.testing.assert_array_equal(table, before)
    assert (stream == 1).all()
    with pytest.raises(ValueError, match="stream"):
        _core.touch(table, positions, span, False, 8, np.ones((2, 8), np.uint8))
    for wrong in (positions.astype(np.float64), positions.astype(np.int16), positions[::2]):
        with pytest.raises(ValueError, match="positions"):
            _core.touch(table, wrong, span, False, 8, None)
    with pytest.raises(ValueError, match="split must be ranges, reader, targets, lines, checked or columns"):
        _core.touch(table, positions, span, False, 8, None, "fibers")
    for split, fibers in (("columns", 0), ("columns", 7), ("columns", -8), ("targets", 8)):
        with pytest.raises(ValueError, match="fibers must divide the number of positions"):
            _core.touch(table, positions, span, False, 8, None, split, fibers=fibers)
    with pytest.raises(ValueError, match="block must be at least 0"):
        _core.touch(table, positions, span, False, 8, None, "ranges", False, False, False, -1)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_checked_split_reads_the_streams_last_bytes_by_ranges(threads):
    import scatterx as sx
    from scatterx import _core

    rng = np.random.default_rng(6)
    table = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    span = 200
    positions = rng.integers(0, table.size - span, 100_000)
    lines = np.minimum(64 * np.arange((span + 63) // 64), span - 1)
    want = int(table[(positions[:, None] + lines[None, :]).reshape(-1)].astype(np.int64).sum())
    per_position, checked = 8 * positions.size, 64 * 12_345 + 5  # the checked part off line boundaries
    previous = sx.get_num_threads()
    sx.set_num_threads(threads)
    try:
        for ahead, write in itertools.product((0, 8, 1000), (False, True)):
            # All of the stream the checked part: each of its lines read once, by one thread's range
            # (the ranges meet on line boundaries), whatever the number of threads.
            only = np.ones(checked, np.uint8)
            assert _core.touch(table, positions, span, write, ahead, only, "checked", checked=checked) - want == (
                -(-checked // 64))
            # Beside a share per position, read by the thread whose targets it goes with (a line
            # where two threads' shares meet may be read by both); one thread reads it all as one.
            both = np.ones(per_position + checked, np.uint8)
            extra = _core.touch(table, positions, span, write, ahead, both, "checked", checked=checked) - want
            if threads == 1:
                assert extra == -(-both.size // 64)
            else:
                assert per_position // 64 + -(-checked // 64) <= extra <= 2 * (per_position // 64) + -(-checked // 64)
            # A checked part of one line: read once.
            assert _core.touch(table, positions, span, write, ahead, only[:64], "checked", checked=64) - want == 1
        for wrong in (0, checked + 1, -1):
            with pytest.raises(ValueError, match="checked must be between 1 and the stream's length"):
                _core.touch(table, positions, span, False, 8, np.ones(checked, np.uint8), "checked", checked=wrong)
        with pytest.raises(ValueError, match="and 0 for the others"):
            _core.touch(table, positions, span, False, 8, np.ones(checked, np.uint8), "targets", checked=64)
        with pytest.raises(ValueError, match="checked must be"):
            _core.touch(table, positions, span, False, 8, None, "checked", checked=64)
    finally:
        sx.set_num_threads(previous)


def test_the_probe_of_a_materialised_index_reads_it_by_ranges_in_the_checked_way(monkeypatch):
    import scatterx as sx
    from scatterx import _core

    calls = []

    def touch(table, positions, span, write, ahead, stream, split, stream_written, checked=0):
        calls.append((sx.get_num_threads(), split, checked, stream.nbytes))
        return 0

    monkeypatch.setattr(_core, "touch", touch)
    two = _bench.Settings(quick=True, threads=2, repeat=5, min_time=0.001)
    c = next(c for c in CASES if c.name == "mp_add_dense")
    x = build_inputs(c, quick=True)
    t = touches(c, x)
    _bench.probe_floor(t, two)
    assert {call[:3] for call in calls} == {
        (1, "ranges", 0), (2, "reader", 0), (2, "targets", 0), (2, "lines", 0), (2, "checked", x.indices.nbytes)}
    assert {call[3] for call in calls} == {x.updates.nbytes + x.indices.nbytes}
    assert sx.get_num_threads() == 2


def _ahead_words(ahead: int) -> str:
    # How a probe way names its prefetch distance: 0 asks for nothing ahead.
    return f"{ahead} ahead" if ahead else "none ahead"


def test_a_probe_way_names_its_distance():
    assert _bench.ProbeWay(2, "ranges", 32).describe() == "2 threads, ranges, 32 ahead"
    assert _bench.ProbeWay(1, "ranges", 0).describe() == "1 thread, ranges, none ahead"


def test_the_probe_shares_ordered_targets_only_in_the_ways_a_kernel_may(monkeypatch):
    import scatterx as sx
    from scatterx import _core

    calls = []
    sleep_ms = {"ranges": 1, "lines": 3, "targets": 5, "reader": 7}

    def touch(table, positions, span, write, ahead, stream, split, stream_written):
        calls.append((sx.get_num_threads(), split, ahead))
        time.sleep(sleep_ms[split] / 1e3)
        return 0

    monkeypatch.setattr(_core, "touch", touch)
    two = _bench.Settings(quick=True, threads=2, repeat=5, min_time=0.001)
    for name, ways, shared_split in (
        ("mp_add", {(1, "ranges"), (2, "reader"), (2, "targets"), (2, "lines")}, "lines"),
        ("hist_add", {(1, "ranges"), (2, "reader"), (2, "targets")}, "targets"),
        ("max0", {(1, "ranges"), (2, "ranges")}, "ranges"),
    ):
        calls.clear()
        c = next(c for c in CASES if c.name == name)
        floor = _bench.probe_floor(touches(c, build_inputs(c, quick=True)), two)
        assert {(n, split) for n, split, _ in calls} == ways
        assert {a for _, _, a in calls} == set(_bench._PROBE_AHEAD)
        # The floor is the fastest way (here one thread); the shared floor the fastest in which
        # several threads each apply a share of the targets (not one walker with a reader).
        # Each comes with the way that gave it.
        assert 1 <= floor.ms < 3
        assert floor.way.split == "ranges"  # on one thread; for max0 on either count
        assert sleep_ms[shared_split] <= floor.shared_ms < sleep_ms[shared_split] + 2
        assert (floor.shared_way.threads, floor.shared_way.split) == (2, shared_split)
        assert floor.shared_way.ahead in _bench._PROBE_AHEAD
        assert floor.shared_way.describe() == f"2 threads, {shared_split}, {_ahead_words(floor.shared_way.ahead)}"
    calls.clear()
    c = next(c for c in CASES if c.name == "mp_add")
    alone = _bench.probe_floor(touches(c, build_inputs(c, quick=True)), SETTINGS)  # one thread
    assert alone.shared_ms is None and alone.shared_way is None
    assert alone.way.describe() == f"1 thread, ranges, {_ahead_words(alone.way.ahead)}"
    assert {(n, split) for n, split, _ in calls} == {(1, "ranges")}
    assert _bench.probe_floor(None, two) == _bench.ProbeFloor()  # the latency cases


def test_the_probe_touches_a_table_and_a_stream_of_pages_of_their_own(monkeypatch):
    # Pages never written are read from the kernel's one zero page: a probe that only reads
    # its table (a gather's) would read the same page over and over. Bytes that are not zero
    # lie in pages of their own.
    from scatterx import _core

    seen = []

    def touch(table, positions, span, write, ahead, stream, split, stream_written, *second):
        seen.append((table.nbytes, int(table.min()), stream.nbytes, int(stream.min()) if stream.size else 1))
        return 0

    monkeypatch.setattr(_core, "touch", touch)
    one = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001)
    for name in ("gather_max0", "max0", "vjp_max"):
        seen.clear()
        c = next(c for c in CASES if c.name == name)
        x = build_inputs(c, quick=True)
        t = touches(c, x)
        _bench.probe_floor(t, one)
        assert seen and set(seen) == {(t.table_bytes, 1, t.stream_bytes, 1)}, name
        assert t.table_bytes == x.data.nbytes


def _mapping_flags(address):
    """The VmFlags of this process's mapping that holds `address` (Linux), or None."""
    try:
        with open("/proc/self/smaps") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0] if line.split() else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


def test_the_probes_pages_of_their_own_are_ones_apart_from_other_memory_and_marked_for_huge_pages():
    import mmap

    huge = _bench._HUGE_PAGE
    arrays = [_bench.pages_of_their_own(n) for n in (0, 1000, huge, 5 * huge + 12345)]
    for a, n in zip(arrays, (0, 1000, huge, 5 * huge + 12345)):
        assert a.dtype == np.uint8 and a.shape == (n,) and a.flags.writeable
        assert np.all(a == 1)
    for a in arrays:
        for b in arrays:
            assert a is b or not np.shares_memory(a, b)
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        pytest.skip("no private anonymous mappings here: the probe's tables are np.ones")
    for big in arrays[2:]:
        assert big.ctypes.data % huge == 0
        flags = _mapping_flags(big.ctypes.data + big.nbytes - 1)
        if flags is not None and hasattr(mmap, "MADV_HUGEPAGE"):
            assert "hg" in flags  # madvise(MADV_HUGEPAGE), up to the table's last byte
        big[-1] = 7  # writable to its last byte, whatever lies after it
        assert big[-1] == 7


def test_the_probe_of_a_two_pass_backward_times_both_passes_in_each_call(monkeypatch):
    from scatterx import _core

    calls = []

    def touch(table, positions, span, write, ahead, stream, split, stream_written, then_write=None,
              then_stream_written=False, block=0):
        passes = [(write, stream_written, positions.size)]
        if then_write is not None:
            passes.append((then_write, then_stream_written, positions.size))
        calls.extend(passes)
        calls_blocks.append(block)
        time.sleep(sum(2 if written else 1 for _, written, _ in passes) / 1e3)  # a written stream takes longer
        return 0

    calls_blocks = []

    monkeypatch.setattr(_core, "touch", touch)
    one = _bench.Settings(quick=True, threads=1, repeat=5, min_time=0.001)
    c = next(c for c in CASES if c.name == "vjp_max")
    x = build_inputs(c, quick=True)
    floor = _bench.probe_floor(touches(c, x), one)
    # Every call is the first pass (reads, the updates read) then the second (reads, the update
    # gradients written), over every target; the floor is both together.
    assert calls[:2] == [(False, False, x.indices.size), (False, True, x.indices.size)]
    assert calls == calls[:2] * (len(calls) // 2)
    assert set(calls_blocks) == {x.indices.size} and 3 <= floor.ms < 5
    calls.clear()
    calls_blocks.clear()
    # The backward of mul: both passes read and write (the prefix, then the suffix products),
    # block by block (a slab of its middle axis).
    c = next(c for c in CASES if c.name == "vjp_mul")
    x = build_inputs(c, quick=True)
    floor = _bench.probe_floor(touches(c, x), one)
    assert calls[:2] == [(True, False, x.indices.size), (True, True, x.indices.size)]
    assert calls == calls[:2] * (len(calls) // 2)
    assert set(calls_blocks) == {x.indices.shape[1] * x.indices.shape[2]} and 3 <= floor.ms < 5
    calls.clear()
    calls_blocks.clear()
    c = next(c for c in CASES if c.name == "vjp_add")
    floor = _bench.probe_floor(touches(c, build_inputs(c, quick=True)), one)
    assert {call[:2] for call in calls} == {(False, True)} and set(calls_blocks) == {0} and 2 <= floor.ms < 4


def test_the_streaming_target_counts_only_reachable_cases():
    def result(name, ours, bound, floor):
        r = _bench.CaseResult(name, "", 0, bound, {"scatterx": _bench.ImplResult("ok", ms=ours)}, floor)
        return r

    near = result("near", 2.0, 1.0, 1.2)    # floor within 1.5x bound: reachable, and missed
    far = result("far", 30.0, 1.0, 20.0)    # the random accesses alone take 20x the bound
    plain = result("plain", 1.2, 1.0, None)  # no random accesses: reachable, and met
    beaten = result("beaten", 3.0, 1.0, 4.0)  # scatterx beats the probe: it proves nothing
    assert near.bound_reachable and plain.bound_reachable and beaten.bound_reachable
    assert not far.bound_reachable
    goals = {g: (met, fig) for g, met, fig in _bench.targets([near, far, plain, beaten], [], [])}
    met, figures = goals["large cases within 1.5x of the streaming bound (where reachable)"]
    assert not met and "1 of 3 reachable within" in figures and "beyond: near 2.00x;" in figures
    # A case whose probe took longer than scatterx is listed apart: the probe shows no floor.
    assert near.probe_beaten() is None and far.probe_beaten() is None and beaten.probe_beaten() == 4.0
    assert "beyond, with a probe slower than scatterx that shows no floor: beaten 3.00x (probe 4.00x)" in figures
    assert "far (floor 20.0x bound; ours 1.50x floor)" in figures
    goals = {g: (met, fig) for g, met, fig in _bench.targets([far, plain], [], [])}
    assert goals["large cases within 1.5x of the streaming bound (where reachable)"][0]


def test_inputs_follow_the_case_definitions():
    rows = build_inputs(next(c for c in CASES if c.name == "rows_none_i32"), quick=True)
    assert rows.indices.dtype == np.int32 and rows.indices.shape == FAMILIES["rows"].quick_index_shape
    width = rows.indices.shape[1]
    assert all(len(set(row)) == width for row in rows.indices.tolist())  # unique targets per row
    mp = build_inputs(next(c for c in CASES if c.name == "mp_add_bf16"), quick=True)
    assert mp.data.dtype.name == "bfloat16"
    assert (mp.indices == mp.indices[:, :1]).all()  # expanded: constant along each row


def test_memory_probe_sees_no_allocation_beyond_the_output():
    (report,) = _bench.memory_subprocess(["rows_none"], quick=True, threads=1)
    assert report["output_bytes"] == 4 * np.prod(FAMILIES["rows"].quick_data_shape)
    assert report["numpy_extra_bytes"] <= 0.05 * report["input_bytes"]


def test_memory_probe_counts_outputs_as_fresh_pages():
    """The warm-up call's outputs go back to the output cache; the measured calls must not take
    them from there (resident already, they would hide as many bytes of anything else)."""
    (report,) = _bench.memory_subprocess(["vjp_add"], quick=True, threads=1)
    assert report["output_bytes"] > 3 << 20  # the update gradients alone: a cached size
    if report["rss_extra_bytes"] is not None:
        assert report["rss_extra_bytes"] > -(1 << 20)


_PROBE = """
import ctypes, json, numpy as np
from scatterx._bench import peak_extra
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
def native():  # 32 MiB that only the resident set can see
    p = libc.malloc(32 << 20)
    ctypes.memset(p, 1, 32 << 20)
    libc.free(ctypes.c_void_p(p))
def numpy_temp():  # 32 MiB that NumPy reports to tracemalloc
    np.ones(4 << 20).sum()
print(json.dumps([peak_extra(native, 0), peak_extra(numpy_temp, 0)]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS is read from /proc")
def test_the_memory_instrument_sees_native_and_numpy_allocations():
    import os
    import subprocess

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True)
    native, numpy_temp = json.loads(proc.stdout)
    mib = 1 << 20
    assert native["numpy_extra_bytes"] < mib
    assert numpy_temp["numpy_extra_bytes"] >= 32 * mib
    if native["rss_extra_bytes"] is not None:
        assert native["rss_extra_bytes"] >= 31 * mib
        assert numpy_temp["rss_extra_bytes"] >= 31 * mib


def test_unknown_cases_and_peers_are_usage_errors():
    with pytest.raises(SystemExit, match="no case matches 'nope'; the cases are: mp_add, "):
        _bench.main(["--cases", "nope"])
    with pytest.raises(SystemExit, match="unknown peer"):
        _bench.main(["--peers", "jax"])


def test_plot_needs_matplotlib(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match=r"pip install 'scatterx\[plot\]'"):
        _bench.main(["--quick", "--cases", "tiny_3x3", "--plot", str(tmp_path / "p.png")])


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    rc = _bench.main(["--quick", "--cases", "tiny_3x3", "--peers", "numpy", "--no-memory", "--plot", str(path)])
    assert rc == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [np.int32, np.int64])
def test_the_ordered_loop_applies_its_stretch_over_and_over_in_order(dtype, width):
    from scatterx import _core

    rng = np.random.default_rng(11)
    table = rng.standard_normal(300).astype(dtype)
    positions = rng.integers(0, table.size, 1024).astype(width)
    positions[:4] = [7, 7, 299, 0]  # repeats and both ends of the table
    values = rng.standard_normal(1024).astype(dtype)
    for count in (0, 1, 1000, 1024, 2500):
        # ufunc.at adds in the order of its indices, one element at a time, in the array's type.
        want = table.copy()
        reps = -(-count // positions.size)
        np.add.at(want, np.tile(positions, reps)[:count], np.tile(values, reps)[:count])
        got = table.copy()
        _core.ordered_adds(got, positions, values, count)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_the_ordered_loop_refuses_what_it_cannot_run():
    from scatterx import _core

    table, positions, values = np.zeros(10), np.arange(4, dtype=np.int64), np.ones(4)
    for bad in ([10, 0, 0, 0], [-1, 0, 0, 0]):  # no index checks in the loop: refused before it
        with pytest.raises(ValueError, match="outside the table"):
            _core.ordered_adds(table, np.array(bad, np.int64), values, 8)
    wrong = [
        (table.astype(np.float16), positions, values.astype(np.float16), 8),
        (table, positions, values.astype(np.float32), 8),
        (table, positions.astype(np.float64), values, 8),
        (table, positions[:3], values, 8),
        (table, positions[::2], values[::2], 8),
        (np.zeros((2, 5)), positions, values, 8),
        (table, positions, values, -1),
        (table, positions[:0], values[:0], 8),
    ]
    for args in wrong:
        with pytest.raises(ValueError, match="ordered_adds"):
            _core.ordered_adds(*args)
    table.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _core.ordered_adds(table, positions, values, 8)
    assert not table.any()


def test_the_ordered_loop_is_measured_for_ordered_fibers_of_adds_only():
    for name in ("hist_add", "hist_add_i32"):
        c = next(x for x in CASES if x.name == name)
        x = build_inputs(c, quick=True)
        assert _bench.ordered_loop(c, x, touches(c, x), SETTINGS) > 0
    for name in ("mp_add", "max0", "gather_hist", "mid_mul", "tiny_3x3"):
        c = next(x for x in CASES if x.name == name)
        x = build_inputs(c, quick=True)
        assert _bench.ordered_loop(c, x, touches(c, x), SETTINGS) is None


def _line_bytes(a: np.ndarray) -> int:
    """The sum of the first byte of `a`'s data and of every byte of it that starts a 64-byte line."""
    raw = a.view(np.uint8).reshape(-1)
    first = -a.ctypes.data % 64  # the offset of the first line boundary within the data
    return int(raw[0]) + int(raw[first or 64 :: 64].sum()) if raw.size else 0


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("kinds", [(np.int64, np.float64), (np.int32, np.float64), (np.int64, np.float16)])
def test_the_streams_walk_reads_a_byte_of_every_line_on_each_thread(threads, kinds):
    # Each of the pool's threads, two at most (as many as split a fiber's bins), reads a byte of
    # every line of both streams and nothing beyond them: the sum it returns counts each line's
    # byte once per thread. Random bytes, so a line missed or read twice changes the sum; sizes
    # that end within a block, off the start of a line (a slice one element in).
    import scatterx as sx
    from scatterx import _core

    rng = np.random.default_rng(21)
    before = sx.get_num_threads()
    try:
        sx.set_num_threads(threads)
        for n in (0, 1, 100, 128, 129, 5000, 70_001):
            index = rng.integers(0, 256, (n + 1) * np.dtype(kinds[0]).itemsize, np.uint8).view(kinds[0])[1:]
            updates = rng.integers(0, 256, (n + 1) * np.dtype(kinds[1]).itemsize, np.uint8).view(kinds[1])[1:]
            want = (_line_bytes(index) + _line_bytes(updates)) * (min(threads, 2) if n else 1)
            assert _core.read_streams(index, updates) == want
    finally:
        sx.set_num_threads(before)


def test_the_streams_walk_refuses_what_it_cannot_run():
    from scatterx import _core

    index, updates = np.arange(8, dtype=np.int64), np.ones(8)
    for args in [(index[:7], updates), (index[::2], updates[::2]), (index.reshape(2, 4), updates.reshape(2, 4)),
                 (index, updates[::-1])]:
        with pytest.raises(ValueError, match="read_streams"):
            _core.read_streams(*args)
    with pytest.raises(TypeError, match="must be a numpy array"):
        _core.read_streams(list(index), updates)


def test_the_streams_walk_is_measured_for_one_ordered_fiber_only():
    for name in ("hist_add", "hist_add_i32"):
        c = next(x for x in CASES if x.name == name)
        x = build_inputs(c, quick=True)
        run = _bench.streams_run(c, x, touches(c, x))
        assert run is not None and run() > 0
    for name in ("mp_add", "max0", "gather_hist", "mid_mul", "tiny_3x3", "vjp_gather"):
        c = next(x for x in CASES if x.name == name)
        x = build_inputs(c, quick=True)
        assert _bench.streams_run(c, x, touches(c, x)) is None


def test_the_streams_walk_is_shown_beside_a_case_beyond_the_line_without_a_verdict():
    def result(name, ours, floor, loop, reads):
        r = _bench.CaseResult(name, "", 0, 1.0, {"scatterx": _bench.ImplResult("ok", ms=ours)}, floor, loop)
        r.reads_ms = reads
        return r

    missed = result("missed", 1.7, 1.9, 1.4, 1.45)   # reachable (its loop within), beyond
    unknown = result("unknown", 1.8, 1.9, 1.9, 1.6)  # its probes slower than scatterx
    within = result("within", 1.3, 1.9, 1.4, 1.2)
    # The walk is no floor of every kernel: it moves no verdict, even beyond 1.5x the bound.
    assert missed.bound_reachable and unknown.bound_reachable and within.bound_reachable
    assert unknown.probe_beaten() == 1.9 and missed.probe_beaten() is None
    figures = {g: fig for g, _, fig in _bench.targets([missed, unknown, within], [], [])}
    line = figures["large cases within 1.5x of the streaming bound (where reachable)"]
    assert "1 of 3 reachable within" in line
    assert "beyond: missed 1.70x (each thread reading both streams whole: 1.45x bound)" in line
    assert "unknown 1.80x (probe 1.90x) (each thread reading both streams whole: 1.60x bound)" in line
    assert "within" not in line.split("reachable within", 1)[1]
    assert missed.reads_ratio == pytest.approx(1.7 / 1.45)


def test_an_ordered_loop_beyond_the_bound_puts_a_case_out_of_reach():
    def result(name, ours, floor, loop):
        return _bench.CaseResult(name, "", 0, 1.0, {"scatterx": _bench.ImplResult("ok", ms=ours)}, floor, loop)

    held = result("held", 2.4, 3.0, 2.0)       # the probe is beaten, the loop alone takes 2x the bound
    beaten = result("beaten", 1.8, 3.0, 2.0)   # scatterx faster than its loop: it proves nothing
    short = result("short", 1.8, None, 1.4)    # the loop within 1.5x the bound: reachable, missed
    assert not held.bound_reachable and beaten.bound_reachable and short.bound_reachable
    assert held.held_by(held.loop_ms) and not held.held_by(held.floor_ms)
    # The loop holds a kernel that keeps the fiber on one thread; a way of sharing its targets
    # among threads that the probe finds within 1.5x the bound leaves the case reachable.
    held.shared_floor_ms = 1.4
    assert held.bound_reachable
    # A sharing way beyond 1.5x the bound holds only if scatterx is not faster than it (a kernel
    # that shares the targets, as scatterx's histogram does since stop 62, may beat the probe).
    held.shared_floor_ms = 3.5
    assert held.bound_reachable and held.probe_beaten() == 3.5
    held.shared_floor_ms = 2.2
    assert not held.bound_reachable
    goals = {g: (met, fig) for g, met, fig in _bench.targets([held, beaten, short], [], [])}
    met, figures = goals["large cases within 1.5x of the streaming bound (where reachable)"]
    assert not met and "0 of 2 reachable within" in figures
    assert "held (ordered loop 2.00x bound; ours 1.20x loop)" in figures
    assert beaten.probe_beaten() == 3.0 and short.probe_beaten() is None  # the slower of floor and loop
    assert "beyond: short 1.80x;" in figures and "no floor: beaten 1.80x (probe 3.00x)" in figures
    # A loop within 1.5x the bound shows the line reachable, though the floor was beaten.
    looped = result("looped", 2.0, 4.0, 1.4)
    assert looped.bound_reachable and looped.probe_beaten() is None
    figures = {g: fig for g, _, fig in _bench.targets([looped], [], [])}
    assert "beyond: looped 2.00x" in figures["large cases within 1.5x of the streaming bound (where reachable)"]
