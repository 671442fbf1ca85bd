"""Fuzzing every public entry point with random dtypes, shapes, layouts, axes and index values.

Each case is built from one ``random.Random`` by :func:`make_case` (hypothesis drives that
generator here, so failures shrink; ``scripts/fuzz_long.py`` drives it with plain seeds for the
million-call run) and checked by :func:`check_case`:

* a valid call returns exactly what the reference computes (the literal oracle of
  ``tests/oracle.py`` on small arrays, a vectorised ``ufunc.at`` reference on larger ones, which
  also reach the multi-threaded kernels);
* a call with one fault injected raises the one exception class the spec names for that fault,
  and writes nothing to ``out``;
* a call with garbage arguments returns or raises TypeError / ValueError / IndexError;
* the input arrays are never modified (unless ``out`` is ``data``).

Profiles: ``SCATTERX_FUZZ_PROFILE`` = ``ci`` (default, short), ``long`` or ``sanitize`` (no
deadline, for the instrumented build); ``SCATTERX_FUZZ_EXAMPLES=N`` sets the examples per test.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scatterx as sx

import oracle

ALLOWED = (TypeError, ValueError, IndexError)

_EXAMPLES = os.environ.get("SCATTERX_FUZZ_EXAMPLES")
_COMMON = {"deadline": None, "suppress_health_check": list(HealthCheck), "derandomize": False}
settings.register_profile("scatterx-ci", max_examples=int(_EXAMPLES or 150), **_COMMON)
settings.register_profile("scatterx-long", max_examples=int(_EXAMPLES or 200_000), **_COMMON)
settings.register_profile("scatterx-sanitize", max_examples=int(_EXAMPLES or 300), **_COMMON)
# Applied per test, so the global hypothesis profile of other test files stays as it is.
FUZZ = settings(settings.get_profile("scatterx-" + os.environ.get("SCATTERX_FUZZ_PROFILE", "ci")))

BF16 = np.dtype(ml_dtypes.bfloat16)
INT_DTYPES = [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")]
NUMERIC_DTYPES = (
    [np.dtype(bool)]
    + INT_DTYPES
    + [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
    + [np.dtype(np.complex64), np.dtype(np.complex128)]
)
STRING_KINDS = ("object-str", "object-bytes", "U", "S", "T")
REDUCTIONS = ("none", "add", "mul", "max", "min")
UNSUPPORTED_DTYPES = ("M8[s]", "m8[ns]", "V4", "i4,i4", np.longdouble, np.clongdouble)

# Index values that break one bound or another: int32/int64/uint64 limits and their neighbours.
EXTREME_INDEX_VALUES = (
    2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**32 + 1, -(2**32),
    2**63 - 1, -(2**63), -(2**63) + 1, 2**63, 2**63 + 1, 2**64 - 1,
    127, 128, -129, 255, 256, 32767, 32768, 65535, 65536,
)


# ----------------------------------------------------------------------------- value generation


def category(dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f" or dtype == BF16:
        return "float"
    if dtype.kind == "c":
        return "complex"
    return "string"


def _floats(g: np.random.Generator, n: int) -> np.ndarray:
    x = g.standard_normal(n) * g.choice([1.0, 4.0, 1e3, 1e-3], size=n)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 65504.0, 3.4e38, 1e-40, 5e-8])
    pick = g.random(n) < 0.15
    x[pick] = g.choice(special, size=int(pick.sum()))
    return x


def _strings(g: np.random.Generator, n: int, as_bytes: bool) -> list:
    alphabet = "ab\u00e9z" if not as_bytes else "abyz"
    words = ["".join(g.choice(list(alphabet), size=int(g.integers(0, 4)))) for _ in range(n)]
    return [w.encode() for w in words] if as_bytes else words


def make_values(g: np.random.Generator, kind, shape: tuple) -> np.ndarray:
    """C-contiguous values of `kind` (a numeric dtype or one of STRING_KINDS) and `shape`."""
    n = math.prod(shape)
    if isinstance(kind, str):
        vals = _strings(g, n, kind in ("object-bytes", "S"))
        dtype = {"object-str": object, "object-bytes": object, "U": "U3", "S": "S3",
                 "T": np.dtypes.StringDType()}[kind]
        arr = np.empty(n, dtype=dtype)
        arr[:] = vals
        return arr.reshape(shape)
    dtype = kind
    cat = category(dtype)
    if cat == "bool":
        return (g.random(shape) < 0.5).astype(bool)
    if cat == "int":
        info = np.iinfo(dtype)
        small = g.integers(-3, 4, size=n)
        big = g.integers(info.min, info.max, endpoint=True, size=n, dtype=dtype)
        picks = g.random(n)
        out = np.where(picks < 0.6, small, 0).astype(dtype)
        out[picks >= 0.6] = big[picks >= 0.6]
        out[picks > 0.95] = g.choice(np.array([info.min, info.max], dtype), size=int((picks > 0.95).sum()))
        return out.reshape(shape)
    if cat == "float":
        with np.errstate(over="ignore"):
            return _floats(g, n).astype(dtype).reshape(shape)
    with np.errstate(all="ignore"):
        return (_floats(g, n) + 1j * _floats(g, n)).astype(dtype).reshape(shape)


def make_indices(g: np.random.Generator, dtype: np.dtype, shape: tuple, size: int) -> np.ndarray:
    """Valid index values in [-size, size) that `dtype` can hold, biased to the ends."""
    info = np.iinfo(dtype)
    lo, hi = max(-size, int(info.min)), min(size - 1, int(info.max))
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape, dtype)
    vals = g.integers(lo, hi, endpoint=True, size=n)
    ends = g.random(n)
    vals[ends < 0.1] = lo
    vals[ends > 0.9] = hi
    return vals.astype(dtype).reshape(shape)


def relayout(rng: random.Random, arr: np.ndarray, *, writeable_only: bool = False) -> np.ndarray:
    """The values of `arr` in another memory layout: Fortran order, a strided view with
    negative steps, read-only, unaligned, or byte-swapped."""
    modes = ["c", "f", "strided", "strided"]
    if not writeable_only:
        modes.append("readonly")
    if arr.dtype.kind not in "OT" and arr.dtype.itemsize > 1:
        modes.append("unaligned")
        if arr.dtype.kind in "iufc" and not writeable_only:
            modes.append("swapped")
    mode = rng.choice(modes)
    if mode == "c":
        return arr.copy()
    if mode == "f":
        return np.asfortranarray(arr)
    if mode == "readonly":
        out = arr.copy()
        out.flags.writeable = False
        return out
    if mode == "swapped":
        return arr.astype(arr.dtype.newbyteorder())
    if mode == "unaligned":
        buf = np.zeros(arr.nbytes + 1, np.uint8)
        out = buf[1:].view(arr.dtype).reshape(arr.shape)
        out[...] = arr
        return out
    steps = [rng.choice([1, 2, -1, -2, 3] if arr.ndim <= 6 else [1, -1]) for _ in range(arr.ndim)]
    base = np.empty([n * abs(s) for n, s in zip(arr.shape, steps)], arr.dtype)
    if base.dtype.kind not in "OT":
        base.view(np.uint8).reshape(-1)[:] = 0xA5  # junk between the elements of the view
    view = base[tuple(slice(None, None, s) for s in steps)]
    view[...] = arr
    return view


def make_array(rng: random.Random, g: np.random.Generator, kind, shape: tuple, **kw) -> np.ndarray:
    """Random values of `kind` and `shape` in a random layout, zero-stride broadcasts included."""
    if shape and rng.random() < 0.12 and not kw.get("writeable_only"):
        src = tuple(1 if rng.random() < 0.5 else n for n in shape)
        return np.broadcast_to(make_values(g, kind, src), shape)
    return relayout(rng, make_values(g, kind, shape), **kw)


def draw_shape(rng: random.Random) -> tuple:
    roll = rng.random()
    if roll < 0.01:  # NumPy's maximum rank, mostly unit dimensions: the coalescing corner
        r = rng.choice([32, 64])
        shape = [1] * r
        for _ in range(3):
            shape[rng.randrange(r)] = rng.randint(0, 3)
        return tuple(shape)
    if roll < 0.025:  # large enough for the multi-threaded kernels
        return tuple(rng.choice([(40_000,), (300, 300), (8, 128, 70), (70, 2, 600)]))
    r = rng.choice([1, 1, 2, 2, 2, 3, 3, 4])
    return tuple(rng.choice([0, 1, 1, 2, 3, 4, 5]) if rng.random() < 0.9 else rng.randint(6, 12) for _ in range(r))


def draw_kind(rng: random.Random):
    return rng.choice(NUMERIC_DTYPES) if rng.random() < 0.85 else rng.choice(STRING_KINDS)


def draw_index_dtype(rng: random.Random) -> np.dtype:
    return rng.choice(INT_DTYPES + [np.dtype(np.int64), np.dtype(np.int32), np.dtype(">i8"), np.dtype(">u4")])


def draw_indices_shape(rng: random.Random, data_shape: tuple, axis: int) -> tuple:
    shape = [rng.randint(0, n) if rng.random() < 0.4 else n for n in data_shape]
    shape[axis] = rng.choice([0, 1, 2, 3, 5, 8]) if math.prod(data_shape) < 5000 else data_shape[axis]
    if data_shape[axis] == 0:  # nothing can be indexed: the only valid indices are empty
        shape[axis] = 0
    return tuple(shape)


# ------------------------------------------------------------------------------- the references


def _native(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("=") if arr.dtype.kind != "T" else arr.dtype)


def _flat_targets(indices: np.ndarray, data_shape: tuple, axis: int) -> np.ndarray:
    """C-order flat positions in data targeted by indices, in row-major order of indices."""
    idx = np.asarray(indices).astype(np.int64)
    size, ndim = data_shape[axis], idx.ndim
    pos = np.zeros(idx.shape, np.int64)
    for d in range(ndim):
        stride = math.prod(data_shape[d + 1 :])  # elements, C order
        coord = np.where(idx < 0, idx + size, idx) if d == axis else np.arange(idx.shape[d]).reshape(
            [-1 if e == d else 1 for e in range(ndim)]
        )
        pos = pos + coord * stride
    return pos.reshape(-1)


def reference_scatter(data, indices, updates, axis, reduction) -> np.ndarray:
    data, indices, updates = _native(np.asarray(data)), np.asarray(indices), _native(np.asarray(updates))
    if data.size + indices.size <= 48 or category(data.dtype) == "string":
        return oracle.scatter_elements(data, indices, updates, axis, reduction)
    out = data.copy()
    flat, vals = out.reshape(-1), updates.reshape(-1)
    targets = _flat_targets(indices, data.shape, axis)
    if reduction == "none":
        # The last writer wins: the first occurrence in the reversed order.
        uniq, first = np.unique(targets[::-1], return_index=True)
        flat[uniq] = vals[::-1][first]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
        with np.errstate(all="ignore"):
            ufunc.at(flat, targets, vals)  # unbuffered: one update at a time, in order
    return out


def reference_gather(data, indices, axis) -> np.ndarray:
    data, indices = _native(np.asarray(data)), np.asarray(indices)
    if data.size + indices.size <= 48:
        return oracle.gather_elements(data, indices, axis)
    return data.reshape(-1)[_flat_targets(indices, data.shape, axis)].reshape(indices.shape)


def _bits_equal_or_both_nan(a: np.ndarray, b: np.ndarray, loose_zero: bool) -> np.ndarray:
    uint = np.dtype(f"u{a.dtype.itemsize}")
    same = a.view(uint) == b.view(uint)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    same |= np.isnan(af) & np.isnan(bf)
    if loose_zero:
        same |= af == bf
    return same


def assert_same(result: np.ndarray, expected: np.ndarray, reduction: str = "none", fast_ref: bool = False) -> None:
    """Bitwise equality (NaN payloads aside). np.maximum/np.minimum return the update on a tie
    where scatterx keeps the current value, so against the ufunc.at reference +0 equals -0."""
    assert isinstance(result, np.ndarray)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    if category(expected.dtype) == "string":
        assert result.dtype.kind == expected.dtype.kind, (result.dtype, expected.dtype)
        if expected.dtype.kind in "US":
            assert result.dtype == expected.dtype, (result.dtype, expected.dtype)
        assert result.tolist() == expected.tolist()
        return
    assert result.dtype == expected.dtype, (result.dtype, expected.dtype)
    cat = category(expected.dtype)
    if cat in ("bool", "int"):
        np.testing.assert_array_equal(result, expected)
        return
    loose = fast_ref and reduction in ("max", "min")
    if cat == "complex":
        part = np.dtype(f"f{expected.dtype.itemsize // 2}")
        r, e = np.ascontiguousarray(result).view(part), np.ascontiguousarray(expected).view(part)
    else:
        r, e = np.ascontiguousarray(result), np.ascontiguousarray(expected)
    same = _bits_equal_or_both_nan(r, e, loose)
    if not same.all():
        bad = np.flatnonzero(~same.reshape(-1))[:5]
        raise AssertionError(f"differs at flat {bad.tolist()}: got {r.reshape(-1)[bad]}, expected {e.reshape(-1)[bad]}")


# ------------------------------------------------------------------------------ snapshots


def snapshot(x):
    if isinstance(x, np.ndarray):
        return ("array", x.dtype, x.shape, x.strides, x.copy())
    return ("other", repr(x)[:200])


def assert_unchanged(x, snap) -> None:
    if snap[0] == "other":
        assert repr(x)[:200] == snap[1]
        return
    _, dtype, shape, strides, copy = snap
    assert (x.dtype, x.shape, x.strides) == (dtype, shape, strides)
    if dtype.kind in "OT":
        assert x.tolist() == copy.tolist()
    else:
        assert np.ascontiguousarray(x).view(np.uint8).tobytes() == np.ascontiguousarray(copy).view(np.uint8).tobytes()


# ----------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One call: what to call, with what, and what must come out of it."""

    fn: object
    args: tuple
    kwargs: dict
    expect: object = None  # an ndarray, an exception class, or ALLOWED (garbage: any of them)
    reduction: str = "none"
    fast_ref: bool = False
    in_place: bool = False  # out is data: data may change
    out: object = None
    watch: list = field(default_factory=list)  # inputs that must stay unchanged
    threads: int | None = None
    note: str = ""
    check: object = None  # a function of the result, for results that are not one array


