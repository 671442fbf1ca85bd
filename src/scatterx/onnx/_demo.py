"""The main part of ``scatterx demo``: train a one-layer message-passing network through an ONNX graph.

The data set is a small synthetic graph made from a fixed seed: 48 nodes with 8 features on a
ring plus random chords (192 directed edges), and targets from a hidden "teacher" layer of the
same architecture. The student is the layer

    out = Relu(ScatterElements(x @ W_self, dst, Gather(x, src) @ W, reduction="add"))

with a mean-squared-error loss, trained by plain SGD through `Session(training=True)`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import TextIO

import numpy as np
import onnx

from ._graph import Graph
from ._session import Session

N_NODES, N_FEATURES, N_HIDDEN, N_CHORDS = 48, 8, 4, 144
LEARNING_RATE = 0.1


def dataset(seed: int = 7) -> dict[str, np.ndarray]:
    """The embedded synthetic graph: features, edge lists and the teacher's targets (float32)."""
    rng = np.random.default_rng(seed)
    ring = np.arange(N_NODES)
    src = np.concatenate([ring, (ring + 1) % N_NODES, rng.integers(0, N_NODES, N_CHORDS)])
    dst = np.concatenate([(ring + 1) % N_NODES, ring, rng.integers(0, N_NODES, N_CHORDS)])
    x = rng.standard_normal((N_NODES, N_FEATURES)).astype(np.float32)
    w_true = (rng.standard_normal((N_FEATURES, N_HIDDEN)) / 4).astype(np.float32)
    w_self_true = (rng.standard_normal((N_FEATURES, N_HIDDEN)) / 2).astype(np.float32)
    agg = x @ w_self_true
    np.add.at(agg, dst, x[src] @ w_true)
    return {
        "x": x, "src": src.astype(np.int64), "dst": dst.astype(np.int64),
        "target": np.maximum(agg, 0).astype(np.float32),
        "w0": (rng.standard_normal((N_FEATURES, N_HIDDEN)) / 4).astype(np.float32),
        "w_self0": (rng.standard_normal((N_FEATURES, N_HIDDEN)) / 4).astype(np.float32),
    }


def build(data: dict[str, np.ndarray]) -> Graph:
    """Gather -> MatMul -> ScatterElements add -> Relu, and the MSE loss, as an ONNX graph."""
    g = Graph("message_passing")
    x = g.input("x", "float32", ("nodes", N_FEATURES))
    target = g.input("target", "float32", ("nodes", N_HIDDEN))
    src = g.initializer("src", data["src"], trainable=False)
    dst = g.initializer("dst", np.repeat(data["dst"][:, None], N_HIDDEN, axis=1), trainable=False)
    w = g.initializer("W", data["w0"])
    w_self = g.initializer("W_self", data["w_self0"])
    neighbours = g.node("Gather", [x, src], axis=0, name="gather")
    messages = g.node("MatMul", [neighbours, w], name="message")
    own = g.node("MatMul", [x, w_self], name="self")
    agg = g.scatter_elements(own, dst, messages, reduction="add", name="aggregate")
    out = g.node("Relu", [agg], name="relu", output_names=["prediction"])
    diff = g.node("Sub", [out, target], name="error")
    loss = g.node("ReduceMean", [g.node("Mul", [diff, diff], name="square")], keepdims=0, name="mse",
                  output_names=["loss"])
    g.output(out, loss)
    return g


class _Progress:
    """A progress bar on a terminal; a plain line every `every` steps otherwise."""

    def __init__(self, total: int, stream: TextIO, every: int = 50) -> None:
        self.total, self.stream, self.every = total, stream, every
        self.tty = stream.isatty()

    def update(self, step: int, loss: float) -> None:
        if self.tty:
            done = int(30 * step / self.total)
            self.stream.write(f"\r  [{'#' * done}{'.' * (30 - done)}] step {step:4d}/{self.total}  loss {loss:.5f}")
            if step == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif step == 1 or step % self.every == 0 or step == self.total:
            print(f"  step {step:4d}/{self.total}  loss {loss:.5f}", file=self.stream)


