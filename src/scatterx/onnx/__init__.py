"""ScatterElements and GatherElements as nodes of real ONNX graphs: define, check, export, import, run, train."""

from ._export import load_model
from ._graph import Graph, Node
from ._op_grads import MissingGradientRuleError
from ._session import Session
from ._types import Tensor

__all__ = ["Graph", "MissingGradientRuleError", "Node", "Session", "Tensor", "load_model"]