SCATTER_FAULTS = (
    "oob", "oob", "oob", "index_dtype", "updates_dtype", "updates_shape", "rank", "fits", "axis_range",
    "axis_type", "reduction_value", "reduction_type", "reduction_dtype", "rank0", "data_dtype",
    "out_dtype", "out_shape", "out_readonly", "out_type",
)
GATHER_FAULTS = (
    "oob", "oob", "oob", "index_dtype", "rank", "fits", "axis_range", "axis_type", "rank0", "data_dtype",
    "out_dtype", "out_shape", "out_readonly", "out_type",
)
FAULT_ERRORS = {
    "oob": IndexError, "index_dtype": TypeError, "updates_dtype": TypeError, "updates_shape": ValueError,
    "rank": ValueError, "fits": ValueError, "axis_range": ValueError, "axis_type": TypeError,
    "reduction_value": ValueError, "reduction_type": TypeError, "reduction_dtype": TypeError,
    "rank0": ValueError, "data_dtype": TypeError, "out_dtype": TypeError, "out_shape": ValueError,
    "out_readonly": ValueError, "out_type": TypeError,
}


def _inject_oob(rng: random.Random, idx: np.ndarray, size: int) -> np.ndarray:
    """A copy of `idx` with one value outside [-size, size), in a dtype that can hold it."""
    dtype = idx.dtype
    candidates = [v for v in EXTREME_INDEX_VALUES + (size, -size - 1, size + 1) if not -size <= v < size]
    value = rng.choice(candidates)
    if dtype.kind not in "iu" or not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        dtype = np.dtype(np.uint64) if value >= 2**63 else np.dtype(np.int64)
    out = np.array(idx, dtype=dtype)
    out[np.unravel_index(rng.randrange(out.size), out.shape)] = value
    return out


