"""Training through a graph: whole-graph gradients against finite differences (float64), lda_coeff
products, frozen nodes, parameter changes between steps, and the errors of backward."""

from __future__ import annotations

import numpy as np
import pytest

from scatterx.onnx import Graph, MissingGradientRuleError, Session

F64 = np.float64


def numeric_grads(graph: Graph, feeds: dict, cotangents: dict, names: list[str], eps: float = 1e-6) -> dict:
    """Central differences of sum(cotangent * output) over every element of each named tensor."""
    session = Session(graph)

    def loss(run_feeds):
        out = session.run(run_feeds)
        return sum(float(np.sum(c * out[k])) for k, c in cotangents.items())

    grads = {}
    for name in names:
        is_feed = name in feeds
        base = np.array(feeds[name] if is_feed else graph.initializers[name])
        grad = np.zeros_like(base)
        for k in np.ndindex(base.shape):
            values = []
            for step in (eps, -eps):
                v = base.copy()
                v[k] += step
                if is_feed:
                    values.append(loss({**feeds, name: v}))
                else:
                    graph.set_initializer(name, v)
                    values.append(loss(feeds))
            grad[k] = (values[0] - values[1]) / (2 * eps)
        if not is_feed:
            graph.set_initializer(name, base)
        grads[name] = grad
    return grads


