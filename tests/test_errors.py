"""Every error of SPEC section 4: the exception class, what the message names, and that nothing
was written (a preallocated ``out`` and ``out=data`` keep their contents)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import INDEX_DTYPES, TYPES, assert_identical, dtype_of, is_defined, random_values

import scatterx as sx

SPEC_EXAMPLE = "index 7 at indices[1, 2] is out of bounds for axis 0 with size 3 (allowed: -3..2)"


def _spec_example_indices(layout="C"):
    indices = np.array([[0, 1, 2], [-3, 2, 7]])
    return np.asfortranarray(indices) if layout == "F" else indices


@pytest.mark.parametrize("layout", ["C", "F"])
def test_out_of_bounds_message_is_the_spec_example(layout):
    data = np.zeros((3, 3))
    indices = _spec_example_indices(layout)
    with pytest.raises(IndexError) as scatter_error:
        sx.scatter_elements(data, indices, np.ones((2, 3)))
    with pytest.raises(IndexError) as gather_error:
        sx.gather_elements(data, indices)
    assert str(scatter_error.value) == SPEC_EXAMPLE
    assert str(gather_error.value) == SPEC_EXAMPLE


@pytest.mark.parametrize("kind", TYPES)
def test_out_of_bounds_every_type_writes_nothing(kind):
    rng = np.random.default_rng(0)
    data = random_values(kind, (3, 3), rng)
    updates = random_values(kind, (2, 3), rng)
    indices = _spec_example_indices()
    before = data.copy()
    for reduction in [r for r in ("none", "add", "max") if is_defined(kind, r)]:
        out = random_values(kind, (3, 3), rng)
        sentinel = out.copy()
        with pytest.raises(IndexError) as error:
            sx.scatter_elements(data, indices, updates, 0, reduction, out=out)
        assert str(error.value) == SPEC_EXAMPLE
        assert_identical(out, sentinel)
        with pytest.raises(IndexError, match=re.escape(SPEC_EXAMPLE)):
            sx.scatter_elements(data, indices, updates, 0, reduction, out=data)
        assert_identical(data, before)
    out = random_values(kind, (2, 3), rng)
    sentinel = out.copy()
    with pytest.raises(IndexError, match=re.escape(SPEC_EXAMPLE)):
        sx.gather_elements(data, indices, out=out)
    assert_identical(out, sentinel)


# (name, data shape, indices, axis, message). The first bad index in row-major order is named.
OUT_OF_BOUNDS = [
    (
        "negative",
        (3, 4),
        [[0, -5, 9]],
        1,
        "index -5 at indices[0, 1] is out of bounds for axis 1 with size 4 (allowed: -4..3)",
    ),
    (
        "negative-axis",
        (2, 3),
        [[0], [-4]],
        -1,
        "index -4 at indices[1, 0] is out of bounds for axis 1 with size 3 (allowed: -3..2)",
    ),
    (
        "1-d",
        (5,),
        [0, 5],
        0,
        "index 5 at indices[1] is out of bounds for axis 0 with size 5 (allowed: -5..4)",
    ),
    (
        "3-d",
        (2, 2, 2),
        [[[0, 1], [1, 0]], [[1, 1], [0, 2]]],
        2,
        "index 2 at indices[1, 1, 1] is out of bounds for axis 2 with size 2 (allowed: -2..1)",
    ),
]


@pytest.mark.parametrize(
    ("shape", "indices", "axis", "message"), [c[1:] for c in OUT_OF_BOUNDS], ids=[c[0] for c in OUT_OF_BOUNDS]
)
def test_out_of_bounds_messages(shape, indices, axis, message):
    indices = np.array(indices)
    data = np.zeros(shape)
    for run in (
        lambda: sx.scatter_elements(data, indices, np.ones(indices.shape), axis, "add"),
        lambda: sx.gather_elements(data, indices, axis),
    ):
        with pytest.raises(IndexError) as error:
            run()
        assert str(error.value) == message


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_out_of_bounds_for_every_index_dtype(index_dtype):
    data = np.zeros((2, 3))
    indices = np.array([[0, 1, 2], [1, 3, 0]], dtype=index_dtype)
    message = "index 3 at indices[1, 1] is out of bounds for axis 1 with size 3 (allowed: -3..2)"
    out = np.full((2, 3), 7.0)
    with pytest.raises(IndexError) as error:
        sx.scatter_elements(data, indices, np.ones((2, 3)), axis=1, out=out)
    assert str(error.value) == message
    assert_identical(out, np.full((2, 3), 7.0))
    with pytest.raises(IndexError) as error:
        sx.gather_elements(data, indices, axis=1)
    assert str(error.value) == message


def test_uint64_above_int64_message_names_the_unsigned_value():
    data = np.zeros(4)
    indices = np.array([1, 2**63, 2], dtype=np.uint64)
    message = f"index {2**63} at indices[1] is out of bounds for axis 0 with size 4 (allowed: -4..3)"
    for run in (
        lambda: sx.scatter_elements(data, indices, np.ones(3), out=data),
        lambda: sx.gather_elements(data, indices),
    ):
        with pytest.raises(IndexError) as error:
            run()
        assert str(error.value) == message
    assert_identical(data, np.zeros(4))


def test_empty_axis_has_no_valid_index():
    data = np.zeros((0, 2))
    with pytest.raises(
        IndexError, match=r"^index 0 at indices\[0, 0\] is out of bounds for axis 0 with size 0 "
    ):
        sx.scatter_elements(data, np.zeros((1, 2), int), np.ones((1, 2)))
    with pytest.raises(
        IndexError, match=r"^index -1 at indices\[0, 0\] is out of bounds for axis 0 with size 0 "
    ):
        sx.gather_elements(data, np.array([[-1, 0]]))


def test_first_bad_index_in_row_major_order_of_a_large_array():
    """The parallel bounds check still names the first bad index in row-major order."""
    data = np.zeros((1000, 300))
    indices = np.zeros((1000, 300), np.int64)
    indices[900, 5] = 1000
    indices[400, 7] = -1001
    indices[400, 9] = 5000
    out = np.ones((1000, 300))
    with pytest.raises(IndexError) as error:
        sx.scatter_elements(data, indices, data, 0, "add", out=out)
    assert str(error.value) == (
        "index -1001 at indices[400, 7] is out of bounds for axis 0 with size 1000 (allowed: -1000..999)"
    )
    assert_identical(out, np.ones((1000, 300)))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("size", [1, 7, 1000, 2**31 - 1, 2**40])
def test_bounds_check_by_runs_against_numpy(index_dtype, size):
    """The bounds check tests runs of indices at once (any_out_of_bounds) and searches only a run
    with a bad one: against NumPy's comparison, for values at both edges of the range and at the
    limits of the index type, placed at the start, middle and end of a run and of the array."""
    from scatterx import _core

    info = np.iinfo(index_dtype)
    edges = [-size, size - 1, 0]
    bad_values = [-size - 1, size, info.min, info.max, info.min + 1, info.max - 1]
    n = 5000  # several runs of 1024
    rng = np.random.default_rng(size % 1000)
    for value in bad_values:
        if -size <= value < size or not info.min <= value <= info.max:
            continue  # in range for this size, or not a value of the type
        for position in (0, 1023, 1024, 2500, n - 1):
            indices = rng.choice([v for v in edges if info.min <= v <= info.max], n).astype(index_dtype)
            indices[position] = value
            indices[min(n - 1, position + 7)] = value  # a later bad one must not be reported
            wide = indices.astype(np.int64)
            want = int(np.flatnonzero((wide < -size) | (wide >= size))[0])
            assert _core.first_bad_index(indices, size) == want
            assert _core.first_bad_index(indices[::-1], size) == int(
                np.flatnonzero((wide[::-1] < -size) | (wide[::-1] >= size))[0]
            )
        clean = rng.choice([v for v in edges if info.min <= v <= info.max], n).astype(index_dtype)
        assert _core.first_bad_index(clean, size) == -1


# (name, call, exception, regex the message must match). data: 2x3 float64, indices 2x3.
D = np.zeros((2, 3))
I2 = np.array([[0, 1, 0], [1, 0, 1]])
U = np.ones((2, 3))
SHAPE_ERRORS = [
    (
        "indices rank",
        lambda **o: sx.scatter_elements(D, np.zeros(3, int), np.ones(3), **o),
        ValueError,
        r"data shape \(2, 3\).*indices shape \(3,\)",
    ),
    (
        "updates shape",
        lambda **o: sx.scatter_elements(D, I2, np.ones((2, 2)), **o),
        ValueError,
        r"indices shape \(2, 3\).*updates shape \(2, 2\)",
    ),
    (
        "indices wider than data off the axis",
        lambda **o: sx.scatter_elements(D, np.zeros((2, 4), int), np.ones((2, 4)), **o),
        ValueError,
        r"\(2, 4\).*\(2, 3\)",
    ),
    ("axis too large", lambda **o: sx.scatter_elements(D, I2, U, axis=2, **o), ValueError, r"axis 2.*rank 2"),
    (
        "axis too small",
        lambda **o: sx.scatter_elements(D, I2, U, axis=-3, **o),
        ValueError,
        r"axis -3.*rank 2",
    ),
    (
        "axis not an integer",
        lambda **o: sx.scatter_elements(D, I2, U, axis=1.0, **o),
        TypeError,
        r"axis.*float",
    ),
    (
        "unknown reduction",
        lambda **o: sx.scatter_elements(D, I2, U, reduction="sum", **o),
        ValueError,
        r"'sum'",
    ),
    (
        "reduction not a string",
        lambda **o: sx.scatter_elements(D, I2, U, reduction=None, **o),
        TypeError,
        r"reduction",
    ),
    ("float indices", lambda **o: sx.scatter_elements(D, I2.astype(float), U, **o), TypeError, r"float64"),
    ("bool indices", lambda **o: sx.scatter_elements(D, I2.astype(bool), U, **o), TypeError, r"bool"),
    ("object indices", lambda **o: sx.scatter_elements(D, I2.astype(object), U, **o), TypeError, r"object"),
    (
        "updates dtype",
        lambda **o: sx.scatter_elements(D, I2, U.astype(np.float32), **o),
        TypeError,
        r"float64.*float32",
    ),
    (
        "updates not convertible",
        lambda **o: sx.scatter_elements(D, I2, [["a"] * 3] * 2, **o),
        TypeError,
        r"float64",
    ),
    (
        "complex max",
        lambda **o: sx.scatter_elements(D.astype(complex), I2, U.astype(complex), reduction="max", **o),
        TypeError,
        r"'max'.*complex128",
    ),
    (
        "gather indices rank",
        lambda **o: sx.gather_elements(D, np.zeros((1, 1, 1), int), **o),
        ValueError,
        r"\(2, 3\).*\(1, 1, 1\)",
    ),
    ("gather axis", lambda **o: sx.gather_elements(D, I2, axis=5, **o), ValueError, r"axis 5"),
    (
        "gather float indices",
        lambda **o: sx.gather_elements(D, I2.astype(np.float32), **o),
        TypeError,
        r"float32",
    ),
]


@pytest.mark.parametrize(
    ("call", "exception", "message"), [c[1:] for c in SHAPE_ERRORS], ids=[c[0] for c in SHAPE_ERRORS]
)
def test_shape_and_dtype_errors_write_nothing(call, exception, message):
    out = np.full((2, 3), 5.0)
    with pytest.raises(exception, match=message):
        call(out=out)
    assert_identical(out, np.full((2, 3), 5.0))
    with pytest.raises(exception, match=message):
        call()
    assert_identical(D, np.zeros((2, 3)))


def test_errors_with_out_equal_to_data_write_nothing():
    data = np.arange(6.0).reshape(2, 3)
    before = data.copy()
    calls = [
        (lambda: sx.scatter_elements(data, I2, U.astype(np.float32), out=data), TypeError),
        (lambda: sx.scatter_elements(data, I2, np.ones((2, 2)), out=data), ValueError),
        (lambda: sx.scatter_elements(data, I2, U, reduction="avg", out=data), ValueError),
        (lambda: sx.scatter_elements(data, I2 + 2, U, out=data), IndexError),
    ]
    for call, exception in calls:
        with pytest.raises(exception):
            call()
        assert_identical(data, before)


@pytest.mark.parametrize("kind", ["object-str", "U", "S", "StringDType"])
def test_string_mul_is_a_type_error(kind):
    data = random_values(kind, (2,), np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"'mul'.*" + re.escape(str(data.dtype))):
        sx.scatter_elements(data, [0], data[:1], reduction="mul")


def test_object_elements_that_do_not_combine():
    """str + bytes, or elements that are not strings, cannot be reduced."""
    data = np.array(["a", "b"], object)
    out = np.array(["x", "y"], object)
    with pytest.raises(TypeError, match="str.*bytes|bytes.*str"):
        sx.scatter_elements(data, [1, 0], np.array(["c", b"d"], object), reduction="add", out=out)
    assert out.tolist() == ["x", "y"]
    assert data.tolist() == ["a", "b"]
    numbers = np.array([1, 2], object)
    with pytest.raises(TypeError, match="int"):
        sx.scatter_elements(numbers, [0], np.array([3], object), reduction="max")


@pytest.mark.parametrize(
    "data",
    [
        np.zeros(2, "datetime64[s]"),
        np.zeros(2, "timedelta64[s]"),
        np.zeros(2, [("a", "i4")]),
        np.zeros(2, "V4"),
    ],
    ids=["datetime64", "timedelta64", "structured", "void"],
)
def test_unsupported_data_dtypes(data):
    with pytest.raises(TypeError, match=re.escape(str(data.dtype))):
        sx.scatter_elements(data, [0], data[:1])
    with pytest.raises(TypeError, match=re.escape(str(data.dtype))):
        sx.gather_elements(data, [0])


def test_rank_zero_is_a_value_error():
    with pytest.raises(ValueError, match="rank"):
        sx.scatter_elements(np.float64(1.0), np.int64(0), np.float64(2.0))
    with pytest.raises(ValueError, match="rank"):
        sx.gather_elements(np.array(1.0), np.array(0))


# (name, out, exception, message) for a result of shape (2, 3) and dtype float64.
BAD_OUT = [
    ("dtype", np.zeros((2, 3), np.float32), TypeError, r"float32.*float64"),
    ("shape", np.zeros((3, 2)), ValueError, r"\(3, 2\).*\(2, 3\)"),
    ("read-only", np.zeros((2, 3)), ValueError, r"read-only"),
    ("not an array", [[0.0] * 3] * 2, TypeError, r"list"),
]


@pytest.mark.parametrize(
    ("out", "exception", "message"), [c[1:] for c in BAD_OUT], ids=[c[0] for c in BAD_OUT]
)
def test_bad_out(out, exception, message):
    if isinstance(out, np.ndarray) and message == "read-only":
        out.flags.writeable = False
    before = np.array(out, copy=True)
    with pytest.raises(exception, match=message):
        sx.scatter_elements(D, I2, U, out=out)
    with pytest.raises(exception, match=message):
        sx.gather_elements(D, I2, out=out)
    assert_identical(np.array(out), before)


def test_many_dimensions_do_not_crash():
    """numpy allows 64 dimensions; the kernels take them all."""
    shape = (1,) * 60 + (3,)
    data = np.arange(3.0).reshape(shape)
    indices = np.array([2, 2, -3]).reshape(shape)
    result = sx.scatter_elements(data, indices, np.ones(shape), axis=-1, reduction="add")
    assert_identical(result.ravel(), np.array([1.0, 1.0, 4.0]))
    assert_identical(sx.gather_elements(data, indices, axis=60).ravel(), np.array([2.0, 2.0, 0.0]))


def test_dtype_names_in_messages_use_numpy_names():
    bf16 = dtype_of("bfloat16")
    with pytest.raises(TypeError, match="bfloat16.*float16|float16.*bfloat16"):
        sx.scatter_elements(np.zeros(2, bf16), [0], np.zeros(1, np.float16))
