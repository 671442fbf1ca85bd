"""scatterx: ONNX ScatterElements and GatherElements, exact for every type, fast, differentiable."""

from ._autodiff import gather_elements_vjp, scatter_elements_vjp
from ._node import GatherElements, ScatterElements
from ._ops import gather_elements, scatter_elements
from ._threads import get_num_threads, set_num_threads, set_output_cache_limit

__version__ = "0.1.0"

__all__ = [
    "GatherElements",
    "ScatterElements",
    "gather_elements",
    "gather_elements_vjp",
    "get_num_threads",
    "scatter_elements",
    "scatter_elements_vjp",
    "set_num_threads",
    "set_output_cache_limit",
]
