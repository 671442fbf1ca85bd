"""Reverse mode through a graph: what a training step stores, and how gradients flow back node by node.

A node whose training status was True when the step ran stores its inputs and outputs (what
its backward needs); a frozen node stores nothing and sends no gradient back. Every gradient a
node sends to its inputs is multiplied by its ``lda_coeff`` (SPEC sections 5 and 6), so along
a path the factors multiply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from .. import _kernels
from .._rules import is_float_dtype
from ._graph import Graph
from ._op_grads import MissingGradientRuleError, rule_for


def differentiable(value: object) -> bool:
    return isinstance(value, np.ndarray) and is_float_dtype(value.dtype)


def _attribute(proto: onnx.NodeProto, name: str, default):
    for a in proto.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _scatterx_rule(proto: onnx.NodeProto, inputs: list, grad_outputs: list) -> list:
    from .._autodiff import gather_elements_vjp, scatter_elements_vjp

    g = grad_outputs[0]
    axis = _attribute(proto, "axis", 0)
    if proto.op_type == "GatherElements":
        data, indices = inputs
        return [gather_elements_vjp(g, data.shape, indices, axis), None]
    reduction = _attribute(proto, "reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    data, indices, updates = inputs
    grad_data, grad_updates = scatter_elements_vjp(g, data, indices, updates, axis, reduction)
    return [grad_data, None, grad_updates]


_SCATTERX_OPS = ("ScatterElements", "GatherElements", "Scatter")


@dataclass
class _Record:
    """What one training node's backward needs, with its lda_coeff as of the step."""

    proto: onnx.NodeProto
    lda_coeff: float
    inputs: list
    outputs: list


class Tape:
    """One training step's forward record, and its backward.

    Parameters
    ----------
    graph : Graph
        The graph that ran; node parameters are read now, so changes count from the next step.
    values : dict
        Every tensor's value in the step (inputs, initializers, intermediates, outputs).
    """

    def __init__(self, graph: Graph, values: dict[str, object]) -> None:
        self._outputs = list(graph._outputs)
        params = [n for n in graph._inputs if differentiable(values.get(n))]
        params += [n for n in graph.trainable if n not in graph._inputs and differentiable(values.get(n))]
        self.params = params
        # A tensor needs a gradient when it is a differentiable function of a parameter.
        needs = set(params)
        self._producer: dict[str, list[str]] = {}
        self._records: list[_Record] = []
        for node in graph._nodes:
            proto = node.proto
            sources = [n for n in proto.input if n in needs]
            if not sources:
                continue
            for out in proto.output:
                if out and differentiable(values.get(out)):
                    needs.add(out)
                    self._producer[out] = sources
            if node.training:
                self._records.append(_Record(
                    proto, node.lda_coeff,
                    [values.get(n) if n else None for n in proto.input],
                    [values.get(n) if n else None for n in proto.output],
                ))
        self._needs = needs
        self._shapes = {n: (values[n].shape, values[n].dtype) for n in needs | set(self._outputs) if
                        isinstance(values.get(n), np.ndarray)}

    def _depends(self, seeds: list[str]) -> set[str]:
        seen, stack = set(), list(seeds)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            stack.extend(self._producer.get(name, ()))
        return seen

    def backward(self, output_grads: dict) -> dict[str, np.ndarray]:
        """Gradients of the parameters that the given outputs depend on; see `Session.backward`."""
        grads: dict[str, np.ndarray] = {}
        seeds = []
        for name, g in output_grads.items():
            if name not in self._outputs:
                raise ValueError(f"{name!r} is not an output of the graph (outputs: {self._outputs})")
            if g is None:
                continue
            if name not in self._needs:
                continue
            shape, dtype = self._shapes[name]
            g = np.asarray(g)
            if g.shape != shape:
                raise ValueError(f"the gradient of output {name!r} has shape {g.shape}, the output has {shape}")
            grads[name] = _kernels.cast(g, dtype, copy=False)
            seeds.append(name)
        for record in reversed(self._records):
            proto = record.proto
            grad_outputs = [grads.get(n) if n else None for n in proto.output]
            if all(g is None for g in grad_outputs):
                continue
            grad_outputs = [
                np.zeros(self._shapes[n][0], self._shapes[n][1]) if g is None and n in self._needs else g
                for g, n in zip(grad_outputs, proto.output)
            ]
            if proto.op_type in _SCATTERX_OPS and proto.domain in ("", "ai.onnx"):
                grad_inputs = _scatterx_rule(proto, record.inputs, grad_outputs)
            else:
                try:
                    rule = rule_for(proto.op_type) if proto.domain in ("", "ai.onnx") else None
                except MissingGradientRuleError:
                    rule = None
                if rule is None:
                    raise MissingGradientRuleError(
                        f"node {proto.name!r} ({proto.op_type}) is on a gradient path but has no gradient rule"
                    )
                grad_inputs = rule(proto, record.inputs, record.outputs, grad_outputs)
            for name, g in zip(proto.input, grad_inputs):
                if g is None or name not in self._needs:
                    continue
                if record.lda_coeff != 1.0:
                    g = g * np.asarray(record.lda_coeff, g.dtype)
                grads[name] = grads[name] + g if name in grads else g
        result = {}
        depends = self._depends(seeds)
        for name in self.params:
            if name in depends:
                shape, dtype = self._shapes[name]
                g = grads.get(name)
                result[name] = np.zeros(shape, dtype) if g is None else np.asarray(g, dtype)
        return result
