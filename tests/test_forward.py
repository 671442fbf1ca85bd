"""The public forward operators against the spec oracle and against hand-computed tables.

Every element type x reduction x layout x index dtype, with duplicates, negative indices and
axes, NaN / inf / -0.0, integer extremes and empty arrays (hypothesis draws the shapes and the
seeds; the value generators in conftest.py are rich in those corners). Floats are compared bit
by bit, NaN by position.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import (
    INDEX_DTYPES,
    LAYOUTS,
    REDUCTIONS,
    TYPES,
    assert_identical,
    dtype_of,
    geometries,
    is_defined,
    random_indices,
    random_values,
    with_layout,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
import scatterx as sx

WRITABLE_LAYOUTS = ("C", "F", "negative", "strided")
OUT_MODES = ("new", "out", "in-place")


def _snapshot(*arrays):
    return [np.array(a, copy=True) for a in arrays]


def _assert_unchanged(arrays, snapshots):
    for a, s in zip(arrays, snapshots, strict=True):
        assert_identical(np.array(a, copy=True), s)


@st.composite
def scatter_cases(draw):
    data_shape, axis, index_shape = draw(geometries(max_rank=4, max_dim=3))
    return dict(
        data_shape=data_shape,
        axis=axis,
        index_shape=index_shape,
        seed=draw(st.integers(0, 2**32 - 1)),
        reduction=draw(st.sampled_from(REDUCTIONS)),
        index_dtype=draw(st.sampled_from(INDEX_DTYPES)),
        layouts=draw(st.tuples(*[st.sampled_from(LAYOUTS)] * 3)),
        out_layout=draw(st.sampled_from(WRITABLE_LAYOUTS)),
        mode=draw(st.sampled_from(OUT_MODES)),
    )


@pytest.mark.parametrize("kind", TYPES)
@settings(max_examples=25, deadline=None)
@given(case=scatter_cases())
def test_scatter_matches_oracle(kind, case):
    rng = np.random.default_rng(case["seed"])
    axis, reduction, mode = case["axis"], case["reduction"], case["mode"]
    size = case["data_shape"][axis]
    data_layout, index_layout, update_layout = case["layouts"]
    if mode == "in-place":
        data_layout = case["out_layout"]
    data = with_layout(random_values(kind, case["data_shape"], rng), data_layout)
    indices = with_layout(random_indices(case["index_shape"], size, case["index_dtype"], rng), index_layout)
    updates = with_layout(random_values(kind, case["index_shape"], rng), update_layout)
    inputs = (data, indices, updates)
    before = _snapshot(*inputs)

    if not is_defined(kind, reduction):
        with pytest.raises(TypeError, match=reduction):
            sx.scatter_elements(data, indices, updates, axis, reduction)
        _assert_unchanged(inputs, before)
        return

    expected = oracle.scatter_elements(data, indices, updates, axis, reduction)
    if mode == "new":
        result = sx.scatter_elements(data, indices, updates, axis, reduction)
        assert result.flags.c_contiguous and result.flags.writeable
        assert not any(np.shares_memory(result, a) for a in inputs)
    elif mode == "out":
        out = with_layout(
            random_values(kind, case["data_shape"], rng).astype(expected.dtype), case["out_layout"]
        )
        result = sx.scatter_elements(data, indices, updates, axis, reduction, out=out)
        assert result is out
    elif expected.dtype != data.dtype:
        # A fixed-width string result that needs more room than data has cannot go in place.
        with pytest.raises(TypeError, match="dtype"):
            sx.scatter_elements(data, indices, updates, axis, reduction, out=data)
        _assert_unchanged(inputs, before)
        return
    else:
        result = sx.scatter_elements(data, indices, updates, axis, reduction, out=data)
        assert result is data
        inputs, before = inputs[1:], before[1:]
    assert_identical(np.array(result, copy=True), expected)
    _assert_unchanged(inputs, before)


@st.composite
def gather_cases(draw):
    data_shape, axis, index_shape = draw(geometries(max_rank=4, max_dim=3))
    return dict(
        data_shape=data_shape,
        axis=axis,
        index_shape=index_shape,
        seed=draw(st.integers(0, 2**32 - 1)),
        index_dtype=draw(st.sampled_from(INDEX_DTYPES)),
        layouts=draw(st.tuples(*[st.sampled_from(LAYOUTS)] * 2)),
        out_layout=draw(st.sampled_from(WRITABLE_LAYOUTS + (None,))),
    )


@pytest.mark.parametrize("kind", TYPES)
@settings(max_examples=15, deadline=None)
@given(case=gather_cases())
def test_gather_matches_oracle(kind, case):
    rng = np.random.default_rng(case["seed"])
    axis = case["axis"]
    data_layout, index_layout = case["layouts"]
    data = with_layout(random_values(kind, case["data_shape"], rng), data_layout)
    size = case["data_shape"][axis]
    indices = with_layout(random_indices(case["index_shape"], size, case["index_dtype"], rng), index_layout)
    before = _snapshot(data, indices)
    expected = oracle.gather_elements(data, indices, axis)
    if case["out_layout"] is None:
        result = sx.gather_elements(data, indices, axis)
        assert result.flags.c_contiguous
        assert not np.shares_memory(result, data)
    else:
        out = with_layout(random_values(kind, case["index_shape"], rng), case["out_layout"])
        result = sx.gather_elements(data, indices, axis, out=out)
        assert result is out
    assert_identical(np.array(result, copy=True), expected)
    _assert_unchanged((data, indices), before)


# Hand-computed cases: (name, dtype, data, indices, updates, axis, reduction, expected).
# The expected values are worked out by hand from the spec, not by any implementation.
F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
NAN, INF = np.nan, np.inf
SCATTER_TABLE = [
    (
        "onnx-doc-axis0",
        "float32",
        np.zeros((3, 3)),
        [[1, 0, 2], [0, 2, 1]],
        [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]],
        0,
        "none",
        [[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]],
    ),
    (
        "onnx-doc-axis1",
        "float32",
        [[1, 2, 3, 4, 5]],
        [[1, 3]],
        [[1.1, 2.1]],
        1,
        "none",
        [[1, 1.1, 3, 2.1, 5]],
    ),
    ("last-writer-wins", "int64", [0, 0, 0], [1, 1, -2], [5, 6, 7], 0, "none", [0, 7, 0]),
    (
        "add-duplicates-longer-axis",
        "int32",
        [1, 2, 3],
        [0, 0, 2, -1],
        [10, 20, 30, 40],
        0,
        "add",
        [31, 2, 73],
    ),
    ("mul-with-zero", "float64", [2, 3, 4], [0, 0, 1], [0, 5, 2], 0, "mul", [0, 6, 4]),
    ("mul-negative-zero", "float64", [2.0], [0], [-0.0], 0, "mul", [-0.0]),
    ("max-nan-propagates", "float64", [1, NAN, 3], [0, 2, 2, 1], [NAN, 1, 5, 9], 0, "max", [NAN, NAN, 5]),
    ("min-nan-after", "float32", [1, 2], [1, 1], [NAN, -5], 0, "min", [1, NAN]),
    ("max-keeps-current-zero", "float64", [-0.0], [0], [0.0], 0, "max", [-0.0]),
    ("min-keeps-current-zero", "float64", [0.0], [0], [-0.0], 0, "min", [0.0]),
    ("max-inf", "float16", [-INF, 1], [0, 1], [-1e5, INF], 0, "max", [-INF, INF]),
    ("add-inf-nan", "float64", [INF, 1], [0, 1], [-INF, INF], 0, "add", [NAN, INF]),
    ("int8-add-wraps", "int8", [127, -128], [0, 0, 1], [1, 1, -1], 0, "add", [-127, 127]),
    ("uint8-mul-wraps", "uint8", [200], [0], [2], 0, "mul", [144]),
    ("int64-mul-wraps", "int64", [2**62], [0], [4], 0, "mul", [0]),
    ("uint64-add-wraps", "uint64", [2**64 - 1], [0], [2], 0, "add", [1]),
    ("int16-min", "int16", [5, 5], [0, 1, 1], [-32768, 7, 32767], 0, "min", [-32768, 5]),
    ("uint32-max", "uint32", [5, 5], [0, 1, 1], [2**32 - 1, 7, 3], 0, "max", [2**32 - 1, 7]),
    # float16 spacing at 2048 is 2: each step 2048 + 1 rounds back to 2048 (ties to even).
    ("float16-rounds-each-step", "float16", [2048], [0, 0], [1, 1], 0, "add", [2048]),
    # bfloat16 spacing at 256 is 2: the same effect.
    ("bfloat16-rounds-each-step", "bfloat16", [256], [0, 0], [1, 1], 0, "add", [256]),
    # float32 spacing at 1e8 is 8: sequential order loses every +1, another order would not.
    ("float32-sequential-order", "float32", [0], [0] * 6, [1e8, 1, 1, 1, 1, -1e8], 0, "add", [0]),
    ("complex-mul", "complex128", [1 + 2j], [0], [3 - 1j], 0, "mul", [5 + 5j]),
    ("complex-add", "complex64", [1 + 2j, 0], [0, 0], [1j, -1], 0, "add", [0 + 3j, 0]),
    ("bool-add-is-or", "bool", [False, True], [0, 0, 1], [False, True, False], 0, "add", [True, True]),
    ("bool-mul-is-and", "bool", [True, True], [0, 1], [False, True], 0, "mul", [False, True]),
    ("bool-max-is-or", "bool", [False, False], [1], [True], 0, "max", [False, True]),
    ("bool-min-is-and", "bool", [True, True], [1], [False], 0, "min", [True, False]),
    (
        "axis-last-negative",
        "int64",
        [[1, 2, 3], [4, 5, 6]],
        [[2, 2, 0]],
        [[7, 8, 9]],
        -1,
        "none",
        [[9, 2, 8], [4, 5, 6]],
    ),
    (
        "indices-smaller-off-axis",
        "int64",
        [[1, 2, 3], [4, 5, 6]],
        [[-1], [0]],
        [[10], [20]],
        1,
        "add",
        [[1, 2, 13], [24, 5, 6]],
    ),
    (
        "axis0-3d",
        "int64",
        np.zeros((2, 2, 2)),
        [[[1, 0]]],
        [[[5, 6]]],
        0,
        "none",
        [[[0, 6], [0, 0]], [[5, 0], [0, 0]]],
    ),
    ("empty-indices", "float64", [1, 2], np.zeros(0, int), [], 0, "add", [1, 2]),
    (
        "empty-data",
        "float64",
        np.zeros((0, 3)),
        np.zeros((0, 3), int),
        np.zeros((0, 3)),
        0,
        "mul",
        np.zeros((0, 3)),
    ),
    (
        "empty-off-axis",
        "float64",
        np.zeros((2, 0)),
        np.zeros((5, 0), int),
        np.zeros((5, 0)),
        0,
        "add",
        np.zeros((2, 0)),
    ),
    ("str-add-concatenates", "object-str", ["a", "b"], [1, 0, 1], ["x", "y", "z"], 0, "add", ["ay", "bxz"]),
    ("str-max-code-points", "object-str", ["b", "é"], [0, 0, 1], ["ab", "c", "z"], 0, "max", ["c", "é"]),
    ("bytes-min", "object-bytes", [b"b", b"\xff"], [0, 1], [b"ab", b"z"], 0, "min", [b"ab", b"z"]),
    ("U-add-widens", "U", ["ab", "c"], [0, 0], ["xy", "z"], 0, "add", np.array(["abxyz", "c"], "U5")),
    ("S-none", "S", [b"ab", b"c"], [1], [b"zz"], 0, "none", np.array([b"ab", b"zz"], "S3")),
    ("StringDType-add", "StringDType", ["é", ""], [1, 1, 0], ["a", "b", "c"], 0, "add", ["éc", "ab"]),
]


def _typed(kind, values):
    if isinstance(values, np.ndarray) and values.dtype.kind in "US":
        return values
    dtype = dtype_of(kind)
    if dtype.kind == "O":
        arr = np.empty(len(values), object)
        arr[:] = values
        return arr
    with np.errstate(over="ignore"):  # -1e5 is meant to overflow float16 to -inf
        return np.array(values, dtype=dtype)


@pytest.mark.parametrize(
    ("kind", "data", "indices", "updates", "axis", "reduction", "expected"),
    [case[1:] for case in SCATTER_TABLE],
    ids=[case[0] for case in SCATTER_TABLE],
)
def test_scatter_hand_table(kind, data, indices, updates, axis, reduction, expected):
    data, updates, expected = _typed(kind, data), _typed(kind, updates), _typed(kind, expected)
    indices = np.array(indices, dtype=np.int64)
    assert_identical(oracle.scatter_elements(data, indices, updates, axis, reduction), expected)
    assert_identical(sx.scatter_elements(data, indices, updates, axis, reduction), expected)


GATHER_TABLE = [
    ("onnx-doc-axis1", [[1, 2], [3, 4]], [[0, 0], [1, 0]], 1, [[1, 1], [4, 3]]),
    (
        "onnx-doc-axis0-negative",
        [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
        [[1, 2, 0], [-1, 0, 0]],
        0,
        [[4, 8, 3], [7, 2, 3]],
    ),
    ("longer-along-axis", [10, 20], [1, 1, 0, -2, -1], 0, [20, 20, 10, 10, 20]),
    ("smaller-off-axis", [[1, 2, 3], [4, 5, 6]], [[2]], -1, [[3]]),
    ("empty", [[1, 2, 3]], np.zeros((1, 0), int), 1, np.zeros((1, 0), int)),
]


@pytest.mark.parametrize(
    ("data", "indices", "axis", "expected"), [c[1:] for c in GATHER_TABLE], ids=[c[0] for c in GATHER_TABLE]
)
@pytest.mark.parametrize("kind", ["int64", "float64", "object-str"])
def test_gather_hand_table(kind, data, indices, axis, expected):
    def typed(values):
        arr = np.array(values, dtype=np.int64)
        return arr.astype(str).astype(object) if kind == "object-str" else arr.astype(dtype_of(kind))

    indices = np.array(indices, dtype=np.int64)
    result = sx.gather_elements(typed(data), indices, axis)
    assert_identical(result, typed(expected))
    assert_identical(oracle.gather_elements(typed(data), indices, axis), typed(expected))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_every_index_dtype_gives_the_same_result(index_dtype):
    data = np.arange(12.0).reshape(3, 4)
    indices = np.array([[2, 0, 1, 2], [0, 0, 2, 1]])
    updates = np.array([[100.0, 1.0, 100.0, 100.0], [100.0, 100.0, 100.0, 100.0]])
    expected = np.array([[100.0, 102.0, 2.0, 3.0], [4.0, 5.0, 106.0, 107.0], [108.0, 9.0, 110.0, 111.0]])
    result = sx.scatter_elements(data, indices.astype(index_dtype), updates, 0, "add")
    assert_identical(result, expected)
    gathered = sx.gather_elements(data, indices.astype(index_dtype), 0)
    assert_identical(gathered, np.array([[8.0, 1.0, 6.0, 11.0], [0.0, 1.0, 10.0, 7.0]]))


def test_uint64_index_above_int64_is_out_of_bounds_not_wrapped():
    data = np.zeros(3)
    big = np.array([0, 2**64 - 1], dtype=np.uint64)  # would wrap to -1 as int64
    with pytest.raises(IndexError, match=str(2**64 - 1)):
        sx.scatter_elements(data, big, np.ones(2))
    with pytest.raises(IndexError, match=str(2**64 - 1)):
        sx.gather_elements(data, big)
    assert_identical(data, np.zeros(3))


@pytest.mark.parametrize("kind", TYPES)
def test_updates_as_list_and_scalar_take_data_dtype(kind):
    rng = np.random.default_rng(1)
    data = random_values(kind, (2, 3), rng, nan=False)
    value = data[1, 2]
    listed = data[:1].tolist()
    indices = np.array([[1, 0, 1]])
    expected = oracle.scatter_elements(data, indices, data[:1], 0, "none")
    assert_identical(sx.scatter_elements(data, indices, listed), expected)
    from_scalar = oracle.scatter_elements(data, indices, np.full((1, 3), value, dtype=data.dtype), 0, "none")
    assert_identical(sx.scatter_elements(data, indices, value), from_scalar)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_broadcast_zero_stride_updates_and_indices(kind, reduction):
    """Zero strides in updates and indices (one value reused for every position)."""
    rng = np.random.default_rng(2)
    data = random_values(kind, (4, 5), rng)
    indices = np.broadcast_to(np.array([[3], [-1], [0]]), (3, 5))
    updates = np.broadcast_to(random_values(kind, (1, 1), rng), (3, 5))
    if not is_defined(kind, reduction):
        with pytest.raises(TypeError):
            sx.scatter_elements(data, indices, updates, 0, reduction)
        return
    expected = oracle.scatter_elements(data, indices, updates, 0, reduction)
    assert_identical(sx.scatter_elements(data, indices, updates, 0, reduction), expected)


@pytest.mark.parametrize("kind", ["int32", "uint16", "float32", "float64", "complex128", "U"])
def test_non_native_byte_order(kind):
    """Byte-swapped inputs give the values of native ones (the result is in native order)."""
    rng = np.random.default_rng(3)
    data = random_values(kind, (3, 4), rng)
    updates = random_values(kind, (5, 4), rng)
    indices = random_indices((5, 4), 3, np.dtype(np.int32), rng)
    swapped = [a.astype(a.dtype.newbyteorder()) for a in (data, indices, updates)]
    reduction = "add"
    expected = oracle.scatter_elements(data, indices, updates, 0, reduction)
    result = sx.scatter_elements(*swapped, 0, reduction)
    assert result.dtype.isnative
    assert_identical(result, expected)
    assert_identical(
        sx.gather_elements(swapped[0], swapped[1][:2]), oracle.gather_elements(data, indices[:2])
    )


def test_out_may_alias_the_inputs():
    """out= may be updates or share memory with an input: the inputs are read as they were."""
    data = np.arange(9.0).reshape(3, 3)
    indices = np.array([[2, 0, 1], [0, 0, 2], [1, 2, 2]])
    updates = np.arange(10.0, 19.0).reshape(3, 3)
    expected = oracle.scatter_elements(data, indices, updates, 0, "add")
    aliased = updates.copy()
    assert_identical(sx.scatter_elements(data, indices, aliased, 0, "add", out=aliased), expected)
    # out overlaps data shifted by one column.
    buffer = np.zeros((3, 4))
    buffer[:, 1:] = data
    shifted_data = buffer[:, 1:]
    assert_identical(
        sx.scatter_elements(shifted_data, indices, updates, 0, "add", out=buffer[:, :3]), expected
    )
    gathered = oracle.gather_elements(data, indices, 1)
    source = data.copy()
    assert_identical(sx.gather_elements(source, indices, 1, out=source), gathered)


def test_fixed_width_result_widths():
    """U/S results: NumPy's promoted width of data and updates, widened as concatenation needs."""
    data = np.array(["a", "b"], "U1")
    wide = np.array(["xyz"], "U5")
    result = sx.scatter_elements(data, [0], wide)
    assert_identical(result, np.array(["xyz", "b"], "U5"))
    longer = sx.scatter_elements(
        np.array([b"ab"], "S2"), [0, 0], np.array([b"cd", b"e"], "S2"), reduction="add"
    )
    assert_identical(longer, np.array([b"abcde"], "S5"))
    narrow = sx.scatter_elements(np.array(["abc"], "U3"), [0], np.array(["z"], "U1"), reduction="max")
    assert_identical(narrow, np.array(["z"], "U3"))