def check_against_finite_differences(graph: Graph, feeds: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    session = Session(graph, training=True)
    outputs = session.run(feeds)
    cotangents = {k: rng.standard_normal(np.shape(v)) for k, v in outputs.items()}
    analytic = session.backward(cotangents)
    numeric = numeric_grads(graph, feeds, cotangents, list(analytic))
    for name in analytic:
        np.testing.assert_allclose(analytic[name], numeric[name], rtol=1e-5, atol=1e-7, err_msg=name)
    return analytic


def message_passing(n=5, e=8, f=3, h=4, seed=0):
    """Gather -> MatMul -> ScatterElements add (onto a self term) -> Relu -> MSE."""
    rng = np.random.default_rng(seed)
    g = Graph("mp")
    x = g.input("x", F64, (n, f))
    target = g.input("target", F64, (n, h))
    src = g.initializer("src", rng.integers(0, n, e), trainable=False)
    dst = g.initializer("dst", np.repeat(rng.integers(0, n, (e, 1)), h, axis=1), trainable=False)
    w = g.initializer("w", rng.standard_normal((f, h)))
    w_self = g.initializer("w_self", rng.standard_normal((f, h)))
    msg = g.node("MatMul", [g.node("Gather", [x, src], axis=0, name="gather"), w], name="message")
    own = g.node("MatMul", [x, w_self], name="self")
    agg = g.scatter_elements(own, dst, msg, reduction="add", name="aggregate")
    out = g.node("Relu", [agg], name="relu", output_names=["out"])
    diff = g.node("Sub", [out, target], name="diff")
    loss = g.node("ReduceMean", [g.node("Mul", [diff, diff], name="square")], keepdims=0, name="mse",
                  output_names=["loss"])
    g.output(loss)
    feeds = {"x": rng.standard_normal((n, f)), "target": rng.standard_normal((n, h))}
    return g, feeds


def test_message_passing_layer():
    g, feeds = message_passing()
    grads = check_against_finite_differences(g, feeds)
    assert sorted(grads) == ["target", "w", "w_self", "x"]  # not the index initializers


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_chain_of_scatter_and_gather(reduction):
    rng = np.random.default_rng(1)
    g = Graph("chain")
    x = g.input("x", F64, (4, 3))
    u = g.initializer("u", rng.uniform(0.5, 1.5, (5, 3)) * rng.choice([-1, 1], (5, 3)))
    idx = rng.integers(-4, 4, (5, 3))  # duplicate targets and negative indices
    s1 = g.scatter_elements(g.node("Tanh", [x]), idx, u, axis=0, reduction=reduction, name="s1")
    pick = g.gather_elements(s1, rng.integers(0, 3, (4, 5)), axis=1, name="pick")
    upd = g.node("Sigmoid", [g.gather_elements(pick, rng.integers(0, 5, (4, 2)), axis=1, name="again")])
    s2 = g.scatter_elements(g.node("Exp", [x]), rng.integers(0, 3, (4, 2)), upd, axis=1, reduction="add", name="s2")
    g.output(s2, pick)
    grads = check_against_finite_differences(g, {"x": rng.standard_normal((4, 3))}, seed=2)
    assert sorted(grads) == ["u", "x"]


def test_shared_input_used_twice():
    rng = np.random.default_rng(3)
    g = Graph("shared")
    x = g.input("x", F64, (3, 4))
    w = g.initializer("w", rng.standard_normal((4, 4)))
    sq = g.node("Mul", [x, x], name="square")
    picked = g.gather_elements(x, rng.integers(0, 3, (2, 4)), axis=0, name="pick")
    s = g.scatter_elements(sq, rng.integers(0, 3, (2, 4)), picked, reduction="mul", name="s")
    both = g.node("Add", [g.node("MatMul", [s, w]), g.node("MatMul", [x, w])])
    broadcast = g.node("Div", [both, g.node("ReduceSum", [x, np.array([0], np.int64)], keepdims=1)])
    g.output(g.node("Concat", [broadcast, g.node("Neg", [x])], axis=0))
    check_against_finite_differences(g, {"x": rng.uniform(0.5, 2.0, (3, 4))}, seed=4)


def _path_graph(lda=(1.0, 1.0, 1.0)):
    rng = np.random.default_rng(5)
    g = Graph("path")
    x = g.input("x", F64, (3, 2))
    u = g.input("u", F64, (2, 2))
    t = g.node("Tanh", [x], name="tanh", lda_coeff=lda[0])
    s = g.scatter_elements(t, np.array([[0, 2], [2, 2]]), u, reduction="add", name="scatter", lda_coeff=lda[1])
    g.output(g.node("Neg", [s], name="neg", lda_coeff=lda[2], output_names=["y"]))
    return g, {"x": rng.standard_normal((3, 2)), "u": rng.standard_normal((2, 2))}


def _grads(g, feeds, cot=None):
    s = Session(g, training=True)
    out = s.run(feeds)
    return s.backward({"y": np.ones_like(out["y"]) if cot is None else cot})


def test_lda_coeff_products_along_a_path():
    g, feeds = _path_graph()
    plain = _grads(g, feeds)
    scaled = _grads(*_path_graph((2.0, 0.5, 3.0)))
    np.testing.assert_allclose(scaled["x"], plain["x"] * (3.0 * 0.5 * 2.0), rtol=1e-14)
    np.testing.assert_allclose(scaled["u"], plain["u"] * (3.0 * 0.5), rtol=1e-14)


def test_frozen_node_sends_nothing():
    g, feeds = _path_graph()
    plain = _grads(g, feeds)
    g.set_training("tanh", False)
    frozen = _grads(g, feeds)
    np.testing.assert_array_equal(frozen["x"], np.zeros((3, 2)))
    np.testing.assert_array_equal(frozen["u"], plain["u"])
    g.set_training("tanh", True)
    g.set_training("scatter", False)
    frozen = _grads(g, feeds)
    np.testing.assert_array_equal(frozen["x"], np.zeros((3, 2)))
    np.testing.assert_array_equal(frozen["u"], np.zeros((2, 2)))
    assert Session(g).run(feeds)["y"].shape == (3, 2)  # a frozen node still runs forward


def test_frozen_message_passing_weight_gets_no_gradient():
    g, feeds = message_passing()
    g.set_training("message", False)
    grads = check_against_finite_differences_with_frozen(g, feeds)
    np.testing.assert_array_equal(grads["w"], 0)
    assert np.any(grads["w_self"] != 0)


def check_against_finite_differences_with_frozen(g, feeds):
    """A frozen node stops the gradient: the rest of the graph still matches finite differences."""
    rng = np.random.default_rng(7)
    s = Session(g, training=True)
    out = s.run(feeds)
    cot = {k: rng.standard_normal(np.shape(v)) for k, v in out.items()}
    grads = s.backward(cot)
    numeric = numeric_grads(g, feeds, cot, ["w_self", "target"])
    for name in numeric:
        np.testing.assert_allclose(grads[name], numeric[name], rtol=1e-5, atol=1e-7)
    return grads


def test_changes_take_effect_at_the_next_step():
    g, feeds = _path_graph()
    s = Session(g, training=True)
    s.run(feeds)
    plain = s.backward({"y": np.ones((3, 2))})
    g.set_lda_coeff("neg", 4.0)
    g.set_training("scatter", False)
    # The step that already ran keeps the parameters it ran with.
    same = s.backward({"y": np.ones((3, 2))})
    np.testing.assert_array_equal(same["x"], plain["x"])
    s.run(feeds)
    after = s.backward({"y": np.ones((3, 2))})
    np.testing.assert_array_equal(after["x"], np.zeros((3, 2)))
    g.set_training(None, True)
    s.run(feeds)
    np.testing.assert_allclose(s.backward({"y": np.ones((3, 2))})["x"], 4 * plain["x"], rtol=1e-14)


def test_sgd_through_set_initializer_lowers_the_loss():
    g, feeds = message_passing(seed=8)
    s = Session(g, training=True)
    losses = []
    for _ in range(30):
        losses.append(float(s.run(feeds)["loss"]))
        grads = s.backward({"loss": np.float64(1.0)})
        for name in ("w", "w_self"):
            g.set_initializer(name, g.initializers[name] - 0.1 * grads[name])
    assert losses[-1] < 0.8 * losses[0]


def test_missing_rule_names_the_node_and_operator():
    g = Graph()
    x = g.input("x", F64, (2, 3))
    g.output(g.node("Softmax", [g.node("Tanh", [x])], axis=1, name="soft", output_names=["y"]))
    s = Session(g, training=True)
    s.run({"x": np.zeros((2, 3))})
    with pytest.raises(MissingGradientRuleError, match=r"node 'soft' \(Softmax\)"):
        s.backward({"y": np.ones((2, 3))})
    assert isinstance(MissingGradientRuleError("m"), NotImplementedError)


def test_nodes_off_the_gradient_path_need_no_rule():
    g = Graph()
    x = g.input("x", F64, (2, 3))
    shape = g.node("Shape", [x], name="shape")  # integer output: no gradient reaches it
    flat = g.node("Reshape", [x, g.node("Concat", [np.array([-1], np.int64), g.node("Slice", [
        shape, np.array([1], np.int64), np.array([2], np.int64)])], axis=0)], name="reshape")
    g.output(g.node("Exp", [flat], output_names=["y"]))
    s = Session(g, training=True)
    x0 = np.arange(6.0).reshape(2, 3) / 6
    s.run({"x": x0})
    np.testing.assert_allclose(s.backward({"y": np.ones((2, 3))})["x"], np.exp(x0), rtol=1e-14)


def test_backward_arguments():
    g, feeds = _path_graph()
    g.output(g.node("Identity", ["x"], name="copy", output_names=["x_copy"]))
    s = Session(g, training=True)
    s.run(feeds)
    only_copy = s.backward({"x_copy": np.full((3, 2), 2.0)})
    assert sorted(only_copy) == ["x"]  # u does not reach x_copy
    np.testing.assert_array_equal(only_copy["x"], np.full((3, 2), 2.0))
    both = s.backward({"y": np.ones((3, 2)), "x_copy": np.full((3, 2), 2.0)})
    just_y = s.backward({"y": np.ones((3, 2)), "x_copy": None})
    np.testing.assert_allclose(both["x"], just_y["x"] + 2.0, rtol=1e-14)
    with pytest.raises(ValueError, match="not an output"):
        s.backward({"x": np.ones((3, 2))})
    with pytest.raises(ValueError, match="shape"):
        s.backward({"y": np.ones((2, 2))})


def test_demo_trains_and_reports(capsys):
    from scatterx._cli import main

    assert main(["demo", "--steps", "120"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "\r" not in out  # captured output is not a terminal: plain lines, no bar
    steps = [float(line.split("loss")[1]) for line in lines if line.strip().startswith("step ")]
    assert len(steps) >= 3 and steps[-1] < 0.2 * steps[0]
    assert any("set_lda_coeff('aggregate', 0.5): |dW| x0.500  |dW_self| x0.500" in line for line in lines)
    assert any("set_lda_coeff('message', 0.1): |dW| x0.100  |dW_self| x1.000" in line for line in lines)
    frozen = next(line for line in lines if "set_training('message', False)" in line)
    assert "max |change| of W 0.0e+00" in frozen
    assert "check_model(full_check=True) passes" in out
    assert out.count("-> match") == 2 and "Outputs match" in out


def test_demo_keeps_the_model(tmp_path):
    import onnxruntime as ort

    from scatterx._cli import main
    from scatterx.onnx._demo import dataset

    path = tmp_path / "trained.onnx"
    assert main(["demo", "--steps", "5", "--output", str(path)]) == 0
    back = Graph.from_onnx(path)
    assert back.get_lda_coeff() == dict.fromkeys([n.name for n in back.nodes], 1.0)
    assert back.get_training("message") is True
    data = dataset()
    feeds = {"x": data["x"], "target": data["target"]}
    (prediction, loss) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(loss, np.mean((prediction - data["target"]) ** 2), rtol=1e-5)
