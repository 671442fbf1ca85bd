"""Reverse-mode gradient rules of the standard ONNX operators of a message-passing layer.

Each rule maps the cotangents of a node's outputs to the cotangents of its inputs (a
vector-Jacobian product). The training `Session` of :mod:`scatterx.onnx` looks rules up by
ONNX ``op_type`` in `GRAD_RULES` (or through `rule_for`) and calls them as::

    rule(node, inputs, outputs, grad_outputs) -> grad_inputs

``inputs`` and ``outputs`` are the forward values (``None`` for an absent optional input),
``grad_outputs`` the cotangents of the outputs (``None`` for an output with no gradient).
The result holds one entry per ``node.input``: an array of that input's exact shape and dtype,
or ``None`` when the input has no gradient (integer inputs such as indices, shapes and axes; an
absent optional input; every cotangent ``None``). Inputs broadcast by the forward operator get
their cotangent summed back over the broadcast dimensions.

Only floating-point inputs (float16, bfloat16, float32, float64) are differentiated; float16
and bfloat16 are computed in float32 and rounded once at the end. Attributes and inputs are
read the way every opset spells them: where an opset moved an attribute (``axes`` of ReduceSum
from 13, of ReduceMean from 18, of Squeeze/Unsqueeze from 13) into an input, the rule reads
whichever the node carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from .. import _kernels
from .._ops import scatter_elements
from .._rules import is_float_dtype, is_short_float

__all__ = ["GRAD_RULES", "MissingGradientRuleError", "rule_for", "unbroadcast"]

Array = np.ndarray
GradRule = Callable[[onnx.NodeProto, list, list, list], list]


class MissingGradientRuleError(NotImplementedError):
    """No gradient rule exists for an ONNX operator type."""


def unbroadcast(grad: Array, shape: Sequence[int]) -> Array:
    """Sum `grad` back to `shape`, undoing numpy/ONNX multidirectional broadcasting.

    Parameters
    ----------
    grad : ndarray
        Cotangent of a broadcast result; its shape is the broadcast of `shape` with others.
    shape : sequence of int
        Shape of the operand before broadcasting.

    Returns
    -------
    ndarray
        An array of exactly `shape`: `grad` summed over the leading dimensions that `shape`
        lacks and over the dimensions where `shape` has 1 and `grad` does not.

    Raises
    ------
    ValueError
        `shape` does not broadcast to ``grad.shape``.
    """
    grad = np.asarray(grad)
    shape = tuple(int(s) for s in shape)
    extra = grad.ndim - len(shape)
    if extra < 0 or any(s not in (1, g) for s, g in zip(shape, grad.shape[extra:])):
        raise ValueError(f"shape {shape} does not broadcast to the gradient's shape {grad.shape}")
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    ones = tuple(d for d, (s, g) in enumerate(zip(shape, grad.shape)) if s == 1 and g != 1)
    if ones:
        grad = grad.sum(axis=ones, keepdims=True)
    return grad.reshape(shape)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _has_input(node: onnx.NodeProto, i: int) -> bool:
    return len(node.input) > i and node.input[i] != ""


def _axes(node: onnx.NodeProto, inputs: list, position: int) -> list[int] | None:
    """Axes from the input at `position` (newer opsets) or the ``axes`` attribute (older)."""
    if _has_input(node, position) and inputs[position] is not None:
        return [int(a) for a in np.asarray(inputs[position]).reshape(-1)]
    axes = _attr(node, "axes")
    return None if axes is None else [int(a) for a in axes]


def _sorted_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    return tuple(sorted({a + ndim if a < 0 else a for a in axes}))


# Elementwise and broadcasting operators.


def _identity(node, x, y, g):
    return [g[0]]


def _neg(node, x, y, g):
    return [-g[0]]


def _add(node, x, y, g):
    return [unbroadcast(g[0], x[0].shape), unbroadcast(g[0], x[1].shape)]


def _sub(node, x, y, g):
    return [unbroadcast(g[0], x[0].shape), unbroadcast(-g[0], x[1].shape)]


def _mul(node, x, y, g):
    a, b = x
    return [unbroadcast(g[0] * b, a.shape), unbroadcast(g[0] * a, b.shape)]


def _div(node, x, y, g):
    a, b = x
    ga = g[0] / b
    return [unbroadcast(ga, a.shape), unbroadcast(-ga * a / b, b.shape)]


def _relu(node, x, y, g):
    # The subgradient at 0 is taken as 0, as PyTorch and ONNX Runtime training do.
    return [np.where(x[0] > 0, g[0], 0)]


def _sigmoid(node, x, y, g):
    return [g[0] * y[0] * (1 - y[0])]


def _tanh(node, x, y, g):
    return [g[0] * (1 - y[0] * y[0])]


def _exp(node, x, y, g):
    return [g[0] * y[0]]


def _log(node, x, y, g):
    return [g[0] / x[0]]


# Linear algebra.


def _matmul(node, x, y, g):
    a, b = x
    # numpy.matmul semantics: a 1-D left operand is a row, a 1-D right operand a column.
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b[:, np.newaxis] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    g2 = g[0].reshape(batch + (a2.shape[-2], b2.shape[-1]))
    ga = unbroadcast(g2 @ np.swapaxes(b2, -1, -2), a2.shape)
    gb = unbroadcast(np.swapaxes(a2, -1, -2) @ g2, b2.shape)
    return [ga.reshape(a.shape), gb.reshape(b.shape)]


def _gemm(node, x, y, g):
    alpha = float(_attr(node, "alpha", 1.0))
    beta = float(_attr(node, "beta", 1.0))
    trans_a = bool(_attr(node, "transA", 0))
    trans_b = bool(_attr(node, "transB", 0))
    a, b = x[0], x[1]
    a_op = a.T if trans_a else a
    b_op = b.T if trans_b else b
    ga = alpha * (g[0] @ b_op.T)
    gb = alpha * (a_op.T @ g[0])
    grads = [ga.T if trans_a else ga, gb.T if trans_b else gb]
    if len(node.input) > 2:
        c = x[2]
        grads.append(None if c is None else unbroadcast(beta * g[0], c.shape))
    return grads


# Reductions.


def _reduce(node, x, y, g, mean: bool):
    data = x[0]
    axes = _axes(node, x, 1)
    keepdims = bool(_attr(node, "keepdims", 1))
    grads: list = [None] * len(node.input)
    if not axes:
        if bool(_attr(node, "noop_with_empty_axes", 0)):
            grads[0] = g[0]
            return grads
        axes = range(data.ndim)
    axes = _sorted_axes(axes, data.ndim)
    grad = g[0] if keepdims else np.expand_dims(g[0], axes)
    if mean:
        # An empty reduction has an empty input, whose gradient is empty whatever the divisor.
        count = int(np.prod([data.shape[a] for a in axes]))
        grad = grad / max(count, 1)
    grads[0] = np.broadcast_to(grad, data.shape)
    return grads


def _reduce_sum(node, x, y, g):
    return _reduce(node, x, y, g, mean=False)


def _reduce_mean(node, x, y, g):
    return _reduce(node, x, y, g, mean=True)


# Shape and layout.


def _reshape_like_input(node, x, y, g):
    # Reshape, Squeeze and Unsqueeze only relabel the shape: whatever the shape or axes input
    # said, the cotangent is the output cotangent laid out in the input's shape.
    return [g[0].reshape(x[0].shape)] + [None] * (len(node.input) - 1)


def _transpose(node, x, y, g):
    perm = _attr(node, "perm")
    if perm is None:
        return [np.transpose(g[0])]
    return [np.transpose(g[0], np.argsort(perm))]


def _concat(node, x, y, g):
    axis = int(_attr(node, "axis"))
    axis = axis + g[0].ndim if axis < 0 else axis
    bounds = np.cumsum([v.shape[axis] for v in x])[:-1]
    return list(np.split(g[0], bounds, axis=axis))


def _gather(node, x, y, g):
    data, indices = x
    axis = int(_attr(node, "axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    lead, trail = data.shape[:axis], data.shape[axis + 1 :]
    grad = np.zeros(data.shape, dtype=g[0].dtype)
    if indices.size == 0 or grad.size == 0:
        return [grad, None]
    # Gather's cotangent is a scatter-add of the output cotangent into zeros: with the index
    # dimensions flattened into the gather axis, it is ScatterElements(add) along that axis,
    # so repeated indices accumulate.
    updates = g[0].reshape(lead + (indices.size,) + trail)
    expanded = np.broadcast_to(
        indices.reshape((1,) * len(lead) + (-1,) + (1,) * len(trail)), updates.shape
    )
    updates = np.ascontiguousarray(updates)
    return [scatter_elements(grad, expanded, updates, axis=axis, reduction="add"), None]


_RULES: dict[str, GradRule] = {
    "Add": _add,
    "Concat": _concat,
    "Div": _div,
    "Exp": _exp,
    "Gather": _gather,
    "Gemm": _gemm,
    "Identity": _identity,
    "Log": _log,
    "MatMul": _matmul,
    "Mul": _mul,
    "Neg": _neg,
    "ReduceMean": _reduce_mean,
    "ReduceSum": _reduce_sum,
    "Relu": _relu,
    "Reshape": _reshape_like_input,
    "Sigmoid": _sigmoid,
    "Squeeze": _reshape_like_input,
    "Sub": _sub,
    "Tanh": _tanh,
    "Transpose": _transpose,
    "Unsqueeze": _reshape_like_input,
}

def _is_differentiable(value) -> bool:
    return value is not None and is_float_dtype(np.asarray(value).dtype)


def _widen(value):
    if value is None:
        return None
    value = np.asarray(value)
    return _kernels.cast(value, np.float32) if is_short_float(value.dtype) else value


def _wrap(op_type: str, rule: GradRule) -> GradRule:
    def grad_rule(node, inputs, outputs, grad_outputs):
        n = len(node.input)
        if all(g is None for g in grad_outputs) or not any(map(_is_differentiable, inputs)):
            return [None] * n
        outputs = [_widen(v) for v in outputs]
        # A missing cotangent of an output is a zero cotangent.
        grads = [
            np.zeros(np.shape(v), dtype=np.asarray(v).dtype) if g is None else _widen(g)
            for g, v in zip(grad_outputs, outputs)
        ]
        raw = rule(node, [_widen(v) for v in inputs], outputs, grads)
        result: list = []
        for i in range(n):
            x = inputs[i] if i < len(inputs) else None
            gx = raw[i] if i < len(raw) else None
            if gx is None or not _is_differentiable(x):
                result.append(None)
                continue
            x = np.asarray(x)
            gx = np.asarray(gx)
            if gx.shape != x.shape:
                raise AssertionError(
                    f"{op_type} gradient rule produced shape {gx.shape} "
                    f"for input {i} of shape {x.shape}"
                )
            result.append(_kernels.cast(gx, x.dtype))
        return result

    grad_rule.__name__ = f"grad_{op_type}"
    grad_rule.__qualname__ = grad_rule.__name__
    grad_rule.__doc__ = f"Vector-Jacobian product of ONNX {op_type}."
    return grad_rule


GRAD_RULES: dict[str, GradRule] = {op: _wrap(op, rule) for op, rule in _RULES.items()}


def rule_for(op_type: str) -> GradRule:
    """The gradient rule of an ONNX operator type.

    Parameters
    ----------
    op_type : str
        ONNX ``op_type`` of the default domain, e.g. ``"MatMul"``.

    Returns
    -------
    callable
        ``rule(node, inputs, outputs, grad_outputs) -> grad_inputs``, see the module docstring.

    Raises
    ------
    MissingGradientRuleError
        (a NotImplementedError) no rule exists; the message names the operator type and lists
        the differentiable ones.
    """
    try:
        return GRAD_RULES[op_type]
    except KeyError:
        known = ", ".join(sorted(GRAD_RULES))
        raise MissingGradientRuleError(
            f"no gradient rule for ONNX operator {op_type!r} (rules exist for: {known})"
        ) from None
