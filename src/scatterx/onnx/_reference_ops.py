"""scatterx kernels in place of onnx.reference's ScatterElements, GatherElements and Scatter.

`onnx.reference.ReferenceEvaluator` looks operator implementations up by class name and domain,
so these classes replace the reference ones for every node of those types; every other
operator keeps its reference implementation. Errors name the node.
"""

from __future__ import annotations

from onnx.reference.op_run import OpRun

from .._ops import gather_elements, scatter_elements


def _named(op: OpRun, e: Exception) -> Exception:
    node = op.onnx_node
    return type(e)(f"node {node.name!r} ({node.op_type}): {e}")


class ScatterElements(OpRun):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None, reduction=None):
        try:
            return (scatter_elements(data, indices, updates, axis=axis or 0, reduction=reduction or "none"),)
        except (IndexError, TypeError, ValueError) as e:
            raise _named(self, e) from None


class GatherElements(OpRun):
    op_domain = ""

    def _run(self, data, indices, axis=None):
        try:
            return (gather_elements(data, indices, axis=axis or 0),)
        except (IndexError, TypeError, ValueError) as e:
            raise _named(self, e) from None


class Scatter(OpRun):
    """The deprecated Scatter (opsets 9-10): ScatterElements without a reduction."""

    op_domain = ""

    def _run(self, data, indices, updates, axis=None):
        try:
            return (scatter_elements(data, indices, updates, axis=axis or 0),)
        except (IndexError, TypeError, ValueError) as e:
            raise _named(self, e) from None


OPS = [ScatterElements, GatherElements, Scatter]
