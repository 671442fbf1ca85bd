"""Reverse-mode rules (VJPs) of ScatterElements and GatherElements, SPEC section 5.

Each rule is split in two pure steps, like a JAX primitive: ``scatter_residuals`` keeps what the
backward pass needs from the forward pass, and ``scatter_backward`` turns a cotangent and those
residuals into input gradients. The nodes (``_node``), the torch bridge and the ONNX training
session call these steps; ``scatter_elements_vjp`` chains them.

Every rule is built from native kernels (scatter and gather over fibers, and the backward pass
of "none") plus whole-array NumPy operations, so no Python loop runs over elements:

- none: one native pass walks each fiber backwards; an update takes the gradient at its target
  and leaves a zero there, so only the last writer receives it;
- mul: one native pass forward and one backward over each fiber give every update the
  products of the updates before and after it at its target (running products), never a
  division, so zeros and duplicates are exact; the same pass gives grad_data;
- max/min: the ties are counted with a scatter "add" of the tie masks.

float16 and bfloat16 gradients are computed in float32 and rounded once at the end.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from . import _kernels
from ._rules import (
    GatherCall,
    ScatterCall,
    dtype_category,
    gather_call,
    native,
    scatter_call,
)

_HALF = ("float16", "bfloat16")
_NEEDS_DATA = ("mul",)
_TIE_REDUCTIONS = ("max", "min")


def check_differentiable(dtype: np.dtype, op: str = "ScatterElements") -> None:
    """TypeError unless `dtype` has gradients (float16, bfloat16, float32, float64, complex)."""
    category = dtype_category(np.dtype(dtype))
    if category not in ("float", "complex"):
        raise TypeError(
            f"{op} with dtype {np.dtype(dtype)} is not differentiable "
            "(gradients exist for float16, bfloat16, float32, float64, and complex types)"
        )


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype the gradient arithmetic runs in: float32 for the half types, else `dtype`."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.name in _HALF else dtype


def _cotangent(grad_output, shape: tuple, dtype: np.dtype, what: str) -> np.ndarray:
    """grad_output as an array of `dtype` and exactly `shape` (real into complex is allowed)."""
    g = np.asarray(grad_output)
    if g.shape != tuple(shape):
        raise ValueError(f"grad_output must have the shape of {what} {tuple(shape)}, got {g.shape}")
    if g.dtype != dtype:
        g_category = dtype_category(g.dtype) if g.dtype.kind not in "iub" else "int"
        target = dtype_category(dtype)
        if g_category not in ("float", "complex") or (g_category == "complex" and target != "complex"):
            raise TypeError(f"grad_output has dtype {g.dtype}, which cannot be cast to {what}'s dtype {dtype}")
        g = _kernels.cast(g, dtype)
    return native(g)


def _scatter(data, indices, updates, axis, reduction, out=None) -> np.ndarray:
    """The native scatter on arrays that are already valid (no re-validation)."""
    return _kernels.scatter(ScatterCall(data, indices, updates, axis, reduction), out)


def _gather(data, indices, axis) -> np.ndarray:
    return _kernels.gather(GatherCall(data, indices, axis), None)


def _has_nan(x: np.ndarray) -> bool:
    if x.size == 0 or x.dtype.kind == "c":
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(np.min(x)))


def _same(a: np.ndarray, y: np.ndarray, nan: bool) -> np.ndarray:
    """Tie mask: ``a == y``, where NaN counts as equal to NaN when `nan` is set."""
    eq = a == y
    if nan:
        eq |= np.isnan(a) & np.isnan(y)
    return eq


@dataclass(frozen=True, eq=False)
class ScatterResiduals:
    """What the backward of one ScatterElements call needs (SPEC section 5).

    Attributes
    ----------
    reduction, axis, data_shape, dtype
        The call's attributes; ``axis`` is normalised.
    indices : ndarray
        Always kept (int32 or int64, the validated indices).
    data, updates : ndarray or None
        Kept for "mul" only: dU needs ``D[t(k)]`` and the products of the other updates.
    data_ties, update_ties : ndarray of bool or None
        Kept for "max"/"min" only: which data elements and which updates equal the result
        (NaN equal to NaN where the result is NaN). One byte per element instead of data,
        updates and output.
    """

    reduction: str
    axis: int
    data_shape: tuple
    dtype: np.dtype
    indices: np.ndarray
    data: np.ndarray | None = None
    updates: np.ndarray | None = None
    data_ties: np.ndarray | None = None
    update_ties: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays these residuals keep alive."""
        arrays = (self.indices, self.data, self.updates, self.data_ties, self.update_ties)
        return sum(a.nbytes for a in arrays if a is not None)


