"""The spec oracle (tests/oracle.py) against the ONNX reference evaluator.

Only the cases both define: the reference leaves duplicates with "none" to the order of its
loop (the spec defines "last wins", so they are excluded here) and compares NaN with Python's
max/min, which depends on the order (so max/min run without NaN). The reference knows strings
as object arrays of str only.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    INDEX_DTYPES,
    REDUCTIONS,
    TYPES,
    assert_identical,
    geometries,
    is_defined,
    one_node_model,
    random_indices,
    random_values,
    unique_indices,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

import oracle

# The reference computes with NumPy scalars, which warn when integers wrap.
pytestmark = pytest.mark.filterwarnings(
    "ignore:overflow encountered:RuntimeWarning", "ignore:invalid value encountered:RuntimeWarning"
)

REFERENCE_TYPES = [k for k in TYPES if k not in ("object-bytes", "U", "S", "StringDType")]


def reference(model, **feeds) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize(
    ("kind", "reduction"), [(k, r) for k in REFERENCE_TYPES for r in REDUCTIONS if is_defined(k, r)]
)
@settings(max_examples=12, deadline=None)
@given(geometry=geometries(), seed=st.integers(0, 2**32 - 1), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_scatter_oracle_matches_reference(kind, reduction, geometry, seed, index_dtype):
    data_shape, axis, index_shape = geometry
    rng = np.random.default_rng(seed)
    size = data_shape[axis]
    if reduction == "none":
        index_shape = tuple(
            min(n, size) if d == axis % len(data_shape) else n for d, n in enumerate(index_shape)
        )
        indices = unique_indices(index_shape, size, axis, index_dtype, rng)
    else:
        indices = random_indices(index_shape, size, index_dtype, rng)
    no_nan = reduction in ("max", "min")
    data = random_values(kind, data_shape, rng, nan=not no_nan)
    updates = random_values(kind, index_shape, rng, nan=not no_nan)
    model = one_node_model(
        "ScatterElements", data, indices.astype(np.int64), updates, axis=axis, reduction=reduction
    )
    expected = reference(model, data=data, indices=indices.astype(np.int64), updates=updates)
    assert_identical(oracle.scatter_elements(data, indices, updates, axis, reduction), expected)


@pytest.mark.parametrize("kind", REFERENCE_TYPES)
@settings(max_examples=15, deadline=None)
@given(
    geometry=geometries(same_off_axis=True, allow_empty=False),
    seed=st.integers(0, 2**32 - 1),
    index_dtype=st.sampled_from(INDEX_DTYPES),
)
def test_gather_oracle_matches_reference(kind, geometry, seed, index_dtype):
    data_shape, axis, index_shape = geometry
    rng = np.random.default_rng(seed)
    data = random_values(kind, data_shape, rng)
    indices = random_indices(index_shape, data_shape[axis], index_dtype, rng)
    # The reference mishandles a negative axis (see test_reference_gather_negative_axis).
    model = one_node_model("GatherElements", data, indices.astype(np.int64), axis=axis % len(data_shape))
    expected = reference(model, data=data, indices=indices.astype(np.int64))
    assert_identical(oracle.gather_elements(data, indices, axis), expected)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_oracle_refuses_exactly_the_undefined_cells(kind, reduction):
    data = random_values(kind, (2,), np.random.default_rng(0), nan=False)
    if is_defined(kind, reduction):
        result = oracle.scatter_elements(data, np.array([1]), data[:1], 0, reduction)
        assert result.shape == (2,)
    else:
        with pytest.raises(TypeError):
            oracle.scatter_elements(data, np.array([1]), data[:1], 0, reduction)


def test_reference_gather_negative_axis():
    """A divergence of onnx.reference, kept true here: with a negative axis its GatherElements
    rejects indices whose length along the axis differs from data's."""
    data, indices = np.arange(6.0).reshape(2, 3), np.array([[2, 0], [0, -1]])
    model = one_node_model("GatherElements", data, indices, axis=-1)
    with pytest.raises(ValueError, match="all dimensions of index and self"):
        reference(model, data=data, indices=indices)
    expected = np.array([[2.0, 0.0], [3.0, 5.0]])
    assert_identical(oracle.gather_elements(data, indices, -1), expected)


# (name, reduction, data, updates, reference result, oracle result): NaN by order in the reference.
REFERENCE_NAN = [
    ("max NaN update ignored", "max", [1.0], [np.nan], [1.0], [np.nan]),
    ("min NaN update ignored", "min", [1.0], [np.nan], [1.0], [np.nan]),
    ("max NaN data kept", "max", [np.nan], [1.0], [np.nan], [np.nan]),
]


@pytest.mark.parametrize(
    ("reduction", "data", "updates", "theirs", "ours"),
    [c[1:] for c in REFERENCE_NAN],
    ids=[c[0] for c in REFERENCE_NAN],
)
def test_reference_nan_is_order_dependent(reduction, data, updates, theirs, ours):
    """A divergence of onnx.reference, kept true here: Python's max/min decide NaN by order."""
    data, updates, indices = np.array(data), np.array(updates), np.zeros(len(updates), np.int64)
    model = one_node_model("ScatterElements", data, indices, updates, axis=0, reduction=reduction)
    assert_identical(reference(model, data=data, indices=indices, updates=updates), np.array(theirs))
    assert_identical(oracle.scatter_elements(data, indices, updates, 0, reduction), np.array(ours))
