"""scatterx: ONNX ScatterElements and GatherElements, exact for every type, fast, differentiable."""

from ._ops import gather_elements, scatter_elements
from ._threads import get_num_threads, set_num_threads

__version__ = "0.1.0"

__all__ = [
    "gather_elements",
    "get_num_threads",
    "scatter_elements",
    "set_num_threads",
]