def _other_rank(rng: random.Random, idx: np.ndarray) -> np.ndarray:
    if idx.ndim >= 60 or (idx.ndim > 1 and rng.random() < 0.3):
        return idx.reshape(-1)
    return idx.reshape(idx.shape[: idx.ndim - 1] + (1,) * rng.randint(1, 2) + idx.shape[idx.ndim - 1 :])


def _wrong_dtype(rng: random.Random, dtype: np.dtype) -> np.dtype:
    native = dtype if dtype.kind in "OT" else dtype.newbyteorder("=")
    choices = [d for d in NUMERIC_DTYPES if d != native] + [np.dtype("U2"), np.dtypes.StringDType()]
    choices = [d for d in choices if d != native]
    if dtype.kind != "O":
        choices.append(np.dtype(object))
    if dtype.kind in "US":
        choices = [d for d in choices if d.kind != dtype.kind]
    return rng.choice(choices)


def _garbage_dtype_array(rng: random.Random, shape: tuple) -> np.ndarray:
    dtype = np.dtype(rng.choice(UNSUPPORTED_DTYPES))
    return np.zeros(shape, dtype)


def _bad_out(rng: random.Random, fault: str, shape: tuple, dtype: np.dtype):
    if fault == "out_type":
        return rng.choice([[0] * 3, 1.0, "out", object()])
    if fault == "out_dtype":
        return np.zeros(shape, _wrong_dtype(rng, dtype))
    if fault == "out_shape":
        bad = list(shape)
        bad[rng.randrange(len(bad))] += 1
        return np.zeros(bad, dtype)
    out = np.zeros(shape, dtype)
    out.flags.writeable = False
    return out