def scatter_residuals(call: ScatterCall, output: np.ndarray | None = None) -> ScatterResiduals:
    """Residuals of a validated, differentiable scatter call.

    `output` is the forward result; "max"/"min" need it and recompute it when it is None.
    The arrays are kept by reference: they must not be modified before the backward pass.
    """
    check_differentiable(call.data.dtype)
    base = {
        "reduction": call.reduction, "axis": call.axis, "data_shape": call.data.shape,
        "dtype": call.data.dtype, "indices": call.indices,
    }
    if call.reduction in _NEEDS_DATA:
        return ScatterResiduals(**base, data=call.data, updates=call.updates)
    if call.reduction in _TIE_REDUCTIONS:
        y = _kernels.scatter(call, None) if output is None else output
        nan = _has_nan(y)
        data_ties = _same(call.data, y, nan)
        update_ties = _same(call.updates, _gather(y, call.indices, call.axis), nan)
        return ScatterResiduals(**base, data_ties=data_ties, update_ties=update_ties)
    return ScatterResiduals(**base)


def scatter_backward(res: ScatterResiduals, grad_output, scale: float = 1.0):
    """``(grad_data, grad_updates)`` of a scatter from its residuals, each multiplied by `scale`.

    Both results are new C-contiguous arrays of data's dtype.
    """
    g = _cotangent(grad_output, res.data_shape, res.dtype, "data")
    rule = _BACKWARD[res.reduction]
    cdt = compute_dtype(res.dtype)
    grad_data, grad_updates = rule(res, g, cdt)
    return _finish(grad_data, res.dtype, scale), _finish(grad_updates, res.dtype, scale)


def _finish(grad: np.ndarray, dtype: np.dtype, scale: float) -> np.ndarray:
    """Applies `scale` in the compute dtype and rounds to `dtype` once."""
    if scale != 1.0:
        grad = _kernels.cast(grad, compute_dtype(dtype), copy=False)
        grad *= grad.dtype.type(scale)
    if grad.dtype != dtype:
        grad = _kernels.cast(grad, dtype)
    return grad


def _backward_none(res: ScatterResiduals, g: np.ndarray, cdt):
    # One native pass walks each fiber backwards: an update takes the gradient at its target
    # and leaves a zero, so only the last writer gets it and written data positions end at 0.
    return _kernels.take_last_writer(g, res.indices, res.axis)


def _backward_add(res: ScatterResiduals, g: np.ndarray, cdt):
    return _kernels.copy(g), _gather(g, res.indices, res.axis)


def _backward_mul(res: ScatterResiduals, g: np.ndarray, cdt):
    # One native pass per block of fibers, forward and backward over its updates: every update
    # gets the products of the updates before and after it at its target, so no division
    # (zeros stay exact); the products become grad_data in the same pass.
    gc = _kernels.contiguous(g, cdt)
    d = _kernels.contiguous(res.data, cdt)
    return _kernels.mul_backward(gc, d, res.indices, res.updates, res.axis)


# The native backward of max/min counts the ties at a target in the compute type: exact below
# 2^24 (float32) or 2^53 (float64). An index at least this long along the axis goes the NumPy
# way, which counts in integers.
_NATIVE_TIES_LIMIT = {np.dtype(np.float32): 2**24 - 1, np.dtype(np.float64): 2**53 - 1}


def _backward_extremum(res: ScatterResiduals, g: np.ndarray, cdt):
    idx, axis = res.indices, res.axis
    if idx.shape[axis] < _NATIVE_TIES_LIMIT[np.dtype(cdt)]:
        gc = _kernels.contiguous(g, cdt)
        return _kernels.extremum_backward(gc, idx, axis, ties=(res.data_ties, res.update_ties))
    gc = _kernels.cast(g, cdt, copy=False)
    count = np.int32 if idx.size < 2**31 else np.int64
    ties = res.data_ties.astype(count)
    _scatter(ties, idx, res.update_ties.astype(count), axis, "add", out=ties)
    share = np.divide(gc, ties.astype(cdt))
    grad_updates = _keep_where(_gather(share, idx, axis), res.update_ties)
    grad_data = _keep_where(share, res.data_ties)
    return grad_data, grad_updates


