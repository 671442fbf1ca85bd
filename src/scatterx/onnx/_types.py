"""Element types and shapes between NumPy and ONNX, and the tensor handle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from .._rules import bfloat16

if TYPE_CHECKING:
    from ._graph import Graph

Dim = int | str | None
Shape = tuple[Dim, ...]

_BY_NAME = {"string": np.dtype(object), "bfloat16": bfloat16()}


def as_dtype(dtype: object) -> np.dtype:
    """A NumPy dtype that ONNX can hold: NumPy dtype-likes, "string", "bfloat16" or an ONNX code."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(dtype))
        except (KeyError, ValueError):
            raise TypeError(f"unknown ONNX element type {dtype}") from None
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"not a dtype: {dtype!r}") from None
    if result.kind in "USO" or result.kind == "T":
        return np.dtype(object)
    onnx_type(result)
    return result


def onnx_type(dtype: np.dtype) -> int:
    """The ONNX element type code of a NumPy dtype; TypeError when ONNX has none."""
    if dtype.kind in "USOT":
        return onnx.TensorProto.STRING
    try:
        return helper.np_dtype_to_tensor_dtype(dtype.newbyteorder("="))
    except (KeyError, ValueError, TypeError):
        raise TypeError(f"dtype {dtype} has no ONNX element type") from None


def type_string(dtype: np.dtype | None) -> str | None:
    """"tensor(float)" etc., as in ONNX schemas; None for an unknown dtype."""
    if dtype is None:
        return None
    name = onnx.TensorProto.DataType.Name(onnx_type(dtype)).lower()
    return f"tensor({name})"


def as_shape(shape: object) -> Shape:
    try:
        dims = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"shape must be a sequence of dimensions, got {shape!r}") from None
    result = []
    for d in dims:
        if d is None or isinstance(d, str):
            result.append(d)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
            result.append(int(d))
        else:
            raise ValueError(f"a dimension must be an int >= 0, None or a symbolic name, got {d!r}")
    return tuple(result)


def value_info(name: str, dtype: np.dtype | None, shape: Shape | None) -> onnx.ValueInfoProto:
    if dtype is None:
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(name, onnx_type(dtype), None if shape is None else list(shape))


def from_type_proto(type_proto: onnx.TypeProto) -> tuple[np.dtype | None, Shape | None]:
    """dtype and shape of a tensor type; (None, None) for anything else or an undefined type."""
    if type_proto.WhichOneof("value") != "tensor_type":
        return None, None
    tensor = type_proto.tensor_type
    if tensor.elem_type == onnx.TensorProto.UNDEFINED:
        dtype = None
    else:
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, ValueError):
            dtype = None
    if not tensor.HasField("shape"):
        return dtype, None
    dims: list[Dim] = []
    for d in tensor.shape.dim:
        which = d.WhichOneof("value")
        dims.append(d.dim_value if which == "dim_value" else d.dim_param if which == "dim_param" else None)
    return dtype, tuple(dims)


@dataclass(frozen=True, eq=False)
class Tensor:
    """A handle to a tensor of a `Graph`: its name, element type and shape.

    ``dtype`` is None and ``shape`` is None when inference could not tell; a dimension is an int,
    a symbolic name (str) or None (unknown).
    """

    graph: Graph
    name: str
    dtype: np.dtype | None
    shape: Shape | None

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, dtype={self.dtype}, shape={self.shape})"
