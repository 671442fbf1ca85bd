"""Differential tests against onnxruntime (a one-node InferenceSession) and PyTorch.

Where a peer defines a case, scatterx must give the same bits. Where a peer refuses a case or
defines it differently, the difference is a row of a table below, and a test asserts that the
row still holds (the peer still refuses, still gives its different answer), so the tables and
docs/semantics.md stay true.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import (
    REDUCTIONS,
    TYPES,
    assert_identical,
    dtype_of,
    is_defined,
    one_node_model,
    random_indices,
    random_values,
    unique_indices,
)

import oracle
import scatterx as sx

ort.set_default_logger_severity(4)  # refusals are expected below; keep the log quiet
OPS = REDUCTIONS + ("gather",)
SEEDS = (0, 1, 2)


def _case(kind, seed, *, nan=True, unique=False, allow_negative=True):
    """A rank-3 case with duplicates (unless unique), negative indices and a longer axis."""
    rng = np.random.default_rng(seed)
    data_shape = (3, 4, 5)
    axis = seed % 3 - 1
    index_shape = [2, 3, 4]
    index_shape[axis] = data_shape[axis] if unique else 7
    index_dtype = np.dtype(np.int64 if allow_negative else np.uint8)
    size = data_shape[axis]
    if unique:
        indices = unique_indices(tuple(index_shape), size, axis, index_dtype, rng)
    else:
        indices = random_indices(tuple(index_shape), size, index_dtype, rng)
    data = random_values(kind, data_shape, rng, nan=nan)
    updates = random_values(kind, tuple(index_shape), rng, nan=nan)
    return data, indices.astype(np.int64), updates, axis


def _without_signed_zero_ties(*arrays):
    """-0.0 -> +0.0, so max/min never compare a signed-zero tie (see the tables)."""
    for a in arrays:
        if a.dtype.kind in "fc" or a.dtype == dtype_of("bfloat16"):
            a[a == 0] = 0
    return arrays


# ---------------------------------------------------------------------------------------------
# onnxruntime


def ort_run(op, data, indices, updates=None, axis=0, reduction="none"):
    attributes = {"axis": axis} if op == "gather" else {"axis": axis, "reduction": reduction}
    name = "GatherElements" if op == "gather" else "ScatterElements"
    model = one_node_model(name, data, indices, updates, **attributes)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"data": data, "indices": indices}
    if updates is not None:
        feeds["updates"] = updates
    return session.run(None, feeds)[0]


# (kind, op) -> the message onnxruntime 1.32 answers with. Strings are fed as object arrays of
# str (the only string form onnxruntime maps to tensor(string)); bytes and S are in ORT_VALUES.
_ALL = OPS
ORT_REFUSES = {
    **{("bool", r): "bool data type is not supported with ScatterElements" for r in ("max", "min")},
    **{("float16", r): "MLFloat16 data type is not supported with ScatterElements" for r in ("add", "mul")},
    **{("bfloat16", op): "can't be converted to MLDataType" for op in _ALL},
    **{("StringDType", op): "can't be converted to MLDataType" for op in _ALL},
    **{
        (k, op): "is not currently registered or supported"
        for k in ("complex64", "complex128")
        for op in _ALL
    },
    **{
        ("object-str", r): "string data type is not supported with ScatterElements"
        for r in ("mul", "max", "min")
    },
    **{("U", r): "string data type is not supported with ScatterElements" for r in ("mul", "max", "min")},
}
# Element types whose onnxruntime string form differs from ours: tested in ORT_VALUES only.
ORT_NOT_COMPARED = {"object-bytes", "S"}


def _ort_feedable(kind):
    return kind not in ORT_NOT_COMPARED


@pytest.mark.parametrize("kind", [k for k in TYPES if _ort_feedable(k)])
@pytest.mark.parametrize("op", OPS)
def test_onnxruntime_agrees_or_refuses_as_tabled(kind, op):
    if op != "gather" and not is_defined(kind, op):
        # Both refuse what the spec leaves out.
        data, indices, updates, axis = _case(kind, 0)
        with pytest.raises(TypeError):
            sx.scatter_elements(data, indices, updates, axis, op)
        assert (kind, op) in ORT_REFUSES
    if (kind, op) in ORT_REFUSES:
        data, indices, updates, axis = _case(kind, 0)
        with pytest.raises(Exception, match=ORT_REFUSES[kind, op]):
            ort_run(op, data, indices, updates if op != "gather" else None, axis, op)
        return
    # NaN and signed-zero ties in max/min are order questions: see ORT_VALUES.
    order_free = op in ("max", "min")
    for seed in SEEDS:
        data, indices, updates, axis = _case(kind, seed, nan=not order_free)
        if order_free:
            _without_signed_zero_ties(data, updates)
        if op == "gather":
            expected = ort_run(op, data, indices, axis=axis)
            result = sx.gather_elements(data, indices, axis)
        else:
            expected = ort_run(op, data, indices, updates, axis, op)
            result = sx.scatter_elements(data, indices, updates, axis, op)
        if kind == "U":
            # onnxruntime hands strings back as an object array of str.
            assert expected.dtype == object and result.dtype.kind == "U"
            assert result.tolist() == expected.tolist()
        else:
            assert_identical(result, expected)


_F64, _F32 = np.float64, np.float32
# Cases both run with different answers: (name, op, data, indices, updates, onnxruntime's result,
# scatterx's result). axis 0 everywhere.
ORT_VALUES = [
    (
        "max NaN by order: NaN data, then a number",
        "max",
        np.array([np.nan, 1.0]),
        [0, 1, 0],
        np.array([5.0, np.nan, 2.0]),
        np.array([5.0, np.nan]),
        np.array([np.nan, np.nan]),
    ),
    (
        "min NaN by order",
        "min",
        np.array([1.0], _F32),
        [0, 0],
        np.array([np.nan, 0.5], _F32),
        np.array([0.5], _F32),
        np.array([np.nan], _F32),
    ),
    (
        "max signed-zero tie: onnxruntime takes the update",
        "max",
        np.array([-0.0]),
        [0],
        np.array([0.0]),
        np.array([0.0]),
        np.array([-0.0]),
    ),
    (
        "min signed-zero tie: onnxruntime takes the update",
        "min",
        np.array([0.0]),
        [0],
        np.array([-0.0]),
        np.array([-0.0]),
        np.array([0.0]),
    ),
    (
        "bytes elements are turned into their str()",
        "add",
        np.array([b"a"], object),
        [0],
        np.array([b"b"], object),
        np.array(["b'a'b'b'"], object),
        np.array([b"ab"], object),
    ),
]


@pytest.mark.parametrize(
    ("op", "data", "indices", "updates", "ort_result", "ours"),
    [c[1:] for c in ORT_VALUES],
    ids=[c[0] for c in ORT_VALUES],
)
def test_onnxruntime_value_divergences_still_hold(op, data, indices, updates, ort_result, ours):
    indices = np.array(indices, np.int64)
    assert_identical(ort_run(op, data, indices, updates, 0, op), ort_result)
    assert_identical(sx.scatter_elements(data, indices, updates, 0, op), ours)
    assert_identical(oracle.scatter_elements(data, indices, updates, 0, op), ours)


def test_onnxruntime_refuses_non_utf8_bytes():
    data = np.array([b"\xff"], "S1")
    with pytest.raises(UnicodeDecodeError):
        ort_run("none", data, np.array([0], np.int64), data.copy())
    assert_identical(sx.scatter_elements(data, [0], np.array([b"\xfe"])), np.array([b"\xfe"]))


# ---------------------------------------------------------------------------------------------
# PyTorch

TORCH_DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _to_torch(arr):
    if arr.dtype == dtype_of("bfloat16"):
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(arr))


def _from_torch(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtype_of("bfloat16"))
    return t.numpy()


def torch_run(op, data, indices, updates=None, axis=0):
    d, i = _to_torch(data), torch.from_numpy(indices)
    if op == "gather":
        return _from_torch(torch.gather(d, axis, i))
    u = _to_torch(updates)
    if op == "none":
        return _from_torch(torch.scatter(d, axis, i, u))
    return _from_torch(torch.scatter_reduce(d, axis, i, u, TORCH_REDUCE[op], include_self=True))


# (kind, op) -> PyTorch's message. Strings have no torch tensor at all (test below).
TORCH_REFUSES = {
    **{(k, op): "not implemented for 'UInt" for k in ("uint16", "uint32", "uint64") for op in OPS},
    **{(k, r): "not implemented for 'Complex" for k in ("complex64", "complex128") for r in ("max", "min")},
}
# (kind, op) that PyTorch computes differently, each backed by a row of TORCH_VALUES ->
# what is still compared: "unique" (cases without duplicates) or nothing (None).
TORCH_DIFFERENT = {
    ("float16", "add"): "unique",
    ("float16", "mul"): "unique",
    ("bfloat16", "add"): "unique",
    ("bfloat16", "mul"): "unique",
    ("complex128", "mul"): None,
}


@pytest.mark.parametrize("kind", [k for k in TYPES if k in TORCH_DTYPES])
@pytest.mark.parametrize("op", OPS)
def test_torch_agrees_or_refuses_as_tabled(kind, op):
    if op != "gather" and not is_defined(kind, op):
        data, indices, updates, axis = _case(kind, 0)
        with pytest.raises(TypeError):
            sx.scatter_elements(data, indices, updates, axis, op)
        assert (kind, op) in TORCH_REFUSES
    if (kind, op) in TORCH_REFUSES:
        data, indices, updates, axis = _case(kind, 0, allow_negative=False)
        with pytest.raises((NotImplementedError, RuntimeError), match=TORCH_REFUSES[kind, op]):
            torch_run(op, data, indices, updates, axis)
        return
    if (kind, op) in TORCH_DIFFERENT and TORCH_DIFFERENT[kind, op] is None:
        # Nothing comparable: the row of TORCH_VALUES is the test.
        assert any(row[0].startswith(f"{kind} {op}") for row in TORCH_VALUES)
        return
    for seed in SEEDS:
        # torch.scatter with duplicate indices is nondeterministic (its documentation says so),
        # and it wants indices in [0, size): both are tests below.
        # (kind, op) in TORCH_DIFFERENT: without duplicates every target sees one step, which
        # no accumulator can change.
        unique = op == "none" or (kind, op) in TORCH_DIFFERENT
        data, indices, updates, axis = _case(kind, seed, unique=unique, allow_negative=False)
        if op in ("max", "min"):
            _without_signed_zero_ties(data, updates)
        if op == "gather":
            result = sx.gather_elements(data, indices, axis)
        else:
            result = sx.scatter_elements(data, indices, updates, axis, op)
        assert_identical(result, torch_run(op, data, indices, updates, axis))


_F16 = np.float16
TORCH_VALUES = [
    # float16 spacing at 2048 is 2; PyTorch accumulates in float32 and rounds once.
    (
        "float16 add accumulates in float32",
        "add",
        np.array([2048], _F16),
        [0, 0],
        np.array([1, 1], _F16),
        np.array([2050], _F16),
        np.array([2048], _F16),
    ),
    (
        "bfloat16 add accumulates in float32",
        "add",
        np.array([256], dtype_of("bfloat16")),
        [0, 0],
        np.array([1, 1], dtype_of("bfloat16")),
        np.array([258], dtype_of("bfloat16")),
        np.array([256], dtype_of("bfloat16")),
    ),
    # Step by step: 1.423 * 1.863 -> 2.65, * 1.541 -> 4.086, * 1.3 -> 5.312 (float16 each time).
    (
        "float16 mul accumulates in float32",
        "mul",
        np.array([1.423], _F16),
        [0, 0, 0],
        np.array([1.86328125, 1.541015625, 1.2998046875], _F16),
        np.array([5.31], _F16),
        np.array([5.312], _F16),
    ),
    # One product, different rounding in the last bit of the imaginary part.
    (
        "complex128 mul rounds differently",
        "mul",
        np.array([0.35 + 0.82j]),
        [0],
        np.array([0.33 - 1.3j]),
        np.array([1.1815 - 0.18439999999999998j]),
        np.array([1.1815 - 0.18439999999999995j]),
    ),
    # The imaginary part is 120.224 * 1.8e308 (overflows to inf) + 23.992 * -inf: NumPy's formula
    # gives inf - inf = NaN; PyTorch's product keeps -inf (no intermediate overflow: a fused
    # multiply-add).
    (
        "complex mul with an infinite factor",
        "mul",
        np.array([120.224 + 23.992j]),
        [0],
        np.array([complex(-np.inf, 1.7976931348623157e308)]),
        np.array([complex(-np.inf, -np.inf)]),
        np.array([complex(-np.inf, np.nan)]),
    ),
]


@pytest.mark.parametrize(
    ("op", "data", "indices", "updates", "torch_result", "ours"),
    [c[1:] for c in TORCH_VALUES],
    ids=[c[0] for c in TORCH_VALUES],
)
def test_torch_value_divergences_still_hold(op, data, indices, updates, torch_result, ours):
    indices = np.array(indices, np.int64)
    expected = oracle.scatter_elements(data, indices, updates, 0, op)
    theirs = torch_run(op, data, indices, updates, 0)
    mine = sx.scatter_elements(data, indices, updates, 0, op)
    assert_identical(mine, expected)
    assert_identical(mine, ours)
    assert_identical(theirs, torch_result)


def test_torch_rejects_negative_indices():
    data = np.array([1.0, 2.0])
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch_run("gather", data, np.array([-1]))
    assert_identical(sx.gather_elements(data, [-1]), np.array([2.0]))


def test_torch_scatter_with_duplicates_is_documented_nondeterministic():
    assert "non-deterministic" in torch.Tensor.scatter_.__doc__
    assert_identical(
        sx.scatter_elements(np.zeros(2), [1, 1, 1], np.array([1.0, 2.0, 3.0])), np.array([0.0, 3.0])
    )


def test_torch_has_no_string_tensors():
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        torch.tensor(np.array(["a"], object))


# ---------------------------------------------------------------------------------------------
# NumPy


def test_numpy_maximum_takes_the_second_operand_on_signed_zero_ties():
    """np.maximum(current, update) would turn -0.0 into +0.0; scatterx keeps the current value."""
    current, update = np.array([-0.0] * 4), np.array([0.0] * 4)
    assert_identical(np.maximum(current, update), np.array([0.0] * 4))
    assert_identical(np.minimum(update, current), np.array([-0.0] * 4))
    assert_identical(sx.scatter_elements(current, [0, 1, 2, 3], update, reduction="max"), current)
    assert_identical(sx.scatter_elements(update, [0, 1, 2, 3], current, reduction="min"), update)


def test_numpy_put_along_axis_truncates_fixed_width_strings():
    data = np.array(["a", "b"], "U1")
    numpy_result = data.copy()
    np.put_along_axis(numpy_result, np.array([0]), np.array(["xyz"]), axis=0)
    assert_identical(numpy_result, np.array(["x", "b"], "U1"))
    assert_identical(sx.scatter_elements(data, [0], np.array(["xyz"])), np.array(["xyz", "b"], "U3"))


def test_numpy_char_add_width_is_the_sum_of_widths():
    data, updates = np.array(["ab"], "U3"), np.array(["c"], "U3")
    assert np.char.add(data, updates).dtype == np.dtype("U6")
    assert_identical(sx.scatter_elements(data, [0], updates, reduction="add"), np.array(["abc"], "U3"))


def test_numpy_ufunc_at_agrees():
    """np.add.at / np.multiply.at apply duplicates in order, like scatterx (float16 included)."""
    rng = np.random.default_rng(5)
    for dtype in (np.float16, np.float32, np.int8):
        data = (rng.random(7) * 4).astype(dtype)
        updates = (1 + rng.random(40)).astype(dtype)
        indices = rng.integers(0, 7, 40)
        for reduction, ufunc in (("add", np.add), ("mul", np.multiply)):
            expected = data.copy()
            with np.errstate(over="ignore"):
                ufunc.at(expected, indices, updates)
            assert_identical(sx.scatter_elements(data, indices, updates, reduction=reduction), expected)
