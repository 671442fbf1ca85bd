"""scatterx.onnx.Session against onnxruntime, the ONNX node cases and the plain ONNX reference."""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test.case.node as node_cases
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from scatterx.onnx import Graph, Session

BF16 = np.dtype(ml_dtypes.bfloat16)


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _scatter_graph(reduction: str, dtype: str, shape_d, shape_i, axis: int) -> Graph:
    g = Graph()
    x = g.input("x", dtype, shape_d)
    i = g.input("i", "int64", shape_i)
    u = g.input("u", dtype, shape_i)
    g.output(g.scatter_elements(x, i, u, axis=axis, reduction=reduction, name="s", output_names=["y"]))
    return g


def _values(dtype, shape, rng):
    if dtype == "string":
        return np.array([str(v) for v in rng.integers(0, 9, int(np.prod(shape)))], object).reshape(shape)
    return rng.integers(0, 4, shape).astype(dtype)


# onnxruntime 1.32 CPU has no kernel for these (the model is valid; ORT refuses at run time or
# cannot take the array). scatterx runs them; other tests check them against the oracle.
ORT_MISSING = {
    ("float16", "add"), ("float16", "mul"), ("bool", "max"), ("bool", "min"),
    ("string", "max"), ("string", "min"),
}
_DTYPES = ["float32", "float64", "int32", "int64", "int8", "uint8", "float16", "bool", "string"]
_CASES = [(d, r) for d in _DTYPES for r in ("none", "add", "mul", "max", "min")
          if (d, r) not in ORT_MISSING and not (d == "string" and r == "mul")]


@pytest.mark.parametrize("dtype, reduction", _CASES)
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_model_equals_onnxruntime(dtype, reduction, axis):
    rng = np.random.default_rng(hash((dtype, reduction, axis)) % 2**32)
    x = _values(dtype, (5, 4), rng)
    if reduction == "none":
        # ONNX leaves duplicate targets with "none" unspecified: one update per target here.
        n = x.shape[axis]
        i = np.stack([rng.permutation(n) for _ in range(x.shape[1 - axis])], axis=1 - axis)
    else:
        shape = (7, 4) if axis == 0 else (5, 6)
        i = rng.integers(-x.shape[axis], x.shape[axis], shape)
    u = _values(dtype, i.shape, rng)
    g = _scatter_graph(reduction, dtype, x.shape, i.shape, axis)
    feeds = {"x": x, "i": i, "u": u}
    (expected,) = _ort(g.to_onnx(), feeds)
    got = Session(g).run(feeds)["y"]
    assert got.dtype == (np.dtype(object) if dtype == "string" else np.dtype(dtype))
    np.testing.assert_array_equal(got, expected)


# Known divergences, as data: (what, reduction, data row, indices row, updates row, scatterx, onnxruntime).
# scatterx propagates NaN in max/min (SPEC section 3); onnxruntime compares in update order.
DIVERGENCES = [
    ("NaN update, then a larger one", "max", [1, 2, 3], [0, 0], [np.nan, 5], [np.nan, 2, 3], [5, 2, 3]),
    ("NaN update, then a smaller one", "min", [1, 2, 3], [0, 0], [np.nan, 0], [np.nan, 2, 3], [0, 2, 3]),
    ("NaN in data", "max", [np.nan, 2, 3], [0, 0], [1, 5], [np.nan, 2, 3], [5, 2, 3]),
]


@pytest.mark.parametrize("what, reduction, d, i, u, ours, theirs", DIVERGENCES, ids=[c[0] for c in DIVERGENCES])
def test_known_divergences_from_onnxruntime(what, reduction, d, i, u, ours, theirs):
    g = _scatter_graph(reduction, "float32", (1, 3), (1, 2), 1)
    feeds = {"x": np.array([d], np.float32), "i": np.array([i]), "u": np.array([u], np.float32)}
    np.testing.assert_array_equal(Session(g).run(feeds)["y"], [ours])
    np.testing.assert_array_equal(_ort(g.to_onnx(), feeds)[0], [theirs])