def _call_args(rng: random.Random, fn, positional: list, names: list, defaults: dict):
    """Splits arguments between positional and keyword form at random, omitting defaults."""
    cut = rng.randint(1, len(positional))
    args, kwargs = positional[:cut], {}
    for name, value in zip(names[cut:], positional[cut:]):
        if name in defaults and defaults[name] == value and isinstance(value, (int, str)) and rng.random() < 0.5:
            continue
        kwargs[name] = value
    return tuple(args), kwargs


def scatter_case(rng: random.Random, g: np.random.Generator, fault: str | None) -> Case:
    kind = draw_kind(rng)
    shape = draw_shape(rng)
    if not isinstance(kind, np.dtype) and math.prod(shape) > 200:
        shape = shape[:1] + tuple(min(n, 3) for n in shape[1:])
        shape = (min(shape[0], 20),) + shape[1:]
    r = len(shape)
    axis = rng.randrange(r)
    ishape = draw_indices_shape(rng, shape, axis)
    size = shape[axis]
    idx_dtype = draw_index_dtype(rng)
    reduction = rng.choice(REDUCTIONS)
    dtype = make_values(g, kind, (0,)).dtype
    if fault != "reduction_dtype":
        while (category(dtype) == "complex" and reduction in ("max", "min")) or (
            category(dtype) == "string" and reduction == "mul"
        ):
            reduction = rng.choice(REDUCTIONS)
    data = make_array(rng, g, kind, shape)
    indices = relayout(rng, make_indices(g, idx_dtype.newbyteorder("="), ishape, size).astype(idx_dtype))
    updates = make_array(rng, g, kind, ishape)
    if kind in ("U", "S") and rng.random() < 0.3:  # another width of the same kind
        updates = updates.astype(f"{kind}{rng.randint(1, 6)}")

    # Expected result, computed before any fault is injected.
    expect = fast = None
    if fault is None:
        fast = oracle is None or (data.size + indices.size > 48 and category(dtype) != "string")
        expect = reference_scatter(data, indices, updates, axis, reduction)

    upd_arg = updates
    if fault is None and category(dtype) != "string" and rng.random() < 0.15:
        form = rng.choice(["list", "scalar"])
        if form == "list" and updates.size:  # nested lists cannot spell a shape like (0, 2)
            upd_arg = _native(updates).tolist()
        elif form == "scalar" and updates.size:
            first = _native(updates).reshape(-1)[0]
            scalar_updates = np.full(ishape, first, dtype=_native(updates).dtype)
            expect = reference_scatter(data, indices, scalar_updates, axis, reduction)
            upd_arg = first.item() if dtype != BF16 else first

    axis_arg = axis - r if rng.random() < 0.3 else axis
    red_arg = reduction
    out = None
    in_place = False
    if fault is None and rng.random() < 0.4:
        mode = rng.choice(["fresh", "view", "data"])
        writeable = data.flags.writeable and data.dtype.isnative and data.flags.aligned and 0 not in data.strides
        if mode == "data" and writeable:
            out, in_place = data, True
        elif category(dtype) == "string":
            out = np.empty(shape, expect.dtype)
        else:
            out = relayout(rng, np.zeros(shape, expect.dtype), writeable_only=True) if mode == "view" else np.empty(shape, expect.dtype)

    if fault == "oob":
        if indices.size == 0:
            fault = None
            fast = oracle is None or category(dtype) != "string" and data.size + indices.size > 48
            expect = reference_scatter(data, indices, updates, axis, reduction)
        else:
            indices = _inject_oob(rng, indices, size)
            if rng.random() < 0.5 and category(dtype) != "string":
                out = relayout(rng, make_values(g, dtype, shape), writeable_only=True) if rng.random() < 0.5 else None
                if out is None and data.flags.writeable and data.dtype.isnative and 0 not in data.strides:
                    out = data
    elif fault == "index_dtype":
        indices = indices.astype(rng.choice([np.float64, np.float32, np.bool_, np.complex64, object]))
    elif fault == "updates_dtype":
        updates = np.zeros(ishape, _wrong_dtype(rng, dtype))
        upd_arg = updates
    elif fault == "updates_shape":
        bad = list(ishape)
        if rng.random() < 0.3 and len(bad) > 1:
            bad.pop()
        else:
            bad[rng.randrange(len(bad))] += rng.choice([1, 2])
        upd_arg = updates = make_values(g, kind, tuple(bad))
    elif fault == "rank":
        indices = _other_rank(rng, indices)
        upd_arg = updates = updates.reshape(indices.shape)
    elif fault == "fits":
        others = [d for d in range(r) if d != axis]
        if not others:
            return scatter_case(rng, g, "rank")
        d = rng.choice(others)
        bad = list(ishape)
        bad[d] = shape[d] + rng.randint(1, 3)
        indices = make_indices(g, np.dtype(np.int64), tuple(bad), max(size, 1)) if size else np.zeros(bad, np.int64)
        upd_arg = updates = make_values(g, kind, tuple(bad))
    elif fault == "axis_range":
        axis_arg = rng.choice([r, r + 1, -r - 1, -r - 5, 2**63, -(2**70)])
    elif fault == "axis_type":
        axis_arg = rng.choice([1.0, "0", None, np.float64(0), [0], 1j])
    elif fault == "reduction_value":
        red_arg = rng.choice(["sum", "", "ADD", "none ", "prod", "mean"])
    elif fault == "reduction_type":
        red_arg = rng.choice([None, 0, b"add", ["add"], 1.5])
    elif fault == "reduction_dtype":
        dtype_choice = rng.choice(["complex", "string"])
        if dtype_choice == "complex":
            data = make_array(rng, g, np.dtype(np.complex128), shape)
            updates = upd_arg = make_values(g, np.dtype(np.complex128), ishape)
            red_arg = rng.choice(["max", "min"])
        else:
            data = make_values(g, "object-str", shape)
            updates = upd_arg = make_values(g, "object-str", ishape)
            red_arg = "mul"
    elif fault == "rank0":
        data = np.asarray(make_values(g, kind, (1,)).reshape(()))
        indices, upd_arg = np.int64(0), make_values(g, kind, (1,)).reshape(())
        axis_arg = 0
    elif fault == "data_dtype":
        data = _garbage_dtype_array(rng, shape)
        upd_arg = updates = np.zeros(ishape, data.dtype)
    elif fault and fault.startswith("out_"):
        out = _bad_out(rng, fault, shape, data.dtype.newbyteorder("=") if category(dtype) != "string" else data.dtype)

    positional = [data, indices, upd_arg, axis_arg, red_arg]
    args, kwargs = _call_args(rng, sx.scatter_elements, positional,
                              ["data", "indices", "updates", "axis", "reduction"], {"axis": 0, "reduction": "none"})
    if out is not None:
        kwargs["out"] = out
    if in_place and expect.dtype != data.dtype:
        # Fixed-width strings that the concatenations outgrow do not fit in data itself.
        fault, in_place = "out_dtype", False
    watch = [x for x in (data, indices, updates) if not (in_place and x is data)]
    if isinstance(out, np.ndarray) and fault is not None and out is not data:
        watch.append(out)  # nothing is written on error
    if fault is not None:
        expect = FAULT_ERRORS[fault]
        if fault in ("out_shape", "out_readonly") and data.dtype.kind in "US":
            # The result's width is only known after the concatenations; an out of data's
            # width may be rejected for that first.
            expect = (TypeError, ValueError)
    return Case(sx.scatter_elements, args, kwargs, expect,
                reduction, bool(fast), in_place, out, watch, note=f"scatter fault={fault}")