def _keep_where(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``np.where(mask, x, 0)`` in place on a contiguous float `x`, bit for bit (+0 elsewhere).

    By masking the bits: np.where branches on every element, which a random mask mispredicts
    (6.4M float32, half set: 30 ms; this: about 9 ms plus its temporary).
    """
    u = np.dtype(f"u{x.dtype.itemsize}")
    keep = mask.astype(u)
    np.negative(keep, out=keep)  # 1 -> all ones, 0 -> 0
    bits = x.view(u)
    np.bitwise_and(bits, keep, out=bits)
    return x


_BACKWARD = {
    "none": _backward_none,
    "add": _backward_add,
    "mul": _backward_mul,
    "max": _backward_extremum,
    "min": _backward_extremum,
}


def scatter_elements_vjp(grad_output, data, indices, updates, axis=0, reduction="none", *, output=None):
    """Gradients of ``scatter_elements(data, indices, updates, axis, reduction)``.

    Parameters
    ----------
    grad_output : array_like
        The cotangent ``G = dL/dY``, shape of `data`; a real or complex float array (cast to
        data's dtype).
    data, indices, updates, axis, reduction
        As for `scatter_elements`. `data` and `updates` must be float16, bfloat16, float32,
        float64, or complex (complex for "none", "add", "mul").
    output : ndarray, optional
        The forward result ``scatter_elements(data, indices, updates, axis, reduction)`` when the
        caller already has it: "max" and "min" then use it instead of recomputing it. It is
        trusted (only its shape and dtype are checked).

    Returns
    -------
    grad_data, grad_updates : ndarray
        ``dL/dD`` (shape of data) and ``dL/dU`` (shape of indices), of data's dtype. Indices get
        no gradient.

    Notes
    -----
    With ``t(k)`` the target of update ``k`` and ``S(p)`` the updates that target ``p``:

    - "none": ``dD[p] = G[p]`` if no update targets ``p``, else 0; ``dU[k] = G[t(k)]`` if ``k``
      is the last writer of ``t(k)`` in row-major order, else 0 (the overwritten updates have no
      effect on the output, so their gradient is 0).
    - "add": ``dD = G``; ``dU[k] = G[t(k)]``.
    - "mul": ``dD[p] = G[p] * prod(U[S(p)])``; ``dU[k] = G[t(k)] * D[t(k)] * prod(U[j] for j in
      S(t(k)), j != k)``, computed without division, so exact with zeros and duplicates.
      Complex types follow PyTorch: the gradient is G times the conjugate of the other factors.
    - "max"/"min": data always takes part; the ``n(p)`` participants equal to ``Y[p]`` share
      ``G[p]`` evenly, the others get 0. Where ``Y[p]`` is NaN the NaN participants are the ties.

    float16 and bfloat16 are computed in float32 and rounded once.

    Raises
    ------
    TypeError
        Integer, bool or string data ("not differentiable"), or a grad_output that cannot be cast.
    ValueError, IndexError
        As for `scatter_elements`, and a grad_output of the wrong shape.
    """
    dtype = np.asarray(data).dtype
    check_differentiable(dtype)
    call = scatter_call(data, indices, updates, axis, reduction)
    if output is not None:
        output = np.asarray(output)
        if output.shape != call.data.shape or output.dtype != call.data.dtype:
            raise ValueError(
                f"output must have data's shape {call.data.shape} and dtype {call.data.dtype}, "
                f"got shape {output.shape} and dtype {output.dtype}"
            )
    cdt = compute_dtype(call.data.dtype)
    if call.reduction in _TIE_REDUCTIONS and call.indices.shape[call.axis] < _NATIVE_TIES_LIMIT[cdt]:
        # The kernel compares data and updates with the result itself: no tie masks, which the
        # residuals keep between a forward and its backward, are made for a single call.
        g = _cotangent(grad_output, call.data.shape, call.data.dtype, "data")
        y = _kernels.scatter(call, None) if output is None else output
        grad_data, grad_updates = _kernels.extremum_backward(
            _kernels.contiguous(g, cdt), call.indices, call.axis, values=(call.data, call.updates, y)
        )
        return _finish(grad_data, call.data.dtype, 1.0), _finish(grad_updates, call.data.dtype, 1.0)
    return scatter_backward(scatter_residuals(call, output), grad_output)


def gather_backward(grad_output, data_shape: tuple, dtype, indices: np.ndarray, axis: int,
                    scale: float = 1.0) -> np.ndarray:
    """``dL/dD`` of a validated gather: scatter-add of the cotangent into zeros of data's shape."""
    g = _cotangent(grad_output, indices.shape, np.dtype(dtype), "indices")
    cdt = compute_dtype(dtype)
    # A fresh output filled from a stride-0 zero: the kernel checks indices while it scatters
    # instead of in a separate pass first.
    zeros = np.broadcast_to(np.zeros((), cdt), data_shape)
    grad = _scatter(zeros, indices, _kernels.cast(g, cdt, copy=False), axis, "add")
    return _finish(grad, np.dtype(dtype), scale)


def gather_elements_vjp(grad_output, data_shape, indices, axis=0) -> np.ndarray:
    """Gradient of ``gather_elements(data, indices, axis)`` with respect to data.

    Parameters
    ----------
    grad_output : array_like
        The cotangent ``G = dL/dY``, shape of `indices`; float16, bfloat16, float32, float64 or
        complex. Its dtype is the dtype of the result.
    data_shape : tuple of int
        The shape of the gathered data.
    indices : array_like of integers
        As for `gather_elements` (checked against `data_shape`).
    axis : int, default 0

    Returns
    -------
    ndarray
        ``dD``, shape `data_shape`: ``G`` scatter-added into zeros, so an element gathered several
        times accumulates all its gradients (float16/bfloat16 accumulate in float32).

    Raises
    ------
    TypeError
        A grad_output of integer, bool or string dtype ("not differentiable").
    ValueError, IndexError
        As for `gather_elements`, and a grad_output whose shape is not that of indices.
    """
    g = native(np.asarray(grad_output))
    check_differentiable(g.dtype, "GatherElements")
    try:
        shape = tuple(operator.index(s) for s in data_shape)
    except TypeError:
        raise TypeError(f"data_shape must be a sequence of integers, got {data_shape!r}") from None
    call = gather_call(np.broadcast_to(np.zeros((), g.dtype), shape), indices, axis)
    return gather_backward(g, shape, g.dtype, call.indices, call.axis)