def test_bfloat16_equals_float32_onnxruntime_rounded():
    # onnxruntime's Python binding cannot take bfloat16 arrays: compare with float32, rounded.
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (4, 3)).astype(BF16)
    i = rng.integers(0, 4, (6, 3))
    u = rng.integers(-8, 8, (6, 3)).astype(BF16)
    got = Session(_scatter_graph("add", "bfloat16", x.shape, i.shape, 0)).run({"x": x, "i": i, "u": u})["y"]
    g32 = _scatter_graph("add", "float32", x.shape, i.shape, 0)
    (expected,) = _ort(g32.to_onnx(), {"x": x.astype(np.float32), "i": i, "u": u.astype(np.float32)})
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), expected)  # small integers: exact in bfloat16


def _message_passing(n=6, e=10, f=3, h=4, seed=0):
    rng = np.random.default_rng(seed)
    g = Graph("mp")
    x = g.input("x", "float32", ("N", f))
    src = g.input("src", "int64", ("E",))
    dst = g.input("dst", "int64", ("E", h))
    w = g.initializer("w", rng.standard_normal((f, h)).astype(np.float32))
    hs = g.node("Gather", [x, src], axis=0, name="gather")
    msg = g.node("MatMul", [hs, w], name="message")
    zeros = g.node("MatMul", [x, np.zeros((f, h), np.float32)], name="self")
    agg = g.scatter_elements(zeros, dst, msg, reduction="add", name="aggregate")
    out = g.node("Relu", [agg], name="relu", output_names=["out"])
    g.output(out, g.node("ReduceMean", [out], keepdims=0, name="mean", output_names=["mean"]))
    feeds = {
        "x": rng.standard_normal((n, f)).astype(np.float32),
        "src": rng.integers(0, n, e),
        "dst": np.repeat(rng.integers(0, n, (e, 1)), h, axis=1),
    }
    return g, feeds


def test_message_passing_equals_onnxruntime():
    g, feeds = _message_passing()
    got = Session(g).run(feeds)
    expected = _ort(g.to_onnx(), feeds)
    assert list(got) == ["out", "mean"] == Session(g).output_names
    for e, v in zip(expected, got.values()):
        np.testing.assert_allclose(v, e, rtol=1e-5, atol=1e-6)


def _onnx_cases(*modules: str) -> dict:
    for module in modules:
        importlib.import_module(f"{node_cases.__name__}.{module}")
    return {c.name: c for c in node_cases._NodeTestCases}


_OWN = ("scatterelements", "gatherelements", "scatter")
_OTHERS = ("if_", "loop", "scan", "softmax", "reshape", "split", "where", "topk")


def _feeds(model: onnx.ModelProto, inputs) -> dict:
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return dict(zip(names, inputs))


def test_onnx_node_cases_of_the_three_operators():
    cases = {k: c for k, c in _onnx_cases(*_OWN).items() if k.startswith(("test_scatter", "test_gather_elements"))}
    assert len(cases) >= 12
    for name, case in cases.items():
        session = Session(case.model)
        for inputs, outputs in case.data_sets:
            feeds = _feeds(case.model, inputs)
            got = session.run(feeds)
            ort_out = _ort(case.model, feeds)
            for expected, from_ort, value in zip(outputs, ort_out, got.values()):
                np.testing.assert_array_equal(value, expected, err_msg=name)
                np.testing.assert_array_equal(value, from_ort, err_msg=name)


# Cases where onnx.reference itself differs from the expected outputs ONNX ships; there the
# Session must give what the plain reference gives.
REFERENCE_QUIRKS = {
    "test_if_opt": "an optional sequence comes back wrapped in one more list",
}
# Cases that onnx.reference cannot run at all; the Session fails the same way.
REFERENCE_FAILS = {
    "test_scan_sum": "Scan-8 passes its absent sequence_lens input into the body",
}


