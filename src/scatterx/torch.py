"""PyTorch bridge: ScatterElements and GatherElements as ``torch.autograd.Function``s.

The functions run the scatterx kernels on CPU tensors: inputs are viewed as NumPy arrays
(``Tensor.numpy()`` shares memory; bfloat16 goes through an int16 view because NumPy has no
bfloat16 of its own), and the result array becomes a tensor without a copy. Gradients follow
SPEC section 5 (see `scatterx.scatter_elements_vjp`), which differs from PyTorch's own
``scatter``/``scatter_reduce`` backward where PyTorch is not exact:

- "none" with duplicate targets: only the last writer receives the gradient (PyTorch gives it to
  every duplicate, although only one of them reaches the output);
- "mul": computed without division, so exact with zeros (PyTorch divides the result by each
  factor and patches single zeros);
- "max"/"min": data always takes part in the even tie split (``include_self=True``).

This module imports torch; ``import scatterx`` does not.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from . import _autodiff, _kernels
from ._rules import bfloat16, gather_call, is_bfloat16, scatter_call

__all__ = ["gather_elements", "scatter_elements"]


def _to_numpy(value, what: str):
    """A NumPy view of a CPU tensor (no copy); anything else is returned unchanged."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type != "cpu":
        raise ValueError(f"scatterx.torch runs on CPU tensors: {what} is on {value.device}")
    t = value.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(bfloat16())
    return t.numpy()


def _to_tensor(arr: np.ndarray) -> torch.Tensor:
    """A tensor sharing the memory of `arr`."""
    if is_bfloat16(arr.dtype):
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _check_lda(lda_coeff) -> float:
    if isinstance(lda_coeff, bool) or not isinstance(lda_coeff, numbers.Real):
        raise TypeError(f"lda_coeff must be a real number, got {type(lda_coeff).__name__}")
    if not math.isfinite(lda_coeff):
        raise ValueError(f"lda_coeff must be finite, got {lda_coeff}")
    return float(lda_coeff)


class _ScatterElements(torch.autograd.Function):
    @staticmethod
    def forward(ctx, data, indices, updates, axis, reduction, lda_coeff):
        call = scatter_call(
            _to_numpy(data, "data"), _to_numpy(indices, "indices"), _to_numpy(updates, "updates"),
            axis, reduction,
        )
        output = _kernels.scatter(call, None)
        ctx.residuals = None
        ctx.lda_coeff = lda_coeff
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[2]:
            _autodiff.check_differentiable(call.data.dtype)
            ctx.residuals = _autodiff.scatter_residuals(call, output)
            # Saved only so that autograd reports an in-place change before backward: the
            # residuals are views of these tensors.
            viewed = (indices, data, updates) if call.reduction == "mul" else (indices,)
            ctx.save_for_backward(*(t for t in viewed if isinstance(t, torch.Tensor)))
        return _to_tensor(output)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        ctx.saved_tensors  # noqa: B018 -- raises if a saved tensor was modified in place
        grad_data, grad_updates = _autodiff.scatter_backward(
            ctx.residuals, _to_numpy(grad_output, "grad_output"), ctx.lda_coeff
        )
        need = ctx.needs_input_grad
        return (
            _to_tensor(grad_data) if need[0] else None,
            None,
            _to_tensor(grad_updates) if need[2] else None,
            None,
            None,
            None,
        )


class _GatherElements(torch.autograd.Function):
    @staticmethod
    def forward(ctx, data, indices, axis, lda_coeff):
        call = gather_call(_to_numpy(data, "data"), _to_numpy(indices, "indices"), axis)
        output = _kernels.gather(call, None)
        if ctx.needs_input_grad[0]:
            _autodiff.check_differentiable(call.data.dtype, "GatherElements")
            ctx.geometry = (call.data.shape, call.data.dtype, call.indices, call.axis)
            ctx.lda_coeff = lda_coeff
            if isinstance(indices, torch.Tensor):
                ctx.save_for_backward(indices)
        return _to_tensor(output)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        ctx.saved_tensors  # noqa: B018 -- raises if the indices were modified in place
        shape, dtype, indices, axis = ctx.geometry
        grad = _autodiff.gather_backward(
            _to_numpy(grad_output, "grad_output"), shape, dtype, indices, axis, ctx.lda_coeff
        )
        return _to_tensor(grad), None, None, None


def scatter_elements(data, indices, updates, axis=0, reduction="none", *, lda_coeff=1.0):
    """Differentiable ONNX ScatterElements on CPU tensors, computed by scatterx.

    Parameters
    ----------
    data : torch.Tensor, CPU
    indices : torch.Tensor or array_like of integers
    updates : torch.Tensor, CPU, data's dtype
    axis : int, default 0
    reduction : {"none", "add", "mul", "max", "min"}
    lda_coeff : float, default 1.0
        Multiplies the gradients sent to `data` and `updates`.

    Returns
    -------
    torch.Tensor
        A new tensor of data's dtype and shape (it owns the result array scatterx computed).

    Notes
    -----
    Forward semantics are those of `scatterx.scatter_elements`; gradients follow
    `scatterx.scatter_elements_vjp`. The backward is once differentiable.

    Raises
    ------
    ValueError
        A tensor that is not on the CPU, and the errors of `scatterx.scatter_elements`.
    TypeError
        A gradient is requested for a dtype that has none, and the errors of
        `scatterx.scatter_elements`.
    """
    return _ScatterElements.apply(data, indices, updates, axis, reduction, _check_lda(lda_coeff))


def gather_elements(data, indices, axis=0, *, lda_coeff=1.0):
    """Differentiable ONNX GatherElements on CPU tensors, computed by scatterx.

    Parameters
    ----------
    data : torch.Tensor, CPU
    indices : torch.Tensor or array_like of integers
    axis : int, default 0
    lda_coeff : float, default 1.0
        Multiplies the gradient sent to `data`.

    Returns
    -------
    torch.Tensor
        Data's dtype, the shape of `indices`. The gradient of data is the incoming gradient
        scatter-added into zeros (duplicates accumulate).

    Raises
    ------
    ValueError, TypeError, IndexError
        As for `scatter_elements`.
    """
    return _GatherElements.apply(data, indices, axis, _check_lda(lda_coeff))
