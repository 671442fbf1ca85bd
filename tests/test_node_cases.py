"""The ONNX backend node test cases of ScatterElements, GatherElements and the deprecated Scatter.

``onnx.backend.test.case.node.collect_testcases()`` imports every module of that package, and
importing a module registers its cases (a one-node model with input and expected output arrays).
Building all of them takes most of a minute, so this file imports only the modules of our
operators, which registers the same TestCase objects, and checks against the package's source
text that no case with our prefixes lives anywhere else. Scatter (opset 9-10) is
ScatterElements with reduction "none".
"""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest
from conftest import assert_identical
from onnx import helper

import scatterx as sx

PREFIXES = (
    "test_scatter_elements",
    "test_gather_elements",
    "test_scatter_with_axis",
    "test_scatter_without_axis",
)


NODE_PACKAGE = "onnx.backend.test.case.node"
MODULES = ("scatterelements", "gatherelements", "scatter")


def _cases():
    node = importlib.import_module(NODE_PACKAGE)
    for module in MODULES:
        importlib.import_module(f"{NODE_PACKAGE}.{module}")
    return [c for c in node._NodeTestCases if c.name.startswith(PREFIXES)]


CASES = _cases()


def test_every_case_of_the_package_is_here():
    folder = pathlib.Path(importlib.import_module(NODE_PACKAGE).__file__).parent
    pattern = re.compile(
        r"""name=["'](test_(?:scatter_elements|gather_elements|scatter_with_axis|scatter_without_axis)\w*)["']"""
    )
    declared = {m for f in folder.rglob("*.py") for m in pattern.findall(f.read_text())}
    names = {c.name for c in CASES}
    assert declared == names
    assert len(names) >= 12
    assert any("reduction_max" in n for n in names) and any("negative_indices" in n for n in names)


def _attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    (node,) = case.model.graph.node
    attributes = _attributes(node)
    axis = attributes.get("axis", 0)
    reduction = attributes.get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    assert case.data_sets, case.name
    for inputs, (expected,) in case.data_sets:
        if node.op_type in ("ScatterElements", "Scatter"):
            data, indices, updates = inputs
            result = sx.scatter_elements(data, indices, updates, axis, reduction)
        else:
            assert node.op_type == "GatherElements"
            data, indices = inputs
            result = sx.gather_elements(data, indices, axis)
        assert_identical(result, expected)