def test_onnx_node_cases_of_other_operators_through_the_reference():
    cases = {k: c for k, c in _onnx_cases(*_OTHERS).items()
             if not k.startswith(("test_scatter", "test_gather_elements"))}
    assert len(cases) > 40
    for name, case in sorted(cases.items()):
        session = Session(case.model)
        for inputs, outputs in case.data_sets:
            if name in REFERENCE_FAILS:
                with pytest.raises(RuntimeError):
                    ReferenceEvaluator(case.model).run(None, _feeds(case.model, inputs))
                with pytest.raises(RuntimeError):
                    session.run(_feeds(case.model, inputs))
                continue
            got = session.run(_feeds(case.model, inputs))
            if name in REFERENCE_QUIRKS:
                plain = ReferenceEvaluator(case.model).run(None, _feeds(case.model, inputs))
                assert repr(list(got.values())) == repr(plain), name
                continue
            for expected, value in zip(outputs, got.values()):
                if isinstance(expected, list):
                    assert len(value) == len(expected), name
                    for a, b in zip(value, expected):
                        np.testing.assert_allclose(a, b, rtol=case.rtol, atol=case.atol, err_msg=name)
                else:
                    np.testing.assert_allclose(value, expected, rtol=case.rtol, atol=case.atol, err_msg=name)


def test_same_as_the_plain_reference_where_it_is_defined():
    g, feeds = _message_passing(seed=3)
    model = g.to_onnx()
    plain = ReferenceEvaluator(model).run(None, feeds)
    for e, v in zip(plain, Session(model).run(feeds).values()):
        np.testing.assert_allclose(v, e, rtol=1e-6)