def gather_case(rng: random.Random, g: np.random.Generator, fault: str | None) -> Case:
    kind = draw_kind(rng)
    shape = draw_shape(rng)
    if not isinstance(kind, np.dtype) and math.prod(shape) > 200:
        shape = (min(shape[0], 20),) + tuple(min(n, 3) for n in shape[1:])
    r = len(shape)
    axis = rng.randrange(r)
    ishape = draw_indices_shape(rng, shape, axis)
    size = shape[axis]
    data = make_array(rng, g, kind, shape)
    idx_dtype = draw_index_dtype(rng)
    indices = relayout(rng, make_indices(g, idx_dtype.newbyteorder("="), ishape, size).astype(idx_dtype))
    dtype = _native(data).dtype
    expect = reference_gather(data, indices, axis) if fault is None else None
    fast = oracle is None or data.size + indices.size > 48
    axis_arg = axis - r if rng.random() < 0.3 else axis
    out = None
    if fault is None and rng.random() < 0.4:
        mode = rng.choice(["fresh", "view", "data"])
        aliasable = (
            data.shape == tuple(ishape) and data.flags.writeable and data.dtype.isnative and data.flags.aligned
            and 0 not in data.strides and data.dtype.kind != "T"
        )
        if mode == "data" and aliasable:
            out = data  # the result overwrites its own input: the kernel must read a copy
        elif mode == "view" and dtype.kind not in "OT":
            out = relayout(rng, np.zeros(ishape, dtype), writeable_only=True)
        else:
            out = np.empty(ishape, dtype)
    if fault == "oob":
        if indices.size == 0:
            fault = None
            expect = reference_gather(data, indices, axis)
        else:
            indices = _inject_oob(rng, indices, size)
            if rng.random() < 0.5:
                out = np.zeros(ishape, dtype)
                if dtype.kind != "T":
                    out = relayout(rng, out, writeable_only=True)
    elif fault == "index_dtype":
        indices = indices.astype(rng.choice([np.float64, np.float16, np.bool_, object]))
    elif fault == "rank":
        indices = _other_rank(rng, indices)
    elif fault == "fits":
        others = [d for d in range(r) if d != axis]
        if not others:
            return gather_case(rng, g, "rank")
        bad = list(ishape)
        d = rng.choice(others)
        bad[d] = shape[d] + rng.randint(1, 3)
        indices = np.zeros(bad, np.int32)
    elif fault == "axis_range":
        axis_arg = rng.choice([r, r + 3, -r - 1, 2**64])
    elif fault == "axis_type":
        axis_arg = rng.choice([0.0, "1", None, b"\x00"])
    elif fault == "rank0":
        data = np.asarray(make_values(g, kind, (1,)).reshape(()))
        indices, axis_arg = np.int32(0), 0
    elif fault == "data_dtype":
        data = _garbage_dtype_array(rng, shape)
    elif fault and fault.startswith("out_"):
        out = _bad_out(rng, fault, ishape, dtype)
    positional = [data, indices, axis_arg]
    args, kwargs = _call_args(rng, sx.gather_elements, positional, ["data", "indices", "axis"], {"axis": 0})
    if out is not None:
        kwargs["out"] = out
    watch = [x for x in (data, indices) if x is not out]
    if isinstance(out, np.ndarray) and fault is not None:
        watch.append(out)
    return Case(sx.gather_elements, args, kwargs, expect if fault is None else FAULT_ERRORS[fault],
                "none", fast, out is data, out, watch, note=f"gather fault={fault}")


