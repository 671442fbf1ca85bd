"""A literal oracle of ScatterElements and GatherElements, written from SPEC sections 2 and 3.

It walks `indices` element by element in row-major order (``np.ndindex``) and applies one
update at a time with the scalar arithmetic of the element type (NumPy scalars, ml_dtypes
scalars for bfloat16, Python objects for strings). It is meant to be obviously correct, not
fast: use it on small arrays only. It checks the rules it relies on with plain asserts and
raises IndexError / TypeError where the spec says the call is an error, without caring about
messages (tests/test_errors.py checks those).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def category(dtype: np.dtype) -> str:
    """The row of the SPEC section 3 table that `dtype` belongs to."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f" or dtype == _BFLOAT16:
        return "float"
    if dtype.kind == "c":
        return "complex"
    if dtype.kind in "OUST":
        return "string"
    raise TypeError(f"no row of the table for {dtype}")


def _replace(a, b):
    return b


def _or(a, b):
    return np.bool_(bool(a) or bool(b))


def _and(a, b):
    return np.bool_(bool(a) and bool(b))


def _add(a, b):
    # NumPy scalars of one dtype stay in that dtype: integers wrap, float16 / bfloat16 round
    # to their type after the step. The overflow warning of integer scalars is expected.
    with np.errstate(over="ignore", invalid="ignore"):
        return a + b


def _mul(a, b):
    with np.errstate(over="ignore", invalid="ignore"):
        return a * b


def _is_nan(x) -> bool:
    return isinstance(x, (np.floating, float, ml_dtypes.bfloat16)) and math.isnan(float(x))


def _max(a, b):
    # NaN propagates; on a tie the current value stays (like np.maximum(current, update)).
    if _is_nan(a):
        return a
    if _is_nan(b):
        return b
    return b if b > a else a


def _min(a, b):
    if _is_nan(a):
        return a
    if _is_nan(b):
        return b
    return b if b < a else a


# SPEC section 3, one entry per cell; a missing cell is a TypeError.
STEPS = {
    "bool": {"none": _replace, "add": _or, "mul": _and, "max": _or, "min": _and},
    "int": {"none": _replace, "add": _add, "mul": _mul, "max": _max, "min": _min},
    "float": {"none": _replace, "add": _add, "mul": _mul, "max": _max, "min": _min},
    "complex": {"none": _replace, "add": _add, "mul": _mul},
    "string": {"none": _replace, "add": _add, "max": _max, "min": _min},
}


def _target(k: tuple, axis: int, index, size: int) -> tuple:
    """Position k of indices with its axis coordinate replaced by the normalised index."""
    v = int(index)
    if not -size <= v <= size - 1:
        raise IndexError(f"index {v} out of bounds for size {size}")
    if v < 0:
        v += size
    return k[:axis] + (v,) + k[axis + 1 :]


def _check_shapes(data, indices, axis):
    r = data.ndim
    assert r >= 1, "rank >= 1"
    assert indices.ndim == r, "indices have the rank of data"
    assert -r <= axis <= r - 1, "axis in range"
    if axis < 0:
        axis += r
    for d in range(r):
        if d != axis:
            assert indices.shape[d] <= data.shape[d], "indices fit data off the axis"
    return axis


def _result_dtype(data: np.ndarray, updates: np.ndarray, values: list) -> np.dtype:
    """Data's dtype; fixed-width strings get NumPy's promoted width, widened as the values need."""
    if data.dtype.kind not in "US":
        return data.dtype
    promoted = np.result_type(data.dtype, updates.dtype)
    chars = promoted.itemsize // (4 if promoted.kind == "U" else 1)
    longest = max((len(v) for v in values), default=0)
    return np.dtype(f"{promoted.kind}{max(chars, longest, 1)}")


def scatter_elements(data, indices, updates, axis=0, reduction="none") -> np.ndarray:
    """ScatterElements-18 by the letter of SPEC sections 2 and 3.

    Every index is checked first (an out-of-bounds index is an error even when another one
    would have been applied before it), then the updates are applied in row-major order of
    `indices`, each step with the scalar arithmetic of the element type.
    """
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    assert indices.dtype.kind in "iu", "integer indices"
    assert updates.shape == indices.shape, "updates have the shape of indices"
    axis = _check_shapes(data, indices, axis)
    steps = STEPS[category(data.dtype)]
    if reduction not in steps:
        raise TypeError(f"reduction {reduction} is not defined for {data.dtype}")
    step = steps[reduction]
    size = data.shape[axis]

    targets = [(k, _target(k, axis, indices[k], size)) for k in np.ndindex(indices.shape)]
    result = {p: data[p] for p in np.ndindex(data.shape)}
    for k, t in targets:
        result[t] = step(result[t], updates[k])

    out = np.empty(data.shape, _result_dtype(data, updates, list(result.values())))
    for p, value in result.items():
        out[p] = value
    return out


def gather_elements(data, indices, axis=0) -> np.ndarray:
    """GatherElements-13: ``out[k] = data[k with its axis coordinate = indices[k]]``."""
    data, indices = np.asarray(data), np.asarray(indices)
    assert indices.dtype.kind in "iu", "integer indices"
    axis = _check_shapes(data, indices, axis)
    size = data.shape[axis]
    targets = [(k, _target(k, axis, indices[k], size)) for k in np.ndindex(indices.shape)]
    out = np.empty(indices.shape, data.dtype)
    for k, t in targets:
        out[k] = data[t]
    return out


def scatter_elements_vjp(grad, data, indices, updates, axis=0, reduction="none"):
    """The gradients of SPEC section 5 read literally, in float64 (complex128 for complex data).

    For every position p of data, the updates that target it are taken in row-major order:
    "none" gives G[p] to the last of them (data keeps it only when none lands), "add" to all,
    "mul" gives dD = G·conj(product) and dU[k] = G·conj(D·product of the others), max/min split
    G evenly among data and the updates that tie with the result (NaN ties NaN).
    """
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    wide = np.complex128 if data.dtype.kind == "c" else np.float64
    G, D, U = (np.asarray(a).astype(wide) for a in (grad, data, updates))
    axis = _check_shapes(data, indices, axis)
    Y = scatter_elements(data, indices, updates, axis, reduction).astype(wide)
    size = data.shape[axis]
    writers = {}  # position of data -> the updates k that target it, in row-major order
    for k in np.ndindex(indices.shape):
        writers.setdefault(_target(k, axis, indices[k], size), []).append(k)
    conj = np.conj if wide is np.complex128 else (lambda x: x)
    dD, dU = np.zeros(D.shape, wide), np.zeros(U.shape, wide)
    for p in np.ndindex(D.shape):
        ks = writers.get(p, [])
        if reduction == "none":
            dD[p] = 0 if ks else G[p]
            if ks:
                dU[ks[-1]] = G[p]
        elif reduction == "add":
            dD[p] = G[p]
            for k in ks:
                dU[k] = G[p]
        elif reduction == "mul":
            dD[p] = G[p] * conj(math.prod(U[k] for k in ks))
            for k in ks:
                dU[k] = G[p] * conj(D[p] * math.prod(U[j] for j in ks if j != k))
        else:
            result = Y[p]

            def tie(v, result=result):
                return v == result or (_is_nan(v) and _is_nan(result))

            n = tie(D[p]) + sum(tie(U[k]) for k in ks)
            dD[p] = G[p] / n if tie(D[p]) else 0
            for k in ks:
                dU[k] = G[p] / n if tie(U[k]) else 0
    return dD, dU