def _train(g: Graph, session: Session, feeds: dict, steps: int, stream: TextIO) -> list[float]:
    progress = _Progress(steps, stream)
    losses = []
    for step in range(1, steps + 1):
        loss = float(session.run(feeds)["loss"])
        grads = session.backward({"loss": np.float32(1.0)})
        for name in g.trainable:
            g.set_initializer(name, g.initializers[name] - np.float32(LEARNING_RATE) * grads[name])
        losses.append(loss)
        progress.update(step, loss)
    return losses


def _norm(a: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64)))


def run(steps: int = 300, output: str | None = None, stream: TextIO | None = None) -> int:
    """Train, show lda_coeff and freezing, export, and compare onnxruntime with Session (0: they match)."""
    stream = sys.stdout if stream is None else stream
    start = time.perf_counter()
    data = dataset()
    g = build(data)
    feeds = {"x": data["x"], "target": data["target"]}
    session = Session(g, training=True)
    print(f"\nTraining a message-passing layer through an ONNX graph ({N_NODES} nodes, "
          f"{len(data['src'])} edges, {N_FEATURES} -> {N_HIDDEN} features)", file=stream)
    print("  nodes: " + " -> ".join(f"{n.name} ({n.op_type})" for n in g.nodes), file=stream)
    print(f"  plain SGD, learning rate {LEARNING_RATE}, {steps} steps", file=stream)
    losses = _train(g, session, feeds, steps, stream)
    print(f"  loss {losses[0]:.5f} -> {losses[-1]:.5f}", file=stream)

    print("\nlda_coeff scales every gradient a node sends to its inputs", file=stream)
    session.run(feeds)
    base = session.backward({"loss": np.float32(1.0)})
    for node, factor in (("aggregate", 0.5), ("message", 0.1)):
        g.set_lda_coeff(node, factor)
        session.run(feeds)
        scaled = session.backward({"loss": np.float32(1.0)})
        g.set_lda_coeff(node, 1.0)
        ratios = "  ".join(f"|d{n}| x{_norm(scaled[n]) / _norm(base[n]):.3f}" for n in g.trainable)
        print(f"  set_lda_coeff({node!r}, {factor}): {ratios}", file=stream)

    print("\nA frozen node (training=False) sends nothing back", file=stream)
    g.set_training("message", False)
    w_before = g.initializers["W"].copy()
    w_self_before = g.initializers["W_self"].copy()
    with open(os.devnull, "w") as quiet:
        frozen = _train(g, session, feeds, 50, quiet)
    g.set_training("message", True)
    print(f"  set_training('message', False), 50 steps: loss {frozen[0]:.5f} -> {frozen[-1]:.5f}; "
          f"max |change| of W {np.max(np.abs(g.initializers['W'] - w_before)):.1e}, "
          f"of W_self {np.max(np.abs(g.initializers['W_self'] - w_self_before)):.1e}", file=stream)

    with tempfile.TemporaryDirectory() as tmp:
        path = output or os.path.join(tmp, "message_passing.onnx")
        g.save(path)
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        print(f"\nExported {path if output else 'the trained model'}: opset "
              f"{model.opset_import[0].version}, {len(model.graph.node)} nodes, check_model(full_check=True) passes",
              file=stream)
        ours = Session(path).run(feeds)
    import onnxruntime as ort

    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    match = True
    for (name, value), other in zip(ours.items(), theirs):
        diff = float(np.max(np.abs(value - other)))
        ok = np.allclose(value, other, rtol=1e-5, atol=1e-6)
        match &= ok
        print(f"  {name}: onnxruntime vs Session, max |difference| {diff:.2e} -> {'match' if ok else 'MISMATCH'}",
              file=stream)
    print(f"\n{'Outputs match' if match else 'Outputs differ'}; demo took {time.perf_counter() - start:.1f} s",
          file=stream)
    return 0 if match else 1