class _Weird:
    """An object that is not an array and not an integer."""

    def __repr__(self):
        return "<weird>"


def garbage_pool() -> list:
    _masked = np.ma.array([1, 2], mask=[0, 1])
    return [
        None, True, 1.5, -1, 2**64, -(2**64), "x", b"x", "", _Weird(), {}, {"a": 1}, set(), (), [],
        [[]], [1, [2]], [[1], [2, 3]], [1, "a"], [2**64], [-1, 2**63], [[2**63, 1]], [1.5, 2.5],
        np.array(_Weird()), np.array([None, None]), np.array([[1, 2]], dtype=object),
        np.array([1, 2], "M8[s]"), np.array([1], "m8[s]"), np.zeros(2, "i4,i4"), np.zeros(3, np.longdouble),
        np.array([1 + 2j]), _masked, range(3), memoryview(b"abc"),
        1j, float("nan"), float("inf"), Ellipsis, slice(1), len, int, bytearray(b"ab"),
        np.int64(2**62), np.uint64(2**64 - 1), np.array([2**64 - 1], np.uint64), np.array([[-(2**63)]]),
        np.zeros((2, 0)), np.zeros((0,), np.int8), np.ones((2, 2), bool), np.arange(6).reshape(2, 3),
        np.array(["a", "b"]), np.array([b"a"]), np.zeros(3, np.float16), np.array(["a"], np.dtypes.StringDType()),
    ]


def garbage_case(rng: random.Random, g: np.random.Generator) -> Case:
    pool = garbage_pool()
    which = rng.choice(["scatter", "scatter", "gather", "gather", "threads", "vjp"])
    if which == "vjp":
        base = vjp_case(rng, g, None)
        args = list(base.args)
        for i in rng.sample(range(len(args)), rng.randint(1, 2)):
            args[i] = rng.choice(pool)
        return Case(base.fn, tuple(args), {}, ALLOWED, watch=list(args), note="garbage vjp")
    if which == "threads":
        value = rng.choice(pool + [0, -5, 2**31, 2**63, 1, 3, np.int8(2), "2", 2.0])
        return Case(sx.set_num_threads, (value,), {}, ALLOWED, watch=[value], note="garbage set_num_threads")
    base = scatter_case(rng, g, None) if which == "scatter" else gather_case(rng, g, None)
    names = ["data", "indices", "updates", "axis", "reduction"] if which == "scatter" else ["data", "indices", "axis"]
    values = dict(zip(names, base.args))
    values.update(base.kwargs)
    values.pop("out", None)
    for name in rng.sample(names, rng.randint(1, 2)):
        values[name] = rng.choice(pool)
    if rng.random() < 0.1:
        values["out"] = rng.choice(pool)
    # A garbage out may still be a valid one (and may be data itself): it can be written.
    out = values.get("out")
    watch = [v for k, v in values.items() if k != "out" and v is not out]
    return Case(base.fn, (), values, ALLOWED, watch=watch, note=f"garbage {which}")


# --------------------------------------------------------------------------------- gradients

DIFF_DTYPES = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64),
               np.dtype(np.complex64), np.dtype(np.complex128)]
# Few distinct values, exact in every differentiable dtype: ties for max/min, duplicates, zeros.
_GRAD_VALUES = np.array([-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0])
_TOLERANCE = {"float16": 2e-2, "bfloat16": 2e-2, "float32": 1e-5, "complex64": 1e-5}


def _grad_values(g: np.random.Generator, dtype: np.dtype, shape: tuple) -> np.ndarray:
    x = g.choice(_GRAD_VALUES, size=shape)
    if dtype.kind == "c":
        x = x + 1j * g.choice(_GRAD_VALUES, size=shape)
    return x.astype(dtype)


def reference_gather_vjp(grad, data_shape, indices, axis):
    G = np.asarray(grad).astype(np.complex128 if grad.dtype.kind == "c" else np.float64)
    dD = np.zeros(data_shape, G.dtype)
    np.add.at(dD.reshape(-1), _flat_targets(indices, data_shape, axis), G.reshape(-1))
    return dD


def _assert_close(actual: np.ndarray, expected: np.ndarray, dtype: np.dtype) -> None:
    assert isinstance(actual, np.ndarray) and actual.dtype == dtype and actual.shape == expected.shape
    wide = np.complex128 if dtype.kind == "c" else np.float64
    tol = _TOLERANCE.get(dtype.name, 1e-12)
    np.testing.assert_allclose(actual.astype(wide), expected, rtol=tol, atol=tol)


VJP_FAULTS = ("oob", "grad_shape", "grad_dtype", "not_differentiable", "axis_range", "reduction_value")
VJP_FAULT_ERRORS = {"oob": IndexError, "grad_shape": ValueError, "grad_dtype": TypeError,
                    "not_differentiable": TypeError, "axis_range": ValueError, "reduction_value": ValueError}


