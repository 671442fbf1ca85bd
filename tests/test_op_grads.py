"""Gradient rules of the standard ONNX operators, checked against finite differences.

Every rule's vector-jacobian product with a random cotangent is compared with the central
finite-difference directional derivative of the operator as `onnx.reference` evaluates it, in
float64, on one-node models built for the opset named in each case. Corners that finite
differences cannot see (the kink of Relu, repeated Gather indices, dtypes, missing cotangents)
are checked against hand-computed values.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from scatterx.onnx._op_grads import GRAD_RULES, MissingGradientRuleError, rule_for, unbroadcast

RNG = np.random.default_rng(20261129)
EPS = 1e-6


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape)


def away_from_zero(*shape):
    """Values with |x| >= 0.2, so a step of EPS never crosses a kink at 0."""
    x = rand(*shape)
    return np.where(x < 0, x - 0.2, x + 0.2)


def positive(*shape):
    return rand(*shape, low=0.5, high=2.0)


def ints(*values):
    return np.array(values, dtype=np.int64)


def one_node_model(op_type, inputs, attrs, opset):
    """A model with one node whose present inputs are all graph inputs; ``None`` is absent."""
    names = ["" if v is None else f"x{i}" for i, v in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v)
        )
        for name, v in zip(names, inputs)
        if name
    ]

    def build(output_shape):
        output = helper.make_tensor_value_info("y", TensorProto.DOUBLE, output_shape)
        graph = helper.make_graph([node], op_type, graph_inputs, [output])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    # The checker wants the output's shape: take it from a first evaluation, then check that
    # the node is valid for the opset it claims (or the case tests nothing) and that shape
    # inference agrees.
    feeds = {n: v for n, v in zip(names, inputs) if n}
    shape = np.shape(ReferenceEvaluator(build(None)).run(None, feeds)[0])
    model = build(shape)
    onnx.checker.check_model(model, full_check=True)
    return model, node, names


def check_vjp(op_type, inputs, attrs=None, opset=18):
    model, node, names = one_node_model(op_type, inputs, attrs or {}, opset)
    session = ReferenceEvaluator(model)

    def forward(values):
        feeds = {n: v for n, v in zip(names, values) if n}
        return np.asarray(session.run(None, feeds)[0])

    y = forward(inputs)
    cotangent = rand(*y.shape)
    snapshot = [None if v is None else np.copy(v) for v in inputs]
    grads = GRAD_RULES[op_type](node, list(inputs[: len(names)]), [y], [cotangent])
    for before, after in zip(snapshot, inputs):
        np.testing.assert_array_equal(after, before, err_msg="a rule wrote into its input")
    assert len(grads) == len(node.input)
    for i, (x, gx) in enumerate(zip(inputs, grads)):
        if x is None or np.asarray(x).dtype.kind != "f":
            assert gx is None, f"input {i} has no gradient"
            continue
        assert gx.shape == x.shape and gx.dtype == x.dtype
        for _ in range(2):
            direction = rand(*x.shape)
            plus = list(inputs)
            minus = list(inputs)
            plus[i] = x + EPS * direction
            minus[i] = x - EPS * direction
            numeric = np.sum(cotangent * (forward(plus) - forward(minus))) / (2 * EPS)
            analytic = np.sum(gx * direction)
            np.testing.assert_allclose(
                analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=f"input {i}"
            )


# (id, op_type, inputs, attributes, opset). Inputs are built once at import: they are
# fixed random draws, so a failure reproduces.
CASES = [
    # Elementwise, with multidirectional broadcasting.
    ("add-same", "Add", [rand(3, 4), rand(3, 4)], {}, 14),
    ("add-row", "Add", [rand(3, 4), rand(4)], {}, 14),
    ("add-both-ways", "Add", [rand(2, 1, 4), rand(3, 1)], {}, 14),
    ("add-scalar", "Add", [rand(), rand(2, 3)], {}, 7),
    ("sub-col", "Sub", [rand(3, 1), rand(3, 4)], {}, 14),
    ("sub-lead", "Sub", [rand(2, 3, 4), rand(1, 4)], {}, 13),
    ("mul-same", "Mul", [rand(3, 4), rand(3, 4)], {}, 14),
    ("mul-both-ways", "Mul", [rand(4, 1, 2), rand(3, 1)], {}, 14),
    ("mul-scalar", "Mul", [rand(2, 3), rand()], {}, 7),
    ("div-same", "Div", [rand(3, 4), away_from_zero(3, 4)], {}, 14),
    ("div-row", "Div", [rand(3, 4), away_from_zero(4)], {}, 14),
    ("div-numerator-broadcast", "Div", [rand(1, 4), away_from_zero(3, 1)], {}, 13),
    ("neg", "Neg", [rand(3, 4)], {}, 13),
    ("identity", "Identity", [rand(2, 3)], {}, 16),
    ("identity-scalar", "Identity", [rand()], {}, 13),
    ("relu", "Relu", [away_from_zero(4, 5)], {}, 14),
    ("sigmoid", "Sigmoid", [rand(4, 5, low=-4, high=4)], {}, 13),
    ("tanh", "Tanh", [rand(4, 5, low=-3, high=3)], {}, 13),
    ("exp", "Exp", [rand(4, 5)], {}, 13),
    ("log", "Log", [positive(4, 5)], {}, 13),
    # MatMul: numpy semantics, batch broadcasting, 1-D operands.
    ("matmul-2d", "MatMul", [rand(3, 4), rand(4, 5)], {}, 13),
    ("matmul-batch-left", "MatMul", [rand(2, 3, 4), rand(4, 5)], {}, 13),
    ("matmul-batch-right", "MatMul", [rand(3, 4), rand(2, 4, 5)], {}, 13),
    ("matmul-batch-broadcast", "MatMul", [rand(2, 1, 3, 4), rand(5, 4, 2)], {}, 13),
    ("matmul-vec-mat", "MatMul", [rand(4), rand(4, 5)], {}, 13),
    ("matmul-mat-vec", "MatMul", [rand(3, 4), rand(4)], {}, 13),
    ("matmul-vec-vec", "MatMul", [rand(4), rand(4)], {}, 13),
    ("matmul-vec-batch", "MatMul", [rand(4), rand(2, 4, 5)], {}, 13),
    # Gemm: alpha, beta, transA, transB, C broadcast, C absent.
    ("gemm-plain", "Gemm", [rand(3, 4), rand(4, 5), rand(3, 5)], {}, 13),
    ("gemm-alpha-beta", "Gemm", [rand(3, 4), rand(4, 5), rand(5)], {"alpha": 0.7, "beta": -2.0}, 13),
    ("gemm-transA", "Gemm", [rand(4, 3), rand(4, 5), rand(1, 5)], {"transA": 1}, 13),
    ("gemm-transB", "Gemm", [rand(3, 4), rand(5, 4), rand(3, 1)], {"transB": 1}, 13),
    (
        "gemm-both-trans",
        "Gemm",
        [rand(4, 3), rand(5, 4), rand()],
        {"transA": 1, "transB": 1, "alpha": 2.0, "beta": 0.5},
        13,
    ),
    ("gemm-no-c", "Gemm", [rand(3, 4), rand(4, 5)], {"alpha": 1.5}, 13),
    ("gemm-opset9", "Gemm", [rand(3, 4), rand(4, 5), rand(3, 5)], {"beta": 2.0}, 9),
    # ReduceSum: axes attribute up to opset 12, input from 13.
    ("reducesum-11-axis", "ReduceSum", [rand(3, 4, 5)], {"axes": [1]}, 11),
    ("reducesum-11-neg-axes", "ReduceSum", [rand(3, 4, 5)], {"axes": [-1, 0], "keepdims": 0}, 11),
    ("reducesum-11-all", "ReduceSum", [rand(3, 4)], {}, 11),
    ("reducesum-11-all-nokeep", "ReduceSum", [rand(3, 4)], {"keepdims": 0}, 11),
    ("reducesum-13-input", "ReduceSum", [rand(3, 4, 5), ints(0, 2)], {}, 13),
    ("reducesum-13-input-nokeep", "ReduceSum", [rand(3, 4, 5), ints(-2)], {"keepdims": 0}, 13),
    ("reducesum-13-absent", "ReduceSum", [rand(3, 4)], {"keepdims": 0}, 13),
    ("reducesum-13-empty", "ReduceSum", [rand(3, 4), ints()], {}, 13),
    ("reducesum-13-noop", "ReduceSum", [rand(3, 4), ints()], {"noop_with_empty_axes": 1}, 13),
    ("reducesum-13-noop-absent", "ReduceSum", [rand(3, 4)], {"noop_with_empty_axes": 1}, 13),
    # ReduceMean: axes attribute up to opset 17, input from 18.
    ("reducemean-13-axis", "ReduceMean", [rand(3, 4, 5)], {"axes": [1, 2]}, 13),
    ("reducemean-13-nokeep", "ReduceMean", [rand(3, 4, 5)], {"axes": [-3], "keepdims": 0}, 13),
    ("reducemean-13-all", "ReduceMean", [rand(3, 4)], {"keepdims": 0}, 13),
    ("reducemean-18-input", "ReduceMean", [rand(3, 4, 5), ints(1)], {}, 18),
    ("reducemean-18-input-nokeep", "ReduceMean", [rand(3, 4, 5), ints(0, -1)], {"keepdims": 0}, 18),
    ("reducemean-18-all", "ReduceMean", [rand(3, 4)], {}, 18),
    ("reducemean-18-noop", "ReduceMean", [rand(3, 4), ints()], {"noop_with_empty_axes": 1}, 18),
    # Shape and layout.
    ("reshape-zero-minus-one", "Reshape", [rand(2, 3, 4), ints(0, -1)], {}, 13),
    ("reshape-flatten", "Reshape", [rand(2, 3, 4), ints(-1)], {}, 14),
    ("reshape-allowzero", "Reshape", [rand(2, 3, 4), ints(4, 3, 2)], {"allowzero": 1}, 14),
    ("reshape-allowzero-off", "Reshape", [rand(2, 3, 4), ints(2, 0, 2, 2)], {"allowzero": 0}, 14),
    ("transpose-default", "Transpose", [rand(2, 3, 4)], {}, 13),
    ("transpose-perm", "Transpose", [rand(2, 3, 4)], {"perm": [1, 2, 0]}, 13),
    ("squeeze-11-attr", "Squeeze", [rand(3, 1, 4, 1)], {"axes": [1, -1]}, 11),
    ("squeeze-13-input", "Squeeze", [rand(3, 1, 4, 1), ints(3)], {}, 13),
    ("squeeze-13-all", "Squeeze", [rand(1, 3, 1)], {}, 13),
    ("unsqueeze-11-attr", "Unsqueeze", [rand(3, 4)], {"axes": [0, 3]}, 11),
    ("unsqueeze-13-input", "Unsqueeze", [rand(3, 4), ints(-1, 1)], {}, 13),
    ("concat-axis0", "Concat", [rand(2, 3), rand(4, 3)], {"axis": 0}, 13),
    ("concat-neg-axis", "Concat", [rand(2, 1), rand(2, 3), rand(2, 2)], {"axis": -1}, 13),
    ("concat-middle", "Concat", [rand(2, 1, 3), rand(2, 2, 3)], {"axis": 1}, 11),
    # Gather: axis, negative axis, negative and repeated indices, rank-0 and 2-D indices.
    ("gather-axis0", "Gather", [rand(5, 3), ints(0, 4, 2)], {}, 13),
    ("gather-duplicates", "Gather", [rand(5, 3), ints(1, 1, 3, 1, 0)], {}, 13),
    ("gather-negative", "Gather", [rand(5, 3), ints(-1, 2, -5, 4)], {"axis": 0}, 13),
    ("gather-axis1", "Gather", [rand(2, 5, 3), ints(4, 0, 4)], {"axis": 1}, 13),
    ("gather-neg-axis", "Gather", [rand(2, 5, 3), ints(2, -3)], {"axis": -1}, 13),
    ("gather-2d-indices", "Gather", [rand(4, 3), np.array([[0, 3], [3, 3], [-1, 1]])], {}, 13),
    ("gather-scalar-index", "Gather", [rand(4, 3), np.array(2)], {"axis": 0}, 11),
    ("gather-int32-indices", "Gather", [rand(4, 3), np.array([3, 0, 3], dtype=np.int32)], {}, 13),
]


@pytest.mark.parametrize(
    ("op_type", "inputs", "attrs", "opset"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_vjp_matches_finite_differences(op_type, inputs, attrs, opset):
    check_vjp(op_type, inputs, attrs, opset)


def test_every_rule_is_checked_against_finite_differences():
    assert {case[1] for case in CASES} == set(GRAD_RULES)


def test_the_rules_cover_the_operators_of_the_issue():
    assert set(GRAD_RULES) == {
        "Gather", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Neg", "Relu", "Sigmoid", "Tanh",
        "Exp", "Log", "ReduceSum", "ReduceMean", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
        "Concat", "Identity",
    }  # fmt: skip


def test_relu_gradient_is_zero_at_zero():
    node = helper.make_node("Relu", ["x"], ["y"])
    x = np.array([-1.0, 0.0, 2.0, -0.0])
    (gx,) = GRAD_RULES["Relu"](node, [x], [np.maximum(x, 0)], [np.array([5.0, 6.0, 7.0, 8.0])])
    np.testing.assert_array_equal(gx, [0.0, 0.0, 7.0, 0.0])


def test_gather_accumulates_repeated_indices():
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=0)
    data = np.zeros(4)
    indices = ints(1, 1, 3, 1, -3)
    g = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    gd, gi = GRAD_RULES["Gather"](node, [data, indices], [data[indices]], [g])
    np.testing.assert_array_equal(gd, [0.0, 17.0, 0.0, 3.0])
    assert gi is None


def test_gather_along_an_inner_axis_accumulates_per_row():
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=1)
    data = np.zeros((2, 3))
    indices = np.array([[2, 2], [0, -1]])
    g = np.arange(1.0, 9.0).reshape(2, 2, 2)
    (gd, _) = GRAD_RULES["Gather"](node, [data, indices], [np.take(data, indices, 1)], [g])
    # Row r receives g[r, 0, 0] + g[r, 0, 1] + g[r, 1, 1] at column 2 and g[r, 1, 0] at column 0.
    np.testing.assert_array_equal(gd, [[3.0, 0.0, 1 + 2 + 4], [7.0, 0.0, 5 + 6 + 8]])


def test_low_precision_gather_accumulates_in_float32():
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=0)
    data = np.zeros(2, dtype=ml_dtypes.bfloat16)
    indices = ints(*[0] * 300)
    g = np.ones(300, dtype=ml_dtypes.bfloat16)
    (gd, _) = GRAD_RULES["Gather"](node, [data, indices], [data[indices]], [g])
    # Summed in bfloat16 one by one, 300 ones would stall at 256; in float32 the sum is exact
    # and 300 rounds once to the bfloat16 value 300.
    assert gd.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(gd.astype(np.float64), [300.0, 0.0])


def test_gather_with_no_indices_has_a_zero_gradient():
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=0)
    data = np.ones((3, 2))
    indices = np.zeros((0,), dtype=np.int64)
    (gd, gi) = GRAD_RULES["Gather"](node, [data, indices], [data[indices]], [np.zeros((0, 2))])
    np.testing.assert_array_equal(gd, np.zeros((3, 2)))
    assert gi is None


@pytest.mark.parametrize("op_type", sorted(GRAD_RULES))
def test_no_cotangent_means_no_gradient(op_type):
    node = helper.make_node(op_type, ["a", "b"], ["y"])
    assert GRAD_RULES[op_type](node, [np.ones(2), np.ones(2)], [np.ones(2)], [None]) == [None, None]


def test_integer_operands_get_no_gradient():
    node = helper.make_node("Add", ["a", "b"], ["y"])
    a = np.arange(3.0)
    b = np.arange(3)
    ga, gb = GRAD_RULES["Add"](node, [a, b], [a + b], [np.ones(3)])
    np.testing.assert_array_equal(ga, np.ones(3))
    assert gb is None


def test_integer_gather_gets_no_gradient():
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=0)
    data = np.arange(6).reshape(3, 2)
    indices = ints(2, 0)
    grads = GRAD_RULES["Gather"](node, [data, indices], [data[indices]], [np.ones((2, 2))])
    assert grads == [None, None]


def test_mean_over_an_empty_axis_has_an_empty_gradient():
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])
    x = np.zeros((2, 0))
    with np.errstate(all="raise"):
        (gx,) = GRAD_RULES["ReduceMean"](node, [x], [np.full((2, 1), np.nan)], [np.ones((2, 1))])
    assert gx.shape == (2, 0) and gx.dtype == np.float64


def test_gemm_with_an_empty_c_name_has_no_c_gradient():
    node = helper.make_node("Gemm", ["a", "b", ""], ["y"])
    a, b = np.ones((2, 3)), np.ones((3, 4))
    grads = GRAD_RULES["Gemm"](node, [a, b, None], [a @ b], [np.ones((2, 4))])
    assert len(grads) == 3 and grads[2] is None
    np.testing.assert_array_equal(grads[0], np.full((2, 3), 4.0))
    np.testing.assert_array_equal(grads[1], np.full((3, 4), 2.0))


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=["float16", "bfloat16", "float32"]
)
def test_low_precision_gradients_keep_the_input_dtype(dtype):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([[0.5, -1.0], [2.0, 0.25]])
    g = np.array([[1.0, 0.0], [-1.0, 2.0]])
    inputs = [a.astype(dtype), b.astype(dtype)]
    ga, gb = GRAD_RULES["MatMul"](node, inputs, [(a @ b).astype(dtype)], [g.astype(dtype)])
    assert ga.dtype == dtype and gb.dtype == dtype
    # These values are exact in every dtype: g @ b.T and a.T @ g by hand.
    np.testing.assert_array_equal(ga.astype(np.float64), [[0.5, 2.0], [-2.5, -1.5]])
    np.testing.assert_array_equal(gb.astype(np.float64), [[-2.0, 6.0], [-2.0, 8.0]])


def test_gradients_are_writable_arrays_of_their_own():
    node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    x = np.ones((2, 3))
    (gx,) = GRAD_RULES["ReduceSum"](node, [x], [x.sum()], [np.array(2.0)])
    gx += 1.0
    np.testing.assert_array_equal(gx, np.full((2, 3), 3.0))


def test_rule_for_unknown_operator():
    assert rule_for("MatMul") is GRAD_RULES["MatMul"]
    with pytest.raises(MissingGradientRuleError, match="'Floor'") as info:
        rule_for("Floor")
    assert isinstance(info.value, NotImplementedError)
    assert "MatMul" in str(info.value)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((2, 3), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
        ((3,), [3.0, 5.0, 7.0]),
        ((1, 3), [[3.0, 5.0, 7.0]]),
        ((2, 1), [[3.0], [12.0]]),
        ((1, 1), [[15.0]]),
        ((), 15.0),
    ],
)
def test_unbroadcast(shape, expected):
    result = unbroadcast(np.arange(6.0).reshape(2, 3), shape)
    assert result.shape == shape
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("shape", [(2,), (3, 3), (1, 2, 3)])
def test_unbroadcast_rejects_shapes_that_do_not_broadcast(shape):
    with pytest.raises(ValueError, match="does not broadcast"):
        unbroadcast(np.ones((2, 3)), shape)
