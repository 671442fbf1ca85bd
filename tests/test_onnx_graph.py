"""scatterx.onnx.Graph: definition, checks when a node is added, export opset, metadata, import, safety."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from scatterx.onnx import Graph, Session

F32 = np.float32


def _mp_graph(reduction="add", dtype="float32"):
    g = Graph("mp")
    x = g.input("x", dtype, ("N", 4))
    idx = g.input("idx", "int64", ("E", 4))
    msg = g.input("msg", dtype, ("E", 4))
    y = g.scatter_elements(x, idx, msg, reduction=reduction, name="aggregate", output_names=["y"])
    g.output(y)
    return g


def test_define_handles():
    g = Graph("g")
    x = g.input("x", "float32", ("N", 3, None))
    assert (x.name, x.dtype, x.shape) == ("x", np.dtype(F32), ("N", 3, None))
    w = g.initializer("w", np.ones((3, 2), F32))
    assert w.shape == (3, 2) and g["w"] is w and g["x"] is x
    assert g.trainable == ["w"]
    b = g.initializer("b", np.zeros(2, F32), trainable=False)
    g.initializer("idx", np.arange(3))  # integers are constants, whatever the flag
    assert g.trainable == ["w"] and "b" in g and "idx" in g
    with pytest.raises(KeyError, match="nope"):
        g["nope"]
    with pytest.raises(ValueError, match="already used"):
        g.input("w", "float32", (1,))
    g.set_initializer("w", np.full((3, 2), 2, F32))
    np.testing.assert_array_equal(g.initializers["w"], np.full((3, 2), 2, F32))
    with pytest.raises(ValueError, match="shape"):
        g.set_initializer("w", np.ones((2, 2), F32))
    with pytest.raises(TypeError, match="dtype"):
        g.set_initializer("w", np.ones((3, 2), np.float64))
    with pytest.raises(KeyError):
        g.set_initializer("x", np.ones(3, F32))
    assert b.dtype == np.dtype(F32)


def test_nodes_return_handles_with_inferred_types():
    g = Graph()
    x = g.input("x", "float32", ("N", 4))
    i = g.input("i", "int32", ("N", 2))
    w = g.initializer("w", np.ones((4, 3), F32))
    gathered = g.gather_elements(x, i, axis=1, name="pick")
    assert (gathered.dtype, gathered.shape) == (np.dtype(F32), ("N", 2))
    h = g.node("MatMul", [x, w], name="mm", output_names=["h"])
    assert (h.name, h.dtype, h.shape) == ("h", np.dtype(F32), ("N", 3))
    t = g.node("Transpose", [h], perm=[1, 0])
    assert t.shape == (3, "N")
    r = g.node("Reshape", [w, np.array([2, 6], np.int64)])
    assert r.shape == (2, 6)
    values, idx = g.node("TopK", [h, np.array([2], np.int64)], n_outputs=2, axis=1)
    assert values.shape == ("N", 2) and idx.dtype == np.dtype(np.int64)
    assert [n.name for n in g.nodes] == ["pick", "mm", "Transpose_2", "Reshape_3", "TopK_4"]


# (what, call, exception, words every message must contain)
_BAD = [
    ("indices dtype", lambda g: g.scatter_elements("x", "x", "x", name="s"), TypeError, ["'s'", "int32 or int64", "float32"]),
    ("updates dtype", lambda g: g.scatter_elements("x", "i", "d", name="s"), TypeError, ["'s'", "float32", "float64"]),
    ("reduction", lambda g: g.scatter_elements("x", "i", "u", reduction="sum", name="s"), ValueError, ["'s'", "'sum'"]),
    ("reduction type", lambda g: g.scatter_elements("c", "i", "cu", reduction="max", name="s"), TypeError, ["'s'", "complex64", "max"]),
    ("axis range", lambda g: g.scatter_elements("x", "i", "u", axis=2, name="s"), ValueError, ["'s'", "axis 2"]),
    ("axis type", lambda g: g.gather_elements("x", "i", axis=1.0, name="s"), TypeError, ["'s'", "axis"]),
    ("rank", lambda g: g.gather_elements("x", "i3", name="s"), ValueError, ["'s'", "rank"]),
    ("updates shape", lambda g: g.scatter_elements("x", "i", "u5", name="s"), ValueError, ["'s'", "updates"]),
    ("fits", lambda g: g.gather_elements("x", "wide", axis=0, name="s"), ValueError, ["'s'", "dimension 1", "5 > 4"]),
    ("rank 0", lambda g: g.gather_elements("scalar", "scalar_i", name="s"), ValueError, ["'s'", "rank"]),
    ("unsupported T", lambda g: g.gather_elements("f8", "i", name="s"), TypeError, ["'s'"]),
    ("node name", lambda g: g.gather_elements("x", "i", name="taken"), ValueError, ["'taken'", "already"]),
    ("tensor name", lambda g: g.gather_elements("x", "i", name="s", output_names=["x"]), ValueError, ["'s'", "'x'"]),
    ("unknown tensor", lambda g: g.gather_elements("x", "missing", name="s"), ValueError, ["'s'", "'missing'"]),
    ("generic type", lambda g: g.node("Add", ["x", "d"], name="s"), TypeError, ["'s'", "tensor(double)"]),
    ("generic shape", lambda g: g.node("MatMul", ["x", "x"], name="s"), ValueError, ["'s'"]),
    ("generic attribute", lambda g: g.node("Relu", ["x"], name="s", alpha=1.0), ValueError, ["'s'", "alpha"]),
    ("unknown op", lambda g: g.node("Frobnicate", ["x"], name="s"), ValueError, ["'s'", "Frobnicate"]),
    ("lda", lambda g: g.gather_elements("x", "i", name="s", lda_coeff=float("nan")), ValueError, ["'s'", "lda_coeff"]),
    ("training", lambda g: g.gather_elements("x", "i", name="s", training=1), TypeError, ["'s'", "training"]),
]


def _bad_graph():
    g = Graph()
    g.input("x", "float32", (3, 4))
    g.input("d", "float64", (3, 4))
    g.input("i", "int64", (2, 4))
    g.input("i3", "int64", (2, 4, 1))
    g.input("u", "float32", (2, 4))
    g.input("u5", "float32", (2, 5))
    g.input("wide", "int64", (2, 5))
    g.input("c", "complex64", (3, 4))
    g.input("cu", "complex64", (2, 4))
    g.input("scalar", "float32", ())
    g.input("scalar_i", "int64", ())
    g.input("f8", onnx.TensorProto.FLOAT8E4M3FN, (3, 4))
    g.gather_elements("x", "i", name="taken")
    return g


@pytest.mark.parametrize("what, call, exc, words", _BAD, ids=[b[0] for b in _BAD])
def test_checked_when_added(what, call, exc, words):
    g = _bad_graph()
    before = (len(g), set(g._tensors))
    with pytest.raises(exc) as info:
        call(g)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert (len(g), set(g._tensors)) == before, "a refused node leaves the graph as it was"


# SPEC section 6: the lowest opset of each use of the two operators.
_OPSETS = [
    ("none", "float32", 11), ("none", "bfloat16", 13), ("add", "float32", 16), ("mul", "float64", 16),
    ("max", "float32", 18), ("min", "int32", 18), ("add", "bfloat16", 16),
]


@pytest.mark.parametrize("reduction, dtype, opset", _OPSETS)
def test_scatter_opset(reduction, dtype, opset):
    model = _mp_graph(reduction, dtype).to_onnx()
    assert [(o.domain, o.version) for o in model.opset_import] == [("", opset)]
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == helper.find_min_ir_version_for(list(model.opset_import))


@pytest.mark.parametrize("dtype, opset", [("float32", 11), ("bfloat16", 13)])
def test_gather_opset(dtype, opset):
    g = Graph()
    g.output(g.gather_elements(g.input("x", dtype, (3, 4)), g.input("i", "int64", (2, 4))))
    assert g.to_onnx().opset_import[0].version == opset


# Generic operators: the version where the way the node is written first means what it means now.
_GENERIC = [
    ("Relu", lambda g, x: g.node("Relu", [x]), 11),
    ("Softmax", lambda g, x: g.node("Softmax", [x], axis=1), 13),  # 2-D coercion before 13
    ("ReduceSum axes input", lambda g, x: g.node("ReduceSum", [x, np.array([1], np.int64)]), 13),
    ("ReduceMean axes input", lambda g, x: g.node("ReduceMean", [x, np.array([1], np.int64)]), 18),
    ("ReduceMean axes attribute", lambda g, x: _at(g, 17, "ReduceMean", [x], axes=[1]), 11),
    ("Reshape", lambda g, x: g.node("Reshape", [x, np.array([4, 3], np.int64)]), 11),
    ("Reshape allowzero", lambda g, x: g.node("Reshape", [x, np.array([4, 3], np.int64)], allowzero=1), 14),
    ("Unsqueeze axes input", lambda g, x: g.node("Unsqueeze", [x, np.array([0], np.int64)]), 13),
]


def _at(g, opset, *args, **kwargs):
    g._imported = None
    g._defined_opset = lambda: opset  # a node defined against an older opset, as an import brings it
    return g.node(*args, **kwargs)


@pytest.mark.parametrize("what, build, opset", _GENERIC, ids=[c[0] for c in _GENERIC])
def test_generic_opset_and_onnxruntime(what, build, opset):
    g = Graph()
    x = g.input("x", "float32", (3, 4))
    g.output(build(g, x))
    model = g.to_onnx()
    assert model.opset_import[0].version == opset
    onnx.checker.check_model(model, full_check=True)
    feed = np.arange(12, dtype=F32).reshape(3, 4) / 7
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": feed})
    got = Session(g).run({"x": feed})
    for e, (name, v) in zip(expected, got.items()):
        np.testing.assert_allclose(v, e, rtol=1e-6, err_msg=name)


def test_export_names_and_attributes_exactly():
    g = Graph("named")
    x = g.input("x", "float32", ("N", 4))
    i = g.input("i", "int64", ("N", 4))
    y = g.scatter_elements(x, i, x, axis=-1, reduction="max", name="my scatter", output_names="out:0")
    z = g.gather_elements(y, i, axis=1, name="my gather", output_names=["gathered"])
    g.output(z, y)
    model = g.to_onnx()
    nodes = model.graph.node
    assert [(n.name, n.op_type, list(n.output)) for n in nodes] == [
        ("my scatter", "ScatterElements", ["out:0"]), ("my gather", "GatherElements", ["gathered"])]
    attrs = {a.name: helper.get_attribute_value(a) for a in nodes[0].attribute}
    assert attrs == {"axis": -1, "reduction": b"max"}
    assert [o.name for o in model.graph.output] == ["gathered", "out:0"]
    assert model.graph.name == "named"


def test_training_parameters_round_trip(tmp_path):
    g = _mp_graph()
    w = g.initializer("w", np.eye(4, dtype=F32))
    frozen = g.initializer("frozen", np.eye(4, dtype=F32), trainable=False)
    h = g.node("MatMul", ["y", w], name="mm", lda_coeff=0.25)
    g.output(g.node("MatMul", [h, frozen], name="mm2", training=False))
    g.set_lda_coeff("aggregate", 1 / 3)
    path = tmp_path / "model.onnx"
    g.save(path)
    back = Graph.from_onnx(path)
    assert back.get_lda_coeff() == {"aggregate": 1 / 3, "mm": 0.25, "mm2": 1.0}
    assert back.get_training() == {"aggregate": True, "mm": True, "mm2": False}
    assert back.trainable == ["w"]
    props = {p.key: p.value for p in onnx.load(path).metadata_props}
    stored = {e["name"]: (e["training"], e["lda_coeff"]) for e in json.loads(props["scatterx.nodes"])}
    assert stored == {"aggregate": (True, 1 / 3), "mm": (True, 0.25), "mm2": (False, 1.0)}
    again = back.to_onnx()
    assert again.SerializeToString() == Graph.from_onnx(again).to_onnx().SerializeToString()


def test_get_set_by_name_index_and_all():
    g = _mp_graph()
    g.gather_elements("y", "idx", name="g2", lda_coeff=2.0, training=False)
    assert g.get_lda_coeff() == {"aggregate": 1.0, "g2": 2.0}
    assert g.get_lda_coeff(1) == 2.0 and g.get_lda_coeff(-1) == 2.0 and g.get_lda_coeff("aggregate") == 1.0
    g.set_lda_coeff(0, 0.5)
    assert g.get_lda_coeff("aggregate") == 0.5
    g.set_lda_coeff(None, 3)
    assert g.get_lda_coeff() == {"aggregate": 3.0, "g2": 3.0}
    assert g.get_training() == {"aggregate": True, "g2": False}
    g.set_training("g2", True)
    g.set_training(None, False)
    assert g.get_training() == {"aggregate": False, "g2": False}
    with pytest.raises(KeyError, match="nope"):
        g.get_lda_coeff("nope")
    with pytest.raises(IndexError):
        g.set_training(2, True)
    with pytest.raises(TypeError):
        g.set_training("g2", "yes")
    with pytest.raises(TypeError):
        g.get_training(1.5)
    with pytest.raises(ValueError):
        g.set_lda_coeff(None, float("inf"))


def test_types_and_symbolic_dims_in_the_model():
    model = _mp_graph("none", "bfloat16").to_onnx()
    x = model.graph.input[0].type.tensor_type
    assert x.elem_type == onnx.TensorProto.BFLOAT16
    assert [d.dim_param or d.dim_value for d in x.shape.dim] == ["N", 4]


def test_strings_export():
    g = Graph()
    s = g.input("s", "string", (3,))
    g.output(g.scatter_elements(s, np.array([0], np.int64), np.array(["z"], object)))
    model = g.to_onnx()
    assert model.opset_import[0].version == 11
    out = Session(g).run({"s": np.array(["a", "b", "c"], object)})
    assert list(out.values())[0].tolist() == ["z", "b", "c"]


def _node_models():
    """Some ONNX node cases (models ONNX itself ships as valid), built in memory."""
    import importlib

    import onnx.backend.test.case.node as cases

    for module in ("scatterelements", "gatherelements", "scatter", "if_", "loop", "reshape", "softmax", "scan", "split"):
        importlib.import_module(f"{cases.__name__}.{module}")
    return {c.name: c for c in cases._NodeTestCases}


def test_import_any_valid_model():
    for name, case in sorted(_node_models().items()):
        g = Graph.from_onnx(case.model)
        model = g.to_onnx()
        assert [n.op_type for n in model.graph.node] == [n.op_type for n in case.model.graph.node], name
        assert {o.domain: o.version for o in model.opset_import}[""] == case.model.opset_import[0].version, name
        assert [i.name for i in model.graph.input] == [i.name for i in case.model.graph.input], name


def test_add_nodes_to_an_imported_graph():
    cases = _node_models()
    g = Graph.from_onnx(cases["test_scatter_elements_with_axis"].model)
    assert g.to_onnx().opset_import[0].version == 18
    y = g.outputs[0]
    g.output(g.gather_elements(y, g.inputs[1], axis=1, name="again"))
    model = g.to_onnx()
    assert [n.name for n in model.graph.node][-1] == "again"
    old = Graph.from_onnx(cases["test_scatter_with_axis"].model)  # opset 10, deprecated Scatter
    with pytest.raises(ValueError, match="only up to opset 10, but the new node needs opset 16"):
        old.scatter_elements(old.inputs[0], old.inputs[1], old.inputs[2], reduction="add")


def test_unnamed_and_repeated_node_names_get_names():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Neg", ["b"], ["z"], name="n")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    g = Graph.from_onnx(model)
    assert [n.name for n in g.nodes] == ["Relu_0", "n", "n_1"]


def test_malformed_models_get_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        Graph.from_onnx(b"\x08\x07garbage that is not protobuf \xff\xff")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        Graph.from_onnx(bad)
    node = helper.make_node("Relu", ["nowhere"], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        Graph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    model = _mp_graph().to_onnx()
    model.metadata_props.add(key="scatterx.nodes", value="[{]")
    with pytest.raises(ValueError, match="metadata"):
        Graph.from_onnx(model)
    with pytest.raises(TypeError):
        Graph.from_onnx(42)


def _external_model(location: str) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4, dtype=F32), "w")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        w.external_data.add(key=key, value=value)
    node = helper.make_node("Relu", ["w"], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin", "link.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=F32).tobytes())
    (folder / "link.bin").symlink_to(secret)
    path = folder / "model.onnx"
    path.write_bytes(_external_model(location).SerializeToString())
    with pytest.raises(ValueError, match="outside the model's folder"):
        Graph.from_onnx(path)


def test_external_data_inside_the_folder_loads(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.array([-1, 2, -3, 4], F32).tobytes())
    path = tmp_path / "model.onnx"
    path.write_bytes(_external_model("w.bin").SerializeToString())
    out = Session(path).run({})
    np.testing.assert_array_equal(out["y"], [0, 2, 0, 4])
    with pytest.raises(ValueError, match="external data is not loaded"):
        Graph.from_onnx(_external_model("w.bin"))


def test_bfloat16_initializer_round_trip():
    g = Graph()
    w = g.initializer("w", np.array([1.5, -2.0], ml_dtypes.bfloat16))
    g.output(g.gather_elements(w, np.array([1, 0, 1], np.int64)))
    back = Graph.from_onnx(g.to_onnx())
    assert back.initializers["w"].dtype == np.dtype(ml_dtypes.bfloat16)
    assert back.to_onnx().opset_import[0].version == 13


def test_generic_node_of_the_two_operators_gets_their_checks():
    g = Graph()
    x = g.input("x", "float32", (3, 4))
    wide = g.input("wide", "int64", (2, 5))
    with pytest.raises(ValueError, match=r"node 'n' \(GatherElements\).*dimension 1 has 5 > 4"):
        g.node("GatherElements", [x, wide], name="n")
    i = g.input("i", "int64", (2, 4))
    y = g.node("ScatterElements", [x, i, g.input("u", "float32", (2, 4))], name="s", reduction="min", axis=0)
    assert (y.shape, g.get_lda_coeff("s")) == ((3, 4), 1.0)
    g.output(y)
    assert g.to_onnx().opset_import[0].version == 18


def test_node_with_subgraphs():
    t = onnx.TensorProto
    then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", t.FLOAT, [3])])
    else_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", t.FLOAT, [3])])
    g = Graph()
    c = g.input("c", "bool", ())
    g.input("x", "float32", (3,))
    g.output(g.node("If", [c], then_branch=then_branch, else_branch=else_branch, output_names=["y"]))
    model = g.to_onnx()
    assert model.graph.output[0].type.tensor_type.elem_type == t.FLOAT  # inferred on export
    for cond, expected in ((True, [1, -2, 3]), (False, [0, 2, 0])):
        feeds = {"c": np.array(cond), "x": np.array([-1, 2, -3], F32)}
        np.testing.assert_array_equal(Session(g).run(feeds)["y"], expected)
        np.testing.assert_array_equal(
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0],
            expected)