def test_sessions_from_bytes_and_path(tmp_path):
    g, feeds = _message_passing()
    path = tmp_path / "mp.onnx"
    g.save(path)
    a = Session(path).run(feeds)
    b = Session(g.to_onnx().SerializeToString()).run(feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_feed_errors():
    g, feeds = _message_passing()
    s = Session(g)
    with pytest.raises(ValueError, match="missing input.*'dst'"):
        s.run({"x": feeds["x"], "src": feeds["src"]})
    with pytest.raises(ValueError, match="unknown input.*'nope'"):
        s.run({**feeds, "nope": feeds["x"]})
    with pytest.raises(TypeError, match="'x' must have dtype float32"):
        s.run({**feeds, "x": feeds["x"].astype(np.float64)})
    with pytest.raises(ValueError, match="'x' has shape"):
        s.run({**feeds, "x": feeds["x"][:, :2]})
    with pytest.raises(TypeError):
        s.run([feeds["x"]])


def test_runtime_errors_name_the_node():
    g = _scatter_graph("add", "float32", (3, 2), (1, 2), 0)
    feeds = {"x": np.zeros((3, 2), np.float32), "i": np.array([[0, 7]]), "u": np.ones((1, 2), np.float32)}
    with pytest.raises(IndexError, match=r"node 's' \(ScatterElements\): index 7 at indices\[0, 1\]"):
        Session(g).run(feeds)


def test_graph_changes_reach_the_session():
    g, feeds = _message_passing()
    s = Session(g)
    before = s.run(feeds)["out"]
    g.set_initializer("w", 2 * g.initializers["w"])
    np.testing.assert_allclose(s.run(feeds)["out"], 2 * before, rtol=1e-6)
    g.output(g.node("Neg", ["out"], name="neg", output_names=["neg"]))
    after = s.run(feeds)
    assert s.output_names == ["out", "mean", "neg"]
    np.testing.assert_allclose(after["neg"], -2 * before, rtol=1e-6)


def test_deprecated_scatter_runs_on_scatterx():
    node = helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1)
    t = onnx.TensorProto
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("d", t.FLOAT, [1, 5]), helper.make_tensor_value_info("i", t.INT64, [1, 2]),
         helper.make_tensor_value_info("u", t.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", t.FLOAT, [1, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    feeds = {"d": np.arange(5, dtype=np.float32)[None], "i": np.array([[1, -1]]), "u": np.array([[9, 8]], np.float32)}
    np.testing.assert_array_equal(Session(model).run(feeds)["y"], [[0, 9, 2, 3, 8]])
    np.testing.assert_array_equal(_ort(model, feeds)[0], [[0, 9, 2, 3, 8]])


def test_backward_needs_training():
    g, feeds = _message_passing()
    s = Session(g)
    s.run(feeds)
    with pytest.raises(RuntimeError, match="training=True"):
        s.backward({"mean": np.float32(1)})
    with pytest.raises(RuntimeError, match="run first"):
        Session(g, training=True).backward({"mean": np.float32(1)})


def test_cli_run(tmp_path, capsys):
    from scatterx._cli import main

    g, feeds = _message_passing()
    model = tmp_path / "mp.onnx"
    g.save(model)
    args = ["run", str(model), "--output-dir", str(tmp_path / "out")]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    expected = _ort(g.to_onnx(), feeds)
    for name, value in zip(["out", "mean"], expected):
        assert f"{name}: shape {value.shape} dtype float32" in printed
        np.testing.assert_allclose(np.load(tmp_path / "out" / f"{name}.npy"), value, rtol=1e-5, atol=1e-6)


def test_cli_run_names_missing_and_unknown_inputs(tmp_path, capsys):
    from scatterx._cli import main

    g, feeds = _message_passing()
    model = tmp_path / "mp.onnx"
    g.save(model)
    np.save(tmp_path / "x.npy", feeds["x"])
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}"]) == 2
    assert "missing input(s) 'src', 'dst'" in capsys.readouterr().err
    assert main(["run", str(model), "--input", f"bogus={tmp_path / 'x.npy'}"]) == 2
    assert "unknown input(s) 'bogus'" in capsys.readouterr().err
    assert main(["run", str(model), "--input", "x"]) == 2
    assert "NAME=FILE.npy" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "none.onnx")]) == 2
    assert "none.onnx" in capsys.readouterr().err


def test_cli_run_output_file_names_stay_in_the_folder():
    from scatterx.onnx._run_cli import file_name

    taken: set[str] = set()
    assert file_name("../../etc/passwd", taken) == "_.._etc_passwd.npy"
    assert file_name("a/b", taken) == "a_b.npy"
    assert file_name("a:b", taken) == "a_b_1.npy"
    assert file_name("..", taken) == "_.npy"


def test_the_three_operators_run_on_scatterx_kernels():
    from scatterx.onnx import _reference_ops

    g = _scatter_graph("add", "float32", (3, 2), (1, 2), 0)
    g.output(g.gather_elements("y", np.array([[0, 1]]), name="g"))
    kinds = {type(op) for op in Session(g)._evaluator.rt_nodes_}
    assert kinds == {_reference_ops.ScatterElements, _reference_ops.GatherElements}


@pytest.mark.parametrize("shape", [(6,), (3, 5), (2, 3, 4)])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_models_equal_onnxruntime(shape, index_dtype):
    rng = np.random.default_rng(len(shape))
    for axis in range(-len(shape), len(shape)):
        index_shape = tuple(rng.integers(1, s + 1) if d != axis % len(shape) else 7 for d, s in enumerate(shape))
        g = Graph()
        x = g.input("x", "float64", shape)
        i = g.input("i", index_dtype, index_shape)
        g.output(g.gather_elements(x, i, axis=axis, output_names=["y"]))
        n = shape[axis]
        feeds = {"x": rng.standard_normal(shape), "i": rng.integers(-n, n, index_shape).astype(index_dtype)}
        np.testing.assert_array_equal(Session(g).run(feeds)["y"], _ort(g.to_onnx(), feeds)[0])
