"""ONNX's own backend test suite, node cases of ScatterElements, GatherElements and Scatter, through scatterx.

The onnx wheel has no data folder: onnx 1.23 builds the node cases in memory when the case
modules of ``onnx.backend.test.case.node`` are imported (each ``export_*`` calls ``expect``,
which records a TestCase). Building all 1,884 cases takes about 40 s, so the runner is handed
the cases of the three operators only (the modules ``scatterelements``, ``gatherelements`` and
``scatter``), through the loader it calls.
"""

from __future__ import annotations

import importlib
from unittest import mock

import numpy as np
import onnx
import onnx.backend.test
import onnx.backend.test.case.node as node_cases
import onnx.backend.test.runner
import pytest
from onnx import helper

import scatterx.onnx.backend as backend

_MODULES = ("scatterelements", "gatherelements", "scatter")
_CASES = r"^test_(scatter_elements|gather_elements|scatter_with_axis|scatter_without_axis)_"


def _node_cases() -> list:
    for module in _MODULES:
        importlib.import_module(f"{node_cases.__name__}.{module}")
    return [c for c in node_cases._NodeTestCases if c.name.startswith(("test_scatter", "test_gather_elements"))]


def _loader(kind: str | None = None, **_: object) -> list:
    return _node_cases() if kind == "node" else []


with mock.patch.object(onnx.backend.test.runner, "load_model_tests", _loader):
    _suite = onnx.backend.test.BackendTest(backend, __name__).include(_CASES)
OnnxBackendNodeModelTest = _suite.test_cases["OnnxBackendNodeModelTest"]


def test_the_suite_has_the_cases():
    names = [n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_") and n.endswith("_cpu")]
    selected = [n for n in names if not getattr(getattr(OnnxBackendNodeModelTest, n), "__unittest_skip__", False)]
    for prefix in ("test_scatter_elements", "test_gather_elements", "test_scatter_with_axis",
                   "test_scatter_without_axis"):
        assert any(n.startswith(prefix) for n in selected), prefix
    assert len(selected) >= 12


def test_devices():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")


def test_run_node_matches_a_hand_computed_case():
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add")
    data = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], np.float32)
    indices = np.array([[1, 1]], np.int64)
    updates = np.array([[1.1, 2.1]], np.float32)
    (out,) = backend.run_node(node, [data, indices, updates], opset_version=18)
    np.testing.assert_allclose(out, [[1.0, 5.2, 3.0, 4.0, 5.0]], rtol=1e-6)


def test_prepare_refuses_other_devices():
    node = helper.make_node("GatherElements", ["d", "i"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("d", onnx.TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ValueError, match="CPU"):
        backend.prepare(model, "CUDA")
