"""Running a model: scatterx kernels for ScatterElements, GatherElements, Scatter; onnx.reference for the rest."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from onnx.reference import ReferenceEvaluator

from ._export import from_onnx
from ._graph import Graph, _check_training
from ._reference_ops import OPS
from ._training import Tape
from ._types import Shape


class Session:
    """Runs an ONNX model or a `Graph`; with ``training=True`` it also computes gradients.

    Parameters
    ----------
    model_or_graph : Graph, onnx.ModelProto, bytes or path
        A Graph is used live: changes to its initializers (``set_initializer``) and to its
        nodes' ``lda_coeff`` and ``training`` count from the next `run`; nodes added later make
        the session rebuild. Anything else is imported with `Graph.from_onnx` (available as
        ``session.graph``).
    training : bool, default False
        Keep, for each node whose training status is True, what its backward needs, so that
        `backward` can follow a `run`.

    Notes
    -----
    Each node runs through ``onnx.reference``'s implementation of its operator, except
    ScatterElements, GatherElements and the deprecated Scatter, which run on scatterx's kernels
    (SPEC sections 2-3: duplicates with "none" keep the last update; max/min propagate NaN).
    """

    def __init__(self, model_or_graph: object, training: bool = False) -> None:
        if isinstance(model_or_graph, Graph):
            self._graph = model_or_graph
        else:
            self._graph = from_onnx(model_or_graph)
        self.training = _check_training(training)
        self._tape: Tape | None = None
        self._build()

    def _build(self) -> None:
        model = self._graph.to_onnx(check=False)
        try:
            self._evaluator = ReferenceEvaluator(model, new_ops=OPS)
        except (NotImplementedError, RuntimeError, TypeError) as e:
            raise ValueError(f"cannot run graph {self._graph.name!r}: {e}") from None
        self._revision = self._graph._revision

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def input_names(self) -> list[str]:
        """The graph inputs; those that are also initializers may be left out of the feeds."""
        return list(self._graph._inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self._graph._outputs)

    def _feeds(self, feeds: Mapping[str, object]) -> dict[str, object]:
        if not isinstance(feeds, Mapping):
            raise TypeError(f"feeds must be a mapping from input names to arrays, got {type(feeds).__name__}")
        g = self._graph
        unknown = [n for n in feeds if n not in g._inputs]
        if unknown:
            raise ValueError(f"unknown input(s) {', '.join(map(repr, unknown))}; the inputs are {g._inputs}")
        missing = [n for n in g._inputs if n not in feeds and n not in g._initializers]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(map(repr, missing))}")
        values: dict[str, object] = dict(g._initializers)
        for name, value in feeds.items():
            values[name] = _checked_feed(name, value, g[name].dtype, g[name].shape)
        return values

    def run(self, feeds: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Run the model on `feeds` (``{input name: array}``); returns ``{output name: array}``.

        Raises
        ------
        ValueError
            An unknown or missing input, a shape that breaks the input's static dimensions, or
            a failing node (the message names it).
        TypeError
            An input of the wrong element type.
        IndexError
            An out-of-bounds index in a ScatterElements/GatherElements node (named).
        """
        if self._graph._revision != self._revision:
            self._build()
        values = self._feeds(feeds)
        self._tape = None
        if self.training:
            results = self._evaluator.run(None, values, intermediate=True)
            self._tape = Tape(self._graph, results)
        else:
            outputs = self._evaluator.run(None, values)
            results = dict(zip(self._evaluator.output_names, outputs))
        return {name: _as_array(results[name]) for name in self._graph._outputs}

    def backward(self, output_grads: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Gradients of the last `run` with respect to the graph inputs and trainable initializers.

        Parameters
        ----------
        output_grads : mapping
            ``{output name: gradient}``, each of the output's shape; outputs left out (or None)
            count as zero gradient.

        Returns
        -------
        dict
            ``{name: gradient}`` for every floating-point graph input and trainable initializer
            that the given outputs depend on (zeros where frozen nodes stop the flow).

        Raises
        ------
        RuntimeError
            The session was made with ``training=False``, or no `run` came first.
        MissingGradientRuleError
            (a NotImplementedError) a node on a gradient path has no gradient rule; the
            message names the node and its operator type.
        """
        if not self.training:
            raise RuntimeError("backward needs a Session made with training=True")
        if self._tape is None:
            raise RuntimeError("backward needs a run first")
        if not isinstance(output_grads, Mapping):
            raise TypeError(f"output_grads must be a mapping, got {type(output_grads).__name__}")
        return self._tape.backward(output_grads)

    def __repr__(self) -> str:
        return f"Session({self._graph!r}, training={self.training})"


def _as_array(value: object) -> object:
    return np.asarray(value) if isinstance(value, (np.ndarray, np.generic)) else value


def _checked_feed(name: str, value: object, dtype: np.dtype | None, shape: Shape | None) -> object:
    if isinstance(value, list) and dtype is None:
        return value
    arr = np.asarray(value) if dtype is None or dtype.kind != "O" else np.asarray(value, dtype=object)
    if dtype is not None:
        if dtype.kind == "O":
            if arr.dtype.kind not in "USOT":
                raise TypeError(f"input {name!r} must hold strings, got dtype {arr.dtype}")
        elif arr.dtype != dtype:
            raise TypeError(f"input {name!r} must have dtype {dtype}, got {arr.dtype}")
    if shape is not None:
        if arr.ndim != len(shape) or any(isinstance(d, int) and d != n for d, n in zip(shape, arr.shape)):
            raise ValueError(f"input {name!r} has shape {arr.shape}, the model expects {shape}")
    return arr

