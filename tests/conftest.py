"""Shared test data: the one list of element types, value generators, layouts and comparisons.

Test modules import these names (``from conftest import TYPES, ...``); pytest puts this folder
on ``sys.path``. Every file that runs a case over the element types iterates ``TYPES``.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import scatterx as sx

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# The one type list: name -> dtype. Object arrays appear twice (str and bytes elements).
_DTYPES = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": BFLOAT16,
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
    "object-str": np.dtype(object),
    "object-bytes": np.dtype(object),
    "U": np.dtype("U3"),
    "S": np.dtype("S3"),
    "StringDType": np.dtypes.StringDType(),
}
TYPES = tuple(_DTYPES)
REDUCTIONS = ("none", "add", "mul", "max", "min")
INDEX_DTYPES = tuple(
    np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
)

# The SPEC section 3 table, written out: the pairs that are a TypeError.
_UNDEFINED = {("complex", "max"), ("complex", "min"), ("string", "mul")}


def dtype_of(kind: str) -> np.dtype:
    return _DTYPES[kind]


def category(kind: str) -> str:
    if kind == "bool":
        return "bool"
    if kind.startswith(("int", "uint")):
        return "int"
    if kind.startswith(("float", "bfloat")):
        return "float"
    if kind.startswith("complex"):
        return "complex"
    return "string"


def is_defined(kind: str, reduction: str) -> bool:
    return (category(kind), reduction) not in _UNDEFINED


_STR_ALPHABET = ["", "a", "b", "ab", "ba", "é", "Z", "aé", "zz"]
_BYTES_ALPHABET = [b"", b"a", b"b", b"ab", b"\xff", b"Z", b"a\xff", b"zz"]


def _float_pool(dtype: np.dtype, nan: bool) -> np.ndarray:
    finfo = ml_dtypes.finfo(dtype) if dtype == BFLOAT16 else np.finfo(dtype)
    pool = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1.5,
        3.0,
        -2.5,
        math.inf,
        -math.inf,
        float(finfo.max),
        -float(finfo.max),
        float(finfo.tiny),
        float(finfo.smallest_subnormal),
    ]
    if nan:
        pool.append(math.nan)
    return np.array(pool, dtype=np.float64)


def random_values(kind: str, shape, rng: np.random.Generator, *, nan: bool = True) -> np.ndarray:
    """Values of `kind` in C order, rich in ties, signed zeros, infinities, NaN and extremes."""
    dtype = dtype_of(kind)
    n = int(np.prod(shape, dtype=np.int64))
    cat = category(kind)
    if kind == "bool":
        flat = rng.integers(0, 2, n).astype(bool)
    elif cat == "int":
        info = np.iinfo(dtype)
        corners = np.array([info.min, info.min + 1, info.max - 1, info.max, 0, 1, 2, 3], dtype=dtype)
        if info.min < 0:
            corners[-1] = -1
        small = rng.integers(max(info.min, -4), 5, n).astype(dtype)
        full = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        choice = rng.integers(0, 3, n)
        flat = np.where(choice == 0, rng.choice(corners, n), np.where(choice == 1, small, full))
    elif cat in ("float", "complex"):
        part = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
        base = dtype if cat == "float" else part

        def reals():
            pool = _float_pool(base, nan)
            pick = rng.choice(pool, n)
            normal = np.round(rng.normal(0, 4, n), 1)
            return np.where(rng.random(n) < 0.4, pick, normal)

        if cat == "float":
            flat = reals()
        else:
            # Built by parts: 1j * inf would be nan + inf j.
            flat = np.empty(n, np.complex128)
            flat.real, flat.imag = reals(), reals()
        with np.errstate(over="ignore"):
            flat = flat.astype(dtype)
    elif kind == "object-bytes":
        flat = np.empty(n, object)
        flat[:] = [_BYTES_ALPHABET[i] for i in rng.integers(0, len(_BYTES_ALPHABET), n)]
    elif kind == "S":
        flat = np.array([_BYTES_ALPHABET[i] for i in rng.integers(0, len(_BYTES_ALPHABET), n)], dtype=dtype)
    else:
        words = [_STR_ALPHABET[i] for i in rng.integers(0, len(_STR_ALPHABET), n)]
        flat = np.empty(n, object) if kind == "object-str" else np.empty(n, dtype)
        flat[:] = words
    return np.asarray(flat, dtype=dtype).reshape(shape)


def random_indices(index_shape, size: int, index_dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Valid indices in [-size, size-1] (unsigned types: [0, size-1]); duplicates are likely."""
    if size == 0:
        assert int(np.prod(index_shape)) == 0
        return np.zeros(index_shape, index_dtype)
    low = 0 if index_dtype.kind == "u" else -size
    return rng.integers(low, size, index_shape).astype(index_dtype)


LAYOUTS = ("C", "F", "negative", "strided", "broadcast", "readonly")


def with_layout(arr: np.ndarray, layout: str) -> np.ndarray:
    """`arr` in another memory layout. "broadcast" repeats the first row (values change)."""
    if layout == "C":
        return np.ascontiguousarray(arr)
    if layout == "F":
        return np.asfortranarray(arr)
    if layout == "negative":
        everything_reversed = (slice(None, None, -1),) * arr.ndim
        return arr[everything_reversed].copy()[everything_reversed]
    if layout == "strided":
        big = np.empty(tuple(2 * n + 1 for n in arr.shape), arr.dtype)
        view = big[(slice(1, None, 2),) * arr.ndim]
        view[...] = arr
        return view
    if layout == "broadcast":
        if arr.ndim == 0 or arr.shape[0] == 0:
            return arr
        return np.broadcast_to(arr[:1], arr.shape)
    if layout == "readonly":
        copy = arr.copy()
        copy.flags.writeable = False
        return copy
    raise ValueError(layout)