def _unaligned(arr):
    """A copy of `arr` whose data pointer is off by one byte (not aligned for its dtype)."""
    buffer = np.zeros(arr.nbytes + 1, np.uint8)
    view = np.frombuffer(buffer.data, arr.dtype, count=arr.size, offset=1).reshape(arr.shape)
    view[...] = arr
    return view


@pytest.mark.parametrize("kind", ["int32", "float64", "complex128", "bfloat16"])
def test_unaligned_arrays(kind):
    rng = np.random.default_rng(4)
    data = random_values(kind, (3, 4), rng)
    updates = random_values(kind, (5, 4), rng)
    indices = random_indices((5, 4), 3, np.dtype(np.int64), rng)
    expected = oracle.scatter_elements(data, indices, updates, 0, "add")
    args = [_unaligned(a) for a in (data, indices, updates)]
    assert not args[0].flags.aligned
    assert_identical(sx.scatter_elements(*args, 0, "add"), expected)
    out = _unaligned(np.zeros_like(data))
    assert sx.scatter_elements(*args, 0, "add", out=out) is out
    assert_identical(np.array(out), expected)
    in_place = _unaligned(data)
    sx.scatter_elements(in_place, args[1], args[2], 0, "add", out=in_place)
    assert_identical(np.array(in_place), expected)
    gathered = _unaligned(np.zeros_like(updates))
    sx.gather_elements(args[0], args[1], 0, out=gathered)
    assert_identical(np.array(gathered), oracle.gather_elements(data, indices, 0))