def vjp_case(rng: random.Random, g: np.random.Generator, fault: str | None) -> Case:
    dtype = rng.choice(DIFF_DTYPES)
    shape = tuple(rng.randint(0, 4) for _ in range(rng.randint(1, 3)))
    r = len(shape)
    axis = rng.randrange(r)
    ishape = draw_indices_shape(rng, shape, axis)
    indices = relayout(rng, make_indices(g, np.dtype(np.int64), ishape, shape[axis]))
    which = rng.choice(["scatter", "gather"])
    reduction = rng.choice(REDUCTIONS if dtype.kind != "c" else REDUCTIONS[:3])
    data = relayout(rng, _grad_values(g, dtype, shape))
    updates = relayout(rng, _grad_values(g, dtype, ishape))
    grad = relayout(rng, _grad_values(g, dtype, shape if which == "scatter" else ishape))
    axis_arg = axis - r if rng.random() < 0.3 else axis
    red_arg = reduction
    if fault == "oob" and indices.size == 0:
        fault = None
    if fault is None:
        if which == "scatter":
            expect = oracle.scatter_elements_vjp(grad, data, indices, updates, axis, reduction)
        else:
            expect = reference_gather_vjp(grad, shape, indices, axis)
    elif fault == "oob":
        indices = _inject_oob(rng, indices, shape[axis])
    elif fault == "grad_shape":
        grad = np.zeros(grad.shape + (1,), dtype)
    elif fault == "grad_dtype":
        grad = np.zeros(grad.shape, rng.choice([np.int32, np.bool_, object]))
    elif fault == "not_differentiable":
        kind = rng.choice([np.dtype(np.int64), np.dtype(np.bool_), "object-str", np.dtype(np.uint8)])
        data = make_values(g, kind, shape)
        updates = make_values(g, kind, ishape)
        if which == "gather":
            grad = make_values(g, kind, ishape)
    elif fault == "axis_range":
        axis_arg = rng.choice([r, -r - 1, 99])
    elif fault == "reduction_value":
        red_arg, which = "sum", "scatter"
    if which == "scatter":
        args = (grad, data, indices, updates, axis_arg, red_arg)
        fn = sx.scatter_elements_vjp
    else:
        args = (grad, shape, indices, axis_arg)
        fn = sx.gather_elements_vjp
    watch = [x for x in args if isinstance(x, np.ndarray)]
    if fault is not None:
        return Case(fn, args, {}, VJP_FAULT_ERRORS[fault], watch=watch, note=f"{which}_vjp fault={fault}")
    case = Case(fn, args, {}, None, watch=watch, note=f"{which}_vjp fault=None")
    case.check = lambda result: _check_vjp(result, expect, dtype, which)
    return case


def _check_vjp(result, expect, dtype, which) -> None:
    if which == "scatter":
        assert isinstance(result, tuple) and len(result) == 2
        _assert_close(result[0], expect[0], dtype)
        _assert_close(result[1], expect[1], dtype)
    else:
        _assert_close(result, expect, dtype)


def make_case(rng: random.Random) -> Case:
    """One random call of a public entry point, with what it must produce."""
    g = np.random.default_rng(rng.getrandbits(64))
    roll = rng.random()
    if roll < 0.1:
        case = garbage_case(rng, g)
    elif roll < 0.18:
        case = vjp_case(rng, g, rng.choice(VJP_FAULTS) if rng.random() < 0.3 else None)
    elif roll < 0.55:
        case = scatter_case(rng, g, rng.choice(SCATTER_FAULTS) if rng.random() < 0.4 else None)
    else:
        case = gather_case(rng, g, rng.choice(GATHER_FAULTS) if rng.random() < 0.4 else None)
    if rng.random() < 0.1:
        case.threads = rng.choice([1, 2, 3, 4, 8])
    return case


def check_case(case: Case, repeats: int = 1) -> tuple:
    """Runs `case` and checks it; returns the number of public calls made (set_num_threads
    included) and how many of those were set_num_threads calls.

    With `repeats` > 1 the same call runs again under other thread counts (except in place,
    where the first call changed data): the result may not depend on them.
    """
    calls = thread_calls = 0
    if case.threads is not None:
        sx.set_num_threads(case.threads)
        thread_calls += 1
    snaps = [snapshot(x) for x in case.watch]
    for r in range(1 if case.in_place else repeats):
        if r:
            sx.set_num_threads((1, 2, 3, 5)[r % 4])
            thread_calls += 1
        calls += 1
        if case.check is not None:
            case.check(case.fn(*case.args, **case.kwargs))
        elif isinstance(case.expect, np.ndarray):
            result = case.fn(*case.args, **case.kwargs)
            if case.out is not None:
                assert result is case.out
            else:
                assert result.flags.c_contiguous
            assert_same(result, case.expect, case.reduction, case.fast_ref)
        elif case.expect is ALLOWED:
            try:
                case.fn(*case.args, **case.kwargs)
            except ALLOWED:
                pass
        else:
            with pytest.raises(case.expect):
                case.fn(*case.args, **case.kwargs)
        for x, snap in zip(case.watch, snaps):
            assert_unchanged(x, snap)
    return calls + thread_calls, thread_calls


# Cases come from seeds: shrinking stays cheap, and a failing seed reproduces outside pytest
# with ``make_case(random.Random(seed))`` (scripts/fuzz_long.py --seed).
SEEDS = st.integers(0, 2**64 - 1)


@pytest.fixture(autouse=True)
def _restore_threads():
    before = sx.get_num_threads()
    yield
    sx.set_num_threads(before)


@FUZZ
@given(SEEDS)
def test_fuzz_scatter_elements(seed):
    rng = random.Random(seed)
    check_case(scatter_case(rng, np.random.default_rng(rng.getrandbits(64)), None))


@FUZZ
@given(SEEDS, st.sampled_from(SCATTER_FAULTS))
def test_fuzz_scatter_elements_faults(seed, fault):
    rng = random.Random(seed)
    check_case(scatter_case(rng, np.random.default_rng(rng.getrandbits(64)), fault))


@FUZZ
@given(SEEDS)
def test_fuzz_gather_elements(seed):
    rng = random.Random(seed)
    check_case(gather_case(rng, np.random.default_rng(rng.getrandbits(64)), None))