def _float_parts(arr: np.ndarray) -> np.ndarray:
    """Floating-point components: complex -> (..., 2) of the real type."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.kind == "c":
        return arr.view(np.dtype(f"f{arr.dtype.itemsize // 2}")).reshape(arr.shape + (2,))
    return arr


def assert_identical(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype, shape and elements; floats compared bit by bit, NaNs by position only."""
    assert isinstance(actual, np.ndarray), type(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    kind = expected.dtype.kind
    if kind in "fc" or expected.dtype == BFLOAT16:
        a, e = _float_parts(actual), _float_parts(expected)
        a_nan = np.isnan(a.astype(np.float64))
        e_nan = np.isnan(e.astype(np.float64))
        np.testing.assert_array_equal(a_nan, e_nan, err_msg="NaN positions differ")
        bits = np.dtype(f"u{a.dtype.itemsize}")
        a_bits, e_bits = a.view(bits)[~a_nan], e.view(bits)[~e_nan]
        if not np.array_equal(a_bits, e_bits):
            raise AssertionError(f"bits differ:\nactual\n{actual!r}\nexpected\n{expected!r}")
    elif kind == "O":
        a, e = actual.ravel().tolist(), expected.ravel().tolist()
        assert [type(x) for x in a] == [type(x) for x in e], (actual, expected)
        assert a == e, (actual, expected)
    else:
        assert actual.tolist() == expected.tolist(), (actual, expected)


@pytest.fixture
def restore_threads():
    """Restores the number of native threads after a test that changes it."""
    before = sx.get_num_threads()
    yield before
    sx.set_num_threads(before)


def one_node_model(op: str, data: np.ndarray, indices: np.ndarray, updates=None, **attributes):
    """A model with one ScatterElements (opset 18) or GatherElements (opset 13) node."""
    from onnx import TensorProto, helper

    opset = 18 if op == "ScatterElements" else 13
    if data.dtype.kind in "OUST":
        elem = TensorProto.STRING
    else:
        elem = helper.np_dtype_to_tensor_dtype(data.dtype)
    index_elem = helper.np_dtype_to_tensor_dtype(indices.dtype)
    names = ["data", "indices"] + ([] if updates is None else ["updates"])
    types = [elem, index_elem, elem]
    shapes = [data.shape, indices.shape, indices.shape]
    inputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in zip(names, types, shapes)]
    output = helper.make_tensor_value_info("y", elem, None)
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph([node], "one_node", inputs, [output])
    # IR 10 is what both onnxruntime 1.18+ and the reference evaluator read.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def geometries(
    *,
    max_rank: int = 3,
    max_dim: int = 4,
    max_axis_len: int = 6,
    allow_empty: bool = True,
    same_off_axis: bool = False,
    unique: bool = False,
):
    """Hypothesis strategy of (data_shape, axis, index_shape); axis may be negative.

    same_off_axis: indices match data on every other dimension (what onnx.reference's gather
    needs); unique: indices are no longer than data along the axis (room for distinct targets).
    """
    from hypothesis import strategies as st

    low = 0 if allow_empty else 1

    @st.composite
    def draw(draw):
        rank = draw(st.integers(1, max_rank))
        data_shape = tuple(draw(st.lists(st.integers(low, max_dim), min_size=rank, max_size=rank)))
        axis = draw(st.integers(-rank, rank - 1))
        a = axis % rank
        index_shape = []
        for d in range(rank):
            if d == a:
                top = data_shape[d] if unique else (max_axis_len if data_shape[d] else 0)
                n = draw(st.integers(low if top else 0, top))
            elif same_off_axis:
                n = data_shape[d]
            else:
                n = draw(st.integers(low if data_shape[d] else 0, data_shape[d]))
            index_shape.append(n)
        if data_shape[a] == 0:
            index_shape[a] = 0
        return data_shape, axis, tuple(index_shape)

    return draw()


def unique_indices(index_shape, size: int, axis: int, index_dtype: np.dtype, rng: np.random.Generator):
    """Indices whose targets are distinct: along every fiber a part of a permutation."""
    axis %= len(index_shape)
    moved = list(index_shape)
    n = moved.pop(axis)
    fibers = int(np.prod(moved, dtype=np.int64))
    rows = [rng.permutation(size)[:n] for _ in range(fibers)]
    idx = np.array(rows, dtype=np.int64).reshape(tuple(moved) + (n,))
    if index_dtype.kind == "i":
        idx = np.where(rng.random(idx.shape) < 0.5, idx - size, idx)
    return np.moveaxis(idx, -1, axis).astype(index_dtype)


@pytest.fixture(params=["wide", "narrow"])
def streaming_outputs(request):
    """Kernels write their outputs by streaming stores as for any size (normally only calls
    whose arrays together exceed the last-level cache do: stream_bytes in kernels.h), whole
    lines by 64-byte stores ("wide", where the CPU has AVX-512) or by 16-byte ones; a test
    that parametrizes it indirectly may also ask for "off" (the thresholds as they are). Yields
    whether the outputs are streamed whatever their size."""
    from scatterx import _core

    if request.param == "off":
        yield False
        return
    wide = request.param == "wide"
    if wide and not _core.wide_stores_supported():
        pytest.skip("the CPU has no AVX-512F: streaming stores are 16 bytes wide")
    before = _core.set_stream_bytes(0)
    before_wide = _core.set_wide_stores(wide)
    yield True
    _core.set_stream_bytes(before)
    _core.set_wide_stores(before_wide)
