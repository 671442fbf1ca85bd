"""ScatterElements and GatherElements nodes: attributes, training, lda_coeff, memory (SPEC section 6)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import scatterx as sx

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _inputs(rng, dtype=np.float64):
    d = rng.standard_normal((5, 4)).astype(dtype)
    i = rng.integers(-5, 5, (7, 4))
    u = rng.uniform(0.5, 1.5, (7, 4)).astype(dtype)
    return d, i, u


# -- attributes ----------------------------------------------------------------------------------


def test_defaults_and_attribute_set():
    node = sx.ScatterElements()
    assert (node.axis, node.reduction, node.training, node.lda_coeff) == (0, "none", True, 1.0)
    assert node.name.startswith("ScatterElements_")
    assert node.output_names == (f"{node.name}_output_0",)
    assert node.attributes == {"axis": 0, "reduction": "none"}
    assert node.input_names == ("data", "indices", "updates")
    assert node.differentiable_inputs == ("data", "updates")
    gather = sx.GatherElements(axis=-1, name="g", output_names=["out"], training=False, lda_coeff=0.5)
    assert (gather.axis, gather.reduction, gather.name, gather.output_names) == (-1, None, "g", ("out",))
    assert (gather.training, gather.lda_coeff, gather.attributes) == (False, 0.5, {"axis": -1})
    assert gather.differentiable_inputs == ("data",)


def test_generated_names_are_unique():
    names = {sx.ScatterElements().name for _ in range(5)} | {sx.GatherElements().name for _ in range(5)}
    assert len(names) == 10


def test_output_names_accept_one_string():
    assert sx.ScatterElements(output_names="y").output_names == ("y",)
    node = sx.ScatterElements(name="s")
    node.output_names = ("z",)
    assert node.output_names == ("z",)
    node.name = "renamed"
    assert node.name == "renamed"


BAD_ATTRIBUTES = [
    ({"reduction": "sum"}, ValueError, "unknown reduction 'sum'"),
    ({"reduction": 3}, TypeError, "reduction must be a string"),
    ({"axis": 1.5}, TypeError, "axis must be an integer"),
    ({"lda_coeff": "2"}, TypeError, "lda_coeff must be a real number"),
    ({"lda_coeff": True}, TypeError, "lda_coeff must be a real number"),
    ({"lda_coeff": math.nan}, ValueError, "lda_coeff must be finite"),
    ({"lda_coeff": -math.inf}, ValueError, "lda_coeff must be finite"),
    ({"training": 1}, TypeError, "training must be a bool"),
    ({"output_names": ["a", "b"]}, ValueError, "output_names must be one non-empty string"),
    ({"output_names": [""]}, ValueError, "output_names must be one non-empty string"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_ATTRIBUTES)
def test_bad_attributes_name_the_node(kwargs, error, message):
    with pytest.raises(error, match=f"ScatterElements node 'mynode': {message}"):
        sx.ScatterElements(name="mynode", **kwargs)
    if "reduction" not in kwargs:
        with pytest.raises(error, match=f"GatherElements node 'g2': {message}"):
            sx.GatherElements(name="g2", **kwargs)


def test_bad_name():
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        sx.ScatterElements(name="")
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        sx.GatherElements(name=3)


def test_setters_validate():
    node = sx.ScatterElements(name="n")
    with pytest.raises(ValueError, match="node 'n': lda_coeff must be finite"):
        node.lda_coeff = math.inf
    with pytest.raises(TypeError, match="node 'n': training must be a bool"):
        node.training = "yes"
    node.lda_coeff = np.float32(2)
    assert node.lda_coeff == 2.0 and type(node.lda_coeff) is float
    with pytest.raises(AttributeError):
        node.reduction = "add"


# -- forward and backward ------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_forward_and_backward_match_the_functions(reduction):
    rng = np.random.default_rng(1)
    d, i, u = _inputs(rng)
    g = rng.standard_normal(d.shape)
    node = sx.ScatterElements(0, reduction, lda_coeff=-0.5)
    y = node(d, i, u)
    np.testing.assert_array_equal(y, sx.scatter_elements(d, i, u, 0, reduction))
    gd, gu = node.backward(g)
    want_d, want_u = sx.scatter_elements_vjp(g, d, i, u, 0, reduction)
    np.testing.assert_array_equal(gd, -0.5 * want_d)
    np.testing.assert_array_equal(gu, -0.5 * want_u)


def test_lda_coeff_and_training_change_between_steps():
    rng = np.random.default_rng(2)
    d, i, u = _inputs(rng)
    g = rng.standard_normal(d.shape)
    node = sx.ScatterElements(0, "add")
    node(d, i, u)
    base_d, base_u = node.backward(g)
    node.lda_coeff = 3.0
    gd, gu = node.backward(g)
    np.testing.assert_array_equal(gd, 3 * base_d)
    np.testing.assert_array_equal(gu, 3 * base_u)
    node.training = False
    node(d, i, u)
    assert node.stored_nbytes == 0
    node.training = True
    node(d, i, u)
    np.testing.assert_array_equal(node.backward(g)[1], 3 * base_u)


def test_lda_coeff_zero_gives_zero_gradients():
    node = sx.GatherElements(lda_coeff=0.0)
    node(np.ones(3), [0, 2])
    np.testing.assert_array_equal(node.backward(np.array([5.0, 1.0])), [0, 0, 0])


@pytest.mark.parametrize("node", [sx.ScatterElements(name="frozen", training=False),
                                  sx.GatherElements(name="frozen", training=False)])
def test_training_false_stores_nothing_and_backward_names_the_node(node):
    inputs = (np.ones(3), [0]) + ((np.ones(1),) if isinstance(node, sx.ScatterElements) else ())
    node(*inputs)
    assert node.stored_nbytes == 0
    with pytest.raises(RuntimeError, match=f"{node.op_type} node 'frozen': training is False"):
        node.backward(np.ones(3))


def test_switching_training_off_frees_the_tape():
    node = sx.ScatterElements(0, "mul")
    node(np.ones(3), [0], np.ones(1))
    assert node.stored_nbytes > 0
    node.training = False
    assert node.stored_nbytes == 0
    node.training = True
    with pytest.raises(RuntimeError, match="needs a forward pass in training mode first"):
        node.backward(np.ones(3))


def test_backward_before_forward():
    with pytest.raises(RuntimeError, match="node 'early': backward needs a forward pass"):
        sx.GatherElements(name="early").backward(np.ones(1))


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.dtype("U2")])
def test_non_differentiable_forward_runs_backward_refuses(dtype):
    node = sx.ScatterElements(name="ints")
    d = np.zeros(3, dtype)
    y = node(d, [1], d[:1])
    np.testing.assert_array_equal(y, sx.scatter_elements(d, [1], d[:1]))
    with pytest.raises(TypeError, match="node 'ints': .*not differentiable"):
        node.backward(np.ones(3))
    gather = sx.GatherElements(name="gi")
    gather(d, [1])
    with pytest.raises(TypeError, match="node 'gi': .*not differentiable"):
        gather.backward(np.ones(1))


def test_forward_errors_name_the_node():
    node = sx.ScatterElements(axis=2, name="s9")
    with pytest.raises(ValueError, match="ScatterElements node 's9': axis 2 is out of range for rank 1"):
        node(np.ones(3), [0], [1.0])
    with pytest.raises(IndexError, match="ScatterElements node 's0': index 3 at indices\\[0\\]"):
        sx.ScatterElements(name="s0")(np.ones(3), [3], [1.0])
    with pytest.raises(IndexError, match="GatherElements node 'g0': index -4"):
        sx.GatherElements(name="g0")(np.ones(3), [-4])
    with pytest.raises(ValueError, match="node 'g1': grad_output must have the shape of indices"):
        gather = sx.GatherElements(name="g1")
        gather(np.ones(3), [0])
        gather.backward(np.ones(2))


def test_a_failed_forward_keeps_the_previous_tape():
    node = sx.ScatterElements(0, "add", name="stale")
    node(np.ones(3), [0], [1.0])
    with pytest.raises(IndexError):
        node(np.ones(3), [7], [1.0])
    _, gu = node.backward(np.array([1.0, 2, 3]))  # still the first, successful call
    np.testing.assert_array_equal(gu, [1.0])


def test_gather_node_backward():
    node = sx.GatherElements(1, lda_coeff=2.0)
    y = node(np.arange(6.0).reshape(2, 3), [[2, 2], [0, 1]])
    np.testing.assert_array_equal(y, [[2, 2], [3, 4]])
    np.testing.assert_array_equal(node.backward(np.array([[1.0, 10], [100, 1000]])), [[0, 0, 22], [200, 2000, 0]])


@pytest.mark.parametrize("dtype", [np.float16, np.dtype(ml_dtypes.bfloat16), np.float32, np.complex64])
def test_gradient_dtype_is_data_dtype(dtype):
    rng = np.random.default_rng(3)
    d, i, u = _inputs(rng, dtype)
    reduction = "mul"
    node = sx.ScatterElements(0, reduction, lda_coeff=0.25)
    node(d, i, u)
    gd, gu = node.backward(np.ones(d.shape, dtype))
    assert gd.dtype == gu.dtype == np.dtype(dtype)
    want_d, want_u = sx.scatter_elements_vjp(np.ones(d.shape, dtype), d, i, u, 0, reduction)
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    # A quarter is exact, so scaling before or after the rounding gives the same bits.
    np.testing.assert_array_equal(gd, (want_d.astype(wide) * 0.25).astype(dtype))
    np.testing.assert_array_equal(gu, (want_u.astype(wide) * 0.25).astype(dtype))


# -- memory --------------------------------------------------------------------------------------

# What the module documents, per reduction: (keeps data, keeps updates, one bool per element).
STORED = {
    "none": (False, False, False),
    "add": (False, False, False),
    "mul": (True, True, False),
    "max": (False, False, True),
    "min": (False, False, True),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_stored_memory_per_reduction(reduction):
    rng = np.random.default_rng(4)
    d, i, u = _inputs(rng)
    node = sx.ScatterElements(0, reduction)
    node(d, i, u)
    keeps_data, keeps_updates, masks = STORED[reduction]
    want = i.nbytes + keeps_data * d.nbytes + keeps_updates * u.nbytes + masks * (d.size + u.size)
    assert node.stored_nbytes == want
    node.clear()
    assert node.stored_nbytes == 0


def test_stored_indices_are_not_copied():
    i = np.array([0, 1], np.int64)
    node = sx.GatherElements()
    node(np.ones(3), i)
    assert node.stored_nbytes == i.nbytes
    assert node._tape.indices is i