@FUZZ
@given(SEEDS, st.sampled_from(GATHER_FAULTS))
def test_fuzz_gather_elements_faults(seed, fault):
    rng = random.Random(seed)
    check_case(gather_case(rng, np.random.default_rng(rng.getrandbits(64)), fault))


@FUZZ
@given(SEEDS)
# Garbage may hold Python floats too large for data's dtype (float16, say): NumPy's cast of a
# list makes them inf and warns, as SPEC's casting rule (NumPy's) has it.
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_fuzz_garbage(seed):
    rng = random.Random(seed)
    check_case(garbage_case(rng, np.random.default_rng(rng.getrandbits(64))))


@FUZZ
@given(SEEDS)
def test_fuzz_mixed(seed):
    rng = random.Random(seed)
    check_case(make_case(rng))


@FUZZ
@given(st.integers(1, 6), st.integers(0, 3), st.sampled_from(REDUCTIONS), st.randoms(use_true_random=False))
def test_fuzz_in_place_with_aliased_indices_and_updates(n, axis_len_extra, reduction, rng):
    """data, indices and updates are views of one buffer and out is data: the kernel must read
    the inputs as they were before the call."""
    buf = np.array([rng.randrange(n) for _ in range(n + axis_len_extra)], dtype=np.int64)
    expected = reference_scatter(buf.copy(), buf[:n].copy(), buf[-n:].copy(), 0, reduction)
    result = sx.scatter_elements(buf, buf[:n], buf[-n:], 0, reduction, out=buf)
    assert result is buf
    assert_same(result, expected)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(v, d) for d in ("int32", "int64", "uint32", "uint64") for v in EXTREME_INDEX_VALUES
     if np.iinfo(d).min <= v <= np.iinfo(d).max],
)
def test_extreme_index_values_are_index_errors(value, dtype):
    """Every extreme value a dtype can hold is an IndexError naming it, and nothing is written."""
    data = np.arange(10.0).reshape(5, 2)
    indices = np.array([[0], [value]], dtype=dtype)
    out = data.copy()
    with pytest.raises(IndexError, match=str(value)):
        sx.scatter_elements(data, indices, np.ones(indices.shape), 0, "add", out=out)
    np.testing.assert_array_equal(out, data)
    with pytest.raises(IndexError, match=str(value)):
        sx.gather_elements(data, indices, 0)


@FUZZ
@given(SEEDS, st.sampled_from((None,) + VJP_FAULTS))
def test_fuzz_vjp(seed, fault):
    rng = random.Random(seed)
    check_case(vjp_case(rng, np.random.default_rng(rng.getrandbits(64)), fault))


# Found by the fuzz (fixed in 39b7844): data_shape went through int(), so floats and strings
# passed truncated and a masked element raised MaskError; a byte-swapped cotangent raised KeyError.
@pytest.mark.parametrize("data_shape", [(2.5,), ("3",), np.ma.array([1], mask=[1])])
def test_gather_vjp_data_shape_must_be_integers(data_shape):
    """A shape of floats, strings or masked values is a TypeError, not truncated or MaskError."""
    with pytest.raises(TypeError):
        sx.gather_elements_vjp(np.zeros(1), data_shape, np.zeros(1, np.int64))


def test_gather_vjp_accepts_byte_swapped_grad_output():
    grad = np.array([1.0, 2.0], dtype=">f8")
    result = sx.gather_elements_vjp(grad, (3,), np.array([0, 0]))
    np.testing.assert_array_equal(result, [3.0, 0.0, 0.0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bool_arrays_with_bytes_other_than_0_and_1(reduction):
    """NumPy reads any nonzero byte of a bool array as True (such arrays come from views of
    uint8 memory); the kernels may not treat those bytes as anything else (in C++, loading a
    bool that is not 0 or 1 is undefined behaviour)."""
    raw = np.array([[0, 2, 255, 1], [7, 0, 0, 128]], dtype=np.uint8)
    data = raw.view(np.bool_)
    updates = raw[::-1].view(np.bool_)
    indices = np.array([[1, 0, 1, 1], [0, 0, 1, 0]])
    truth = raw != 0
    expected = reference_scatter(truth, indices, truth[::-1], 0, reduction)
    result = sx.scatter_elements(data, indices, updates, 0, reduction)
    np.testing.assert_array_equal(result.view(np.uint8) != 0, expected)
    np.testing.assert_array_equal(sx.gather_elements(data, indices, 0).view(np.uint8) != 0,
                                  reference_gather(truth, indices, 0))


@FUZZ
@given(SEEDS, st.sampled_from(REDUCTIONS), st.integers(-3, 3))
def test_out_overlapping_the_inputs(seed, reduction, shift):
    """out is a shifted window of the buffer that holds data, indices and updates: the result
    is computed from the inputs as they were before the call."""
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 6, size=40).astype(np.int64)
    data, out = buf[10:22].reshape(3, 4), buf[10 + shift : 22 + shift].reshape(3, 4)
    indices, updates = buf[12:20].reshape(2, 4) % 3, buf[8:16].reshape(2, 4)
    expected = reference_scatter(data.copy(), indices.copy(), updates.copy(), 0, reduction)
    assert sx.scatter_elements(data, indices, updates, 0, reduction, out=out) is out
    np.testing.assert_array_equal(out, expected)
    buf = rng.integers(0, 3, size=40).astype(np.int64)
    data, out = buf[10:22].reshape(3, 4), buf[10 + shift : 18 + shift].reshape(2, 4)
    indices = buf[14:22].reshape(2, 4)
    expected = reference_gather(data.copy(), indices.copy(), 0)
    assert sx.gather_elements(data, indices, 0, out=out) is out
    np.testing.assert_array_equal(out, expected)
