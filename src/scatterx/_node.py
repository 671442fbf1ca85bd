"""ScatterElements and GatherElements as trainable graph nodes (SPEC section 6).

A node holds the ONNX attributes (``axis``, ``reduction``), its identity in a graph (``name``,
``output_names``) and two training settings that are not ONNX attributes: ``training`` (store
what the backward needs) and ``lda_coeff`` (multiplies every gradient the node sends to its
inputs). The gradient rules themselves live in ``_autodiff``; a node only keeps their residuals.

Memory kept between ``forward`` and ``backward`` (references to the arrays, not copies):

============  ==========================================================================
reduction     stored
============  ==========================================================================
none, add     indices
mul           indices, data, updates
max, min      indices, one bool per data element and one per update (the tie masks)
gather        indices (and data's shape and dtype)
============  ==========================================================================
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator

import numpy as np

from . import _autodiff, _kernels
from ._rules import check_reduction, gather_call, scatter_call

_counters: dict[str, itertools.count] = {}


def _generated_name(op_type: str) -> str:
    counter = _counters.setdefault(op_type, itertools.count())
    return f"{op_type}_{next(counter)}"


class _Node:
    """What ScatterElements and GatherElements nodes share: identity, settings, the tape."""

    op_type = ""
    input_names: tuple[str, ...] = ()
    #: Names of the inputs that receive a gradient (indices never do).
    differentiable_inputs: tuple[str, ...] = ()

    def __init__(self, axis, *, name, output_names, training, lda_coeff):
        self._tape = None
        self._name = self.op_type
        self.name = _generated_name(self.op_type) if name is None else name
        try:
            self._axis = operator.index(axis)
        except TypeError:
            raise self._error(TypeError, f"axis must be an integer, got {type(axis).__name__}") from None
        self.output_names = output_names
        self.training = training
        self.lda_coeff = lda_coeff

    def _error(self, kind: type, message: str) -> Exception:
        return kind(f"{self.op_type} node {self._name!r}: {message}")

    @property
    def name(self) -> str:
        """The node's name, unique in a graph; generated (``"<op_type>_<n>"``) when not given."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise self._error(TypeError, f"name must be a non-empty string, got {value!r}")
        self._name = value

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the node's output tensors (one output); ``"<name>_output_0"`` by default."""
        return self._output_names if self._output_names is not None else (f"{self._name}_output_0",)

    @output_names.setter
    def output_names(self, value) -> None:
        if value is None:
            self._output_names = None
            return
        names = (value,) if isinstance(value, str) else tuple(value)
        if len(names) != 1 or not all(isinstance(n, str) and n for n in names):
            raise self._error(ValueError, f"output_names must be one non-empty string, got {value!r}")
        self._output_names = names

    @property
    def axis(self) -> int:
        """The ONNX ``axis`` attribute as given (it may be negative)."""
        return self._axis

    @property
    def training(self) -> bool:
        """Whether forward stores what backward needs; setting False frees what is stored."""
        return self._training

    @training.setter
    def training(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise self._error(TypeError, f"training must be a bool, got {type(value).__name__}")
        self._training = bool(value)
        if not self._training:
            self._tape = None

    @property
    def lda_coeff(self) -> float:
        """Multiplies every gradient the node sends to its inputs (default 1)."""
        return self._lda_coeff

    @lda_coeff.setter
    def lda_coeff(self, value: float) -> None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise self._error(TypeError, f"lda_coeff must be a real number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise self._error(ValueError, f"lda_coeff must be finite, got {value}")
        self._lda_coeff = float(value)

    @property
    def stored_nbytes(self) -> int:
        """Bytes of the arrays kept for backward (0 when nothing is stored)."""
        return getattr(self._tape, "nbytes", 0)

    def clear(self) -> None:
        """Frees what the last forward stored."""
        self._tape = None

    def _validated(self, make_call, *args):
        """The call from `make_call`, its errors prefixed with the node's name."""
        try:
            return make_call(*args)
        except (TypeError, ValueError, IndexError) as e:
            raise self._error(type(e), str(e)) from None

    def _not_differentiable(self, dtype: np.dtype) -> TypeError | None:
        """The error that backward will raise for `dtype`, or None when it has gradients.

        A training node still runs forward on integer, bool or string inputs (a graph may use
        them); only its backward refuses.
        """
        try:
            _autodiff.check_differentiable(dtype, self.op_type)
        except TypeError as e:
            return e
        return None

    def _check_backward(self) -> None:
        if not self._training:
            raise self._error(
                RuntimeError, "training is False, so nothing was stored and backward cannot run"
            )
        if self._tape is None:
            raise self._error(RuntimeError, "backward needs a forward pass in training mode first")
        if isinstance(self._tape, TypeError):
            raise self._error(TypeError, str(self._tape))

    def __call__(self, *inputs):
        return self.forward(*inputs)


class ScatterElements(_Node):
    """The ONNX ScatterElements operator as a trainable node.

    Parameters
    ----------
    axis : int, default 0
        The axis that `indices` addresses; its range is checked against the rank at forward.
    reduction : {"none", "add", "mul", "max", "min"}
        Checked when the node is defined.
    name : str, optional
        Unique in a graph; generated when absent.
    output_names : str or sequence of one str, optional
        The name of the output tensor.
    training : bool, default True
        Forward stores what backward needs (see the module notes for the memory per
        reduction); False stores nothing.
    lda_coeff : float, default 1.0
        Multiplies the gradients sent to data and updates.

    Notes
    -----
    ``forward(data, indices, updates)`` (or calling the node) returns
    ``scatter_elements(data, indices, updates, axis, reduction)``; ``backward(grad_output)``
    returns ``(lda_coeff * dL/d data, lda_coeff * dL/d updates)`` by the rules of
    `scatter_elements_vjp`. The stored arrays are references: do not modify them in place
    between forward and backward. `training` and `lda_coeff` may change between steps.

    Raises
    ------
    TypeError, ValueError
        Bad attributes; the message names the node.
    """

    op_type = "ScatterElements"
    input_names = ("data", "indices", "updates")
    differentiable_inputs = ("data", "updates")

    def __init__(self, axis=0, reduction="none", *, name=None, output_names=None, training=True,
                 lda_coeff=1.0):
        super().__init__(axis, name=name, output_names=output_names, training=training,
                         lda_coeff=lda_coeff)
        self._reduction = self._validated(check_reduction, reduction)

    @property
    def reduction(self) -> str:
        """The ONNX ``reduction`` attribute, one of ``REDUCTIONS``."""
        return self._reduction

    @property
    def attributes(self) -> dict:
        """The ONNX attributes: ``{"axis": ..., "reduction": ...}``."""
        return {"axis": self._axis, "reduction": self._reduction}

    def forward(self, data, indices, updates) -> np.ndarray:
        """``scatter_elements(data, indices, updates, axis, reduction)``; stores residuals in training."""
        call = self._validated(scatter_call, data, indices, updates, self._axis, self._reduction)
        try:
            output = _kernels.scatter(call, None)
        except IndexError as e:
            raise self._error(IndexError, str(e)) from None
        self._tape = None
        if self._training:
            self._tape = self._not_differentiable(call.data.dtype) or _autodiff.scatter_residuals(
                call, output
            )
        return output

    def backward(self, grad_output):
        """``(grad_data, grad_updates)``, both multiplied by `lda_coeff`.

        Raises
        ------
        RuntimeError
            `training` is False, or no forward pass was stored.
        TypeError
            The forward inputs were not differentiable, or grad_output has a bad dtype.
        ValueError
            grad_output does not have data's shape.
        """
        self._check_backward()
        try:
            return _autodiff.scatter_backward(self._tape, grad_output, self._lda_coeff)
        except (TypeError, ValueError) as e:
            raise self._error(type(e), str(e)) from None

    def __repr__(self) -> str:
        return (
            f"ScatterElements(axis={self._axis}, reduction={self._reduction!r}, name={self._name!r}, "
            f"output_names={list(self.output_names)!r}, training={self._training}, "
            f"lda_coeff={self._lda_coeff})"
        )


class _GatherTape:
    """What the backward of a gather needs: the indices and data's shape and dtype."""

    def __init__(self, indices: np.ndarray, data_shape: tuple, dtype: np.dtype, axis: int):
        self.indices, self.data_shape, self.dtype, self.axis = indices, data_shape, dtype, axis

    @property
    def nbytes(self) -> int:
        return self.indices.nbytes


class GatherElements(_Node):
    """The ONNX GatherElements operator as a trainable node.

    Parameters
    ----------
    axis : int, default 0
    name, output_names, training, lda_coeff
        As for `ScatterElements`.

    Notes
    -----
    ``forward(data, indices)`` returns ``gather_elements(data, indices, axis)``;
    ``backward(grad_output)`` returns ``lda_coeff * dL/d data``: grad_output scatter-added into
    zeros of data's shape (duplicate indices accumulate). Training stores the indices only.
    """

    op_type = "GatherElements"
    input_names = ("data", "indices")
    differentiable_inputs = ("data",)

    def __init__(self, axis=0, *, name=None, output_names=None, training=True, lda_coeff=1.0):
        super().__init__(axis, name=name, output_names=output_names, training=training,
                         lda_coeff=lda_coeff)

    @property
    def reduction(self) -> None:
        """GatherElements has no reduction; present so every node has the same attribute set."""
        return None

    @property
    def attributes(self) -> dict:
        """The ONNX attributes: ``{"axis": ...}``."""
        return {"axis": self._axis}

    def forward(self, data, indices) -> np.ndarray:
        """``gather_elements(data, indices, axis)``; stores the indices in training."""
        call = self._validated(gather_call, data, indices, self._axis)
        try:
            output = _kernels.gather(call, None)
        except IndexError as e:
            raise self._error(IndexError, str(e)) from None
        self._tape = None
        if self._training:
            self._tape = self._not_differentiable(call.data.dtype) or _GatherTape(
                call.indices, call.data.shape, call.data.dtype, call.axis
            )
        return output

    def backward(self, grad_output) -> np.ndarray:
        """``lda_coeff * dL/d data``, of data's dtype and shape.

        Raises
        ------
        RuntimeError, TypeError, ValueError
            As for `ScatterElements.backward`.
        """
        self._check_backward()
        t = self._tape
        try:
            return _autodiff.gather_backward(grad_output, t.data_shape, t.dtype, t.indices, t.axis,
                                             self._lda_coeff)
        except (TypeError, ValueError) as e:
            raise self._error(type(e), str(e)) from None

    def __repr__(self) -> str:
        return (
            f"GatherElements(axis={self._axis}, name={self._name!r}, "
            f"output_names={list(self.output_names)!r}, training={self._training}, "
            f"lda_coeff={self._lda_coeff})"
        )


__all__ = ["GatherElements", "ScatterElements"]
