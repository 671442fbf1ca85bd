"""scatter_elements_vjp and gather_elements_vjp against independent sources (SPEC section 5).

Sources: central finite differences of the forward kernels (float64, generic points), tables
computed by hand, a brute-force loop for the products of the other updates, and PyTorch autograd
where PyTorch is exact. Where PyTorch's rules differ from ours, the difference is written down
as data (``TORCH_DIVERGENCES``) and checked to be exactly that.
"""

from __future__ import annotations


import itertools
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from gated_paths import paths_taken
import scatterx as sx
from scatterx import _autodiff, _core
from scatterx._rules import scatter_call

torch = pytest.importorskip("torch")

REDUCTIONS = ("none", "add", "mul", "max", "min")
BF16 = np.dtype(ml_dtypes.bfloat16)
TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


# -- finite differences --------------------------------------------------------------------------


def _loss(g, y):
    """L = Re(sum(conj(G) * Y)): its cotangent with respect to Y is G (PyTorch's convention)."""
    return float(np.real(np.sum(np.conj(g) * y)))


def _numeric_grad(f, x, g, eps=1e-6):
    """dL/dx by central differences; for complex x, dL/dRe + i dL/dIm (PyTorch's convention)."""
    grad = np.zeros_like(x)
    flat, out = x.reshape(-1), grad.reshape(-1)
    directions = (1.0, 1j) if x.dtype.kind == "c" else (1.0,)
    for k in range(flat.size):
        for direction in directions:
            keep = flat[k]
            flat[k] = keep + eps * direction
            up = _loss(g, f())
            flat[k] = keep - eps * direction
            down = _loss(g, f())
            flat[k] = keep
            out[k] += (up - down) / (2 * eps) * (1 if direction == 1.0 else 1j)
    return grad


def _generic_case(reduction, rng, dtype=np.float64, *, data_shape=(4, 3, 5), index_shape=(3, 3, 4),
                  axis=1):
    """Random data, updates and indices (negative ones included) with no ties for max/min.

    Duplicate targets are allowed: none is linear in the updates and max/min have distinct values,
    so the loss is smooth at these points.
    """
    size = data_shape[axis]
    indices = rng.integers(-size, size, index_shape)
    data = rng.standard_normal(data_shape)
    updates = rng.standard_normal(index_shape)
    if reduction == "mul":
        updates = rng.uniform(0.5, 1.5, index_shape) * rng.choice([-1, 1], index_shape)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data_shape)
        updates = updates + 1j * rng.standard_normal(index_shape)
    return data.astype(dtype), indices, updates.astype(dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_finite_differences_float64(reduction, axis):
    rng = np.random.default_rng(10 + axis)
    data_shape, index_shape = (4, 3, 5), [3, 3, 4]
    index_shape[axis] = 6  # more updates than positions along the axis: duplicates
    d, i, u = _generic_case(reduction, rng, data_shape=data_shape, index_shape=tuple(index_shape), axis=axis)
    g = rng.standard_normal(data_shape)
    gd, gu = sx.scatter_elements_vjp(g, d, i, u, axis, reduction)
    nd = _numeric_grad(lambda: sx.scatter_elements(d, i, u, axis, reduction), d, g)
    nu = _numeric_grad(lambda: sx.scatter_elements(d, i, u, axis, reduction), u, g)
    np.testing.assert_allclose(gd, nd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(gu, nu, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_finite_differences_complex128(reduction):
    rng = np.random.default_rng(3)
    d, i, u = _generic_case(reduction, rng, np.complex128, data_shape=(3, 4), index_shape=(5, 4), axis=0)
    g = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    gd, gu = sx.scatter_elements_vjp(g, d, i, u, 0, reduction)
    nd = _numeric_grad(lambda: sx.scatter_elements(d, i, u, 0, reduction), d, g)
    nu = _numeric_grad(lambda: sx.scatter_elements(d, i, u, 0, reduction), u, g)
    np.testing.assert_allclose(gd, nd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(gu, nu, rtol=1e-7, atol=1e-8)


def test_gather_finite_differences():
    rng = np.random.default_rng(4)
    d = rng.standard_normal((4, 5))
    i = rng.integers(-5, 5, (4, 7))
    g = rng.standard_normal((4, 7))
    nd = _numeric_grad(lambda: sx.gather_elements(d, i, 1), d, g)
    np.testing.assert_allclose(sx.gather_elements_vjp(g, d.shape, i, 1), nd, rtol=1e-7, atol=1e-8)


# -- hand-computed corners -----------------------------------------------------------------------

# 1-D cases along axis 0: (reduction, data, indices, updates, G, expected dD, expected dU).
# G holds distinct powers of ten so that every expected entry says where its gradient came from.
NAN = np.nan
CORNERS = {
    # Target 0 is written by updates 0, 2, 3: only update 3 (the last) counts. Target 2: update 1.
    "none-duplicates": ("none", [10, 20, 30], [0, 2, 0, 0], [1, 2, 3, 4], [1, 10, 100],
                        [0, 10, 0], [0, 100, 0, 1]),
    "none-negative-index": ("none", [10, 20, 30], [-1, 2], [1, 2], [1, 10, 100],
                            [1, 10, 0], [0, 100]),
    "add-duplicates": ("add", [10, 20, 30], [0, 2, 0, 0], [1, 2, 3, 4], [1, 10, 100],
                       [1, 10, 100], [1, 100, 1, 1]),
    # Target 0: data 2, updates (0, 4): one zero. Target 1: data 3, updates (0, 0, 7): two zeros,
    # every partial has a zero factor. Target 2: data 0, update 5.
    "mul-zeros": ("mul", [2, 3, 0], [0, 0, 1, 1, 1, 2], [0, 4, 0, 0, 7, 5], [1, 10, 100],
                  [0, 0, 500], [8, 0, 0, 0, 0, 0]),
    # Target 0: data 2, updates (3, 0, 5): only the zero gets a nonzero gradient, 2*3*5.
    "mul-single-zero": ("mul", [2, 1], [0, 0, 0], [3, 0, 5], [1, 10],
                        [0, 10], [0, 30, 0]),
    "mul-duplicates": ("mul", [2, 1], [0, 1, 0, 0], [3, 4, 5, 7], [1, 10],
                       [105, 40], [70, 10, 42, 30]),
    # Target 0: data 1 < updates (3, 3): the two updates tie. Target 1: data 5 = update 5.
    # Target 2: data 2 = update 2 > 1. Target 3: untouched, data alone.
    "max-ties": ("max", [1, 5, 2, 4], [0, 0, 1, 2, 2], [3, 3, 5, 2, 1], [2, 10, 100, 1000],
                 [0, 5, 50, 1000], [1, 1, 5, 50, 0]),
    "min-ties": ("min", [9, 5, 2, 4], [0, 0, 1, 2, 2], [3, 3, 5, 2, 7], [2, 10, 100, 1000],
                 [0, 5, 50, 1000], [1, 1, 5, 50, 0]),
    # Three-way tie with data: each of the three gets a third.
    "max-three-way": ("max", [6], [0, 0], [6, 6], [3], [1], [1, 1]),
    # Target 0: data NaN alone. Target 1: two NaN updates tie, data 1 loses. Target 2: no NaN.
    "max-nan": ("max", [NAN, 1, 2], [0, 1, 1, 2], [1, NAN, NAN, 3], [2, 10, 100],
                [2, 0, 0], [0, 5, 5, 100]),
    "min-nan": ("min", [NAN, 1, 2], [0, 1, 1, 2], [1, NAN, NAN, 0], [2, 10, 100],
                [2, 0, 0], [0, 5, 5, 100]),
    # NaN in data and in one update: the two NaNs share.
    "max-nan-with-data": ("max", [NAN], [0, 0], [NAN, 7], [4], [2], [2, 0]),
    # Signed zeros compare equal: a tie.
    "max-signed-zero": ("max", [0.0], [0], [-0.0], [4], [2], [2]),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, BF16])
@pytest.mark.parametrize("case", CORNERS, ids=str)
def test_corner_table(case, dtype):
    reduction, d, i, u, g, want_d, want_u = CORNERS[case]
    d, u, g = (np.array(x, dtype) for x in (d, u, g))
    gd, gu = sx.scatter_elements_vjp(g, d, np.array(i), u, 0, reduction)
    assert gd.dtype == gu.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(gd.astype(np.float64), want_d)
    np.testing.assert_array_equal(gu.astype(np.float64), want_u)


def test_none_duplicates_along_inner_axis():
    """Axis 1 of a 2-D array: duplicates are resolved per row, in row-major order."""
    d = np.zeros((2, 3))
    i = np.array([[2, 2, 0, 2], [1, 1, 1, 0]])
    g = np.array([[1.0, 2, 3], [4, 5, 6]])
    gd, gu = sx.scatter_elements_vjp(g, d, i, np.ones((2, 4)), 1, "none")
    np.testing.assert_array_equal(gd, [[0, 2, 0], [0, 0, 6]])
    np.testing.assert_array_equal(gu, [[0, 0, 1, 3], [0, 0, 5, 4]])


def test_complex_mul_uses_conjugates():
    """dU = G * conj(D * other updates), dD = G * conj(product of updates) (PyTorch's convention)."""
    d = np.array([1 + 2j])
    u = np.array([2 - 1j, 1j])
    g = np.array([3 + 0j])
    gd, gu = sx.scatter_elements_vjp(g, d, [0, 0], u, 0, "mul")
    np.testing.assert_allclose(gd, [3 * np.conj((2 - 1j) * 1j)])
    np.testing.assert_allclose(gu, [3 * np.conj((1 + 2j) * 1j), 3 * np.conj((1 + 2j) * (2 - 1j))])


def test_gather_duplicates_accumulate():
    g = np.array([[1.0, 10], [100, 1000], [10000, 100000]])
    i = np.array([[0, 1], [0, 1], [1, 1]])
    np.testing.assert_array_equal(sx.gather_elements_vjp(g, (2, 2), i, 0), [[101, 0], [10000, 101010]])


def test_half_gather_accumulates_in_float32():
    """4096 ones: float16 stops counting at 2048 step by step; float32 then rounding gives 4096."""
    g = np.ones(4096, np.float16)
    assert sx.gather_elements_vjp(g, (1,), np.zeros(4096, np.int64), 0)[0] == 4096


# -- the products of the other updates -----------------------------------------------------------


def _brute_force_others(indices, updates, axis, data_shape):
    """Loop over every pair of updates: the product of the others with the same target."""
    idx = np.asarray(indices) % data_shape[axis]
    positions = list(np.ndindex(*idx.shape))
    targets = [p[:axis] + (int(idx[p]),) + p[axis + 1 :] for p in positions]
    out = np.ones(idx.shape, updates.dtype)
    for p, t in zip(positions, targets):
        for q, s in zip(positions, targets):
            if q != p and s == t:
                out[p] *= updates[q]
    return out


@pytest.mark.parametrize("layout", ["int64", "int32", "strided"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_mul_products_of_the_others_against_brute_force(axis, dtype, layout):
    """With G = 1 and D = 1, dU is (the conjugate of) the product of the other updates of the
    same target; factors are small binary fractions, so every product is exact in any order."""
    rng = np.random.default_rng(5)
    shape = [3, 2, 3]
    ishape = list(shape)
    ishape[axis] = 17  # up to ~12 updates per target, zeros among them
    idx = rng.integers(-shape[axis], shape[axis], ishape)
    upd = rng.choice([0.0, 0.5, -2.0, 3.0, 1.5], idx.shape).astype(dtype)
    if dtype == np.complex128:
        upd = upd + 1j * rng.choice([0.0, 0.5, -1.0], idx.shape)
    ones = np.ones(shape, dtype)
    given = idx.astype(np.int32) if layout == "int32" else idx
    if layout == "strided":  # typed row walks do not apply: the generic walk runs
        given = np.repeat(idx, 2, axis=-1)[..., ::2]
        assert not given.flags.c_contiguous
    gd, gu = sx.scatter_elements_vjp(ones, ones, given, upd, axis, "mul")
    np.testing.assert_array_equal(gu, np.conj(_brute_force_others(idx, upd, axis, tuple(shape))))
    product = np.ones(shape, dtype)
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = np.where(idx < 0, idx + shape[axis], idx)
    np.multiply.at(product, tuple(index), upd)
    np.testing.assert_array_equal(gd, np.conj(product))


# -- PyTorch where it is exact -------------------------------------------------------------------


def _torch_vjp(g, d, i, u, axis, reduction):
    td = torch.tensor(d, requires_grad=True)
    tu = torch.tensor(u, requires_grad=True)
    ti = torch.tensor(np.asarray(i) % d.shape[axis])
    if reduction == "none":
        y = torch.scatter(td, axis, ti, tu)
    else:
        y = torch.scatter_reduce(td, axis, ti, tu, TORCH_REDUCE[reduction], include_self=True)
    gd, gu = torch.autograd.grad(y, (td, tu), torch.tensor(g))
    return gd.numpy(), gu.numpy()


def _unique_indices(rng, size, index_shape, axis):
    """Distinct targets within every fiber (no duplicates)."""
    moved = tuple(n for d, n in enumerate(index_shape) if d != axis) + (size,)
    perm = rng.permuted(np.broadcast_to(np.arange(size), moved), axis=-1)[..., : index_shape[axis]]
    return np.ascontiguousarray(np.moveaxis(perm, -1, axis))


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_agrees_with_torch_without_duplicates(reduction, dtype):
    rng = np.random.default_rng(6)
    d = rng.standard_normal((5, 6, 4)).astype(dtype)
    i = _unique_indices(rng, 6, (5, 4, 4), 1)
    u = rng.standard_normal((5, 4, 4)).astype(dtype)
    if reduction in ("max", "min"):
        u[:, :2] = np.take_along_axis(d, i[:, :2], 1)  # ties with data
    if reduction == "mul":
        u[0, 0, 0] = 0.0  # a single zero per target is what PyTorch handles exactly
    g = rng.standard_normal((5, 6, 4)).astype(dtype)
    ours = sx.scatter_elements_vjp(g, d, i, u, 1, reduction)
    theirs = _torch_vjp(g, d, i, u, 1, reduction)
    tol = {"rtol": 1e-5 if dtype == np.float32 else 1e-12, "atol": 0}
    for a, b in zip(ours, theirs):
        if reduction == "mul":
            np.testing.assert_allclose(a, b, **tol)  # PyTorch divides: not bitwise
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("reduction", ["add", "max", "min"])
def test_agrees_with_torch_with_duplicates(reduction):
    """add, and max/min with ties split evenly: PyTorch is exact here too."""
    rng = np.random.default_rng(7)
    d = rng.integers(-3, 3, (6, 5)).astype(np.float64)  # small integers: many ties
    i = rng.integers(-6, 6, (20, 5))
    u = rng.integers(-3, 3, (20, 5)).astype(np.float64)
    g = rng.standard_normal((6, 5))
    for a, b in zip(sx.scatter_elements_vjp(g, d, i, u, 0, reduction), _torch_vjp(g, d, i, u, 0, reduction)):
        np.testing.assert_array_equal(a, b)


def test_gather_agrees_with_torch():
    rng = np.random.default_rng(8)
    d = rng.standard_normal((6, 5))
    i = rng.integers(0, 5, (6, 9))
    g = rng.standard_normal((6, 9))
    td = torch.tensor(d, requires_grad=True)
    (want,) = torch.autograd.grad(torch.gather(td, 1, torch.tensor(i)), td, torch.tensor(g))
    np.testing.assert_allclose(sx.gather_elements_vjp(g, d.shape, i, 1), want.numpy(), rtol=1e-15)


# Where PyTorch's gradient is not the derivative of the function it computes, as data:
# (reduction, data, indices, updates, G) -> ((our dD, our dU), (PyTorch's dD, PyTorch's dU)).
# "none": PyTorch sends G to every duplicate although only the last reaches the output.
# "max" with a NaN result: PyTorch finds no tie (NaN != NaN), divides by 0, and every
# participant of that target gets NaN; scatterx lets the NaN participants share G.
TORCH_DIVERGENCES = {
    "none-duplicates": (("none", [0.0, 0.0], [1, 1, 0, 1], [1.0, 2, 3, 4], [10.0, 100]),
                        (([0, 0], [0, 0, 10, 100]), ([0, 0], [100, 100, 10, 100]))),
    "max-nan": (("max", [NAN, 1, 2], [0, 1, 1, 2], [1, NAN, NAN, 3], [2.0, 10, 100]),
                (([2, 0, 0], [0, 5, 5, 100]), ([NAN, NAN, 0], [NAN, NAN, NAN, 100]))),
}


@pytest.mark.parametrize("case", TORCH_DIVERGENCES)
def test_known_torch_divergences(case):
    (reduction, d, i, u, g), (ours, torchs) = TORCH_DIVERGENCES[case]
    d, u, g = np.array(d), np.array(u), np.array(g)
    for got, want in zip(sx.scatter_elements_vjp(g, d, i, u, 0, reduction), ours):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(_torch_vjp(g, d, i, u, 0, reduction), torchs):
        np.testing.assert_array_equal(got, want)


# -- types, layouts, shapes, errors --------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_low_precision_matches_float64_rounded(reduction, dtype):
    """Computed in float32 and rounded once: within one rounding of the float64 gradient."""
    rng = np.random.default_rng(9)
    d, i, u = _generic_case(reduction, rng, data_shape=(6, 5), index_shape=(4, 5), axis=0)
    d, u = d.astype(dtype), u.astype(dtype)
    g = rng.standard_normal((6, 5)).astype(dtype)
    got = sx.scatter_elements_vjp(g, d, i, u, 0, reduction)
    want = sx.scatter_elements_vjp(*(x.astype(np.float64) for x in (g, d)), i, u.astype(np.float64), 0, reduction)
    eps = float(ml_dtypes.finfo(dtype).eps) if dtype == BF16 else float(np.finfo(dtype).eps)
    for a, b in zip(got, want):
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=2 * eps, atol=0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("gdtype", [np.float32, np.float64])
def test_cotangent_of_another_float_type_is_cast_as_numpy_casts(reduction, dtype, gdtype):
    """A float32 or float64 cotangent of 16-bit data is rounded to data's type as NumPy's cast
    (ml_dtypes' for bfloat16) rounds it, however scatterx converts it: the gradients are those
    of the cotangent cast beforehand, bit for bit."""
    rng = np.random.default_rng(21)
    d, i, u = _generic_case(reduction, rng, data_shape=(64, 33), index_shape=(40, 33), axis=0)
    d, u = d.astype(dtype), u.astype(dtype)
    g = rng.standard_normal((64, 33)).astype(gdtype)
    # Halfway between neighbouring float16 / bfloat16 values (ties to even), just off them, a
    # NaN, an infinity and values beyond the 16-bit range.
    g.flat[:8] = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, np.nan, -np.inf, 1e6, -7e4]
    g.flat[8:12] = np.nextafter(g.flat[:4], 2).astype(gdtype)
    with np.errstate(over="ignore"):  # NumPy's casts warn of the values beyond the range
        cast = g.astype(dtype)
        got_all = sx.scatter_elements_vjp(g, d, i, u, 0, reduction)
        want_all = sx.scatter_elements_vjp(cast, d, i, u, 0, reduction)
    for got, want in zip(got_all, want_all):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_layouts_do_not_change_gradients(reduction):
    rng = np.random.default_rng(11)
    d, i, u = _generic_case(reduction, rng, data_shape=(5, 6), index_shape=(5, 4), axis=1)
    g = rng.standard_normal((5, 6))
    want = sx.scatter_elements_vjp(g, d, i, u, 1, reduction)
    got = sx.scatter_elements_vjp(np.asfortranarray(g), d[::-1].copy()[::-1], np.asfortranarray(i),
                                  u.T.copy().T, 1, reduction)
    for a, b in zip(got, want):
        assert a.flags.c_contiguous
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_empty_indices(reduction):
    g = np.arange(6.0).reshape(2, 3)
    gd, gu = sx.scatter_elements_vjp(g, np.ones((2, 3)), np.zeros((0, 3), np.int64), np.ones((0, 3)), 0, reduction)
    np.testing.assert_array_equal(gd, g)  # max/min: data alone takes part everywhere
    assert gu.shape == (0, 3)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(12)
    d, i, u = _generic_case("mul", rng, data_shape=(4, 3), index_shape=(6, 3), axis=0)
    g = rng.standard_normal((4, 3))
    before = [x.copy() for x in (g, d, i, u)]
    for reduction in REDUCTIONS:
        gd, _ = sx.scatter_elements_vjp(g, d, i, u, 0, reduction)
        assert not np.shares_memory(gd, g)
    for x, y in zip((g, d, i, u), before):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.dtype("U3"), object])
def test_not_differentiable_types(dtype):
    d = np.zeros(3, dtype)
    with pytest.raises(TypeError, match="not differentiable"):
        sx.scatter_elements_vjp(np.zeros(3), d, [0], d[:1], 0, "none")
    with pytest.raises(TypeError, match="not differentiable"):
        sx.gather_elements_vjp(np.zeros(1, dtype), (3,), [0], 0)


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_complex_max_min_is_a_type_error(reduction):
    with pytest.raises(TypeError, match="complex"):
        sx.scatter_elements_vjp(np.zeros(2, complex), np.zeros(2, complex), [0], np.zeros(1, complex), 0, reduction)


def test_bad_grad_output():
    d, i, u = np.zeros((2, 3)), np.zeros((1, 3), np.int64), np.zeros((1, 3))
    with pytest.raises(ValueError, match=r"shape of data \(2, 3\)"):
        sx.scatter_elements_vjp(np.zeros((3, 2)), d, i, u, 0, "add")
    with pytest.raises(TypeError, match="cannot be cast"):
        sx.scatter_elements_vjp(np.zeros((2, 3), np.int64), d, i, u, 0, "add")
    with pytest.raises(TypeError, match="cannot be cast"):
        sx.scatter_elements_vjp(np.zeros((2, 3), complex), d, i, u, 0, "add")
    with pytest.raises(ValueError, match=r"shape of indices \(1, 3\)"):
        sx.gather_elements_vjp(np.zeros((2, 3)), (2, 3), i, 0)
    gd, gu = sx.scatter_elements_vjp(np.ones((2, 3), np.float32), d, i, u, 0, "add")
    assert gd.dtype == gu.dtype == np.float64


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_given_output_gives_the_same_gradients(reduction):
    rng = np.random.default_rng(13)
    d = rng.integers(-2, 2, (4, 3)).astype(np.float32)  # ties
    i = rng.integers(0, 4, (6, 3))
    u = rng.integers(-2, 2, (6, 3)).astype(np.float32)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    y = sx.scatter_elements(d, i, u, 0, reduction)
    for a, b in zip(sx.scatter_elements_vjp(g, d, i, u, 0, reduction, output=y),
                    sx.scatter_elements_vjp(g, d, i, u, 0, reduction)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="output must have data's shape"):
        sx.scatter_elements_vjp(g, d, i, u, 0, reduction, output=y.astype(np.float64))


def test_forward_errors_still_apply():
    with pytest.raises(IndexError, match="index 5 at indices"):
        sx.scatter_elements_vjp(np.zeros(3), np.zeros(3), [5], [1.0], 0, "add")
    with pytest.raises(IndexError, match="index -4 at indices"):
        sx.gather_elements_vjp(np.zeros(1), (3,), [-4], 0)
    with pytest.raises(ValueError, match="unknown reduction"):
        sx.scatter_elements_vjp(np.zeros(3), np.zeros(3), [0], [1.0], 0, "sum")
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        sx.gather_elements_vjp(np.zeros((1, 1)), (3, 1), [[0]], 2)


# -- a literal oracle of SPEC section 5 over random shapes -----------------------------------------


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_shapes_against_the_literal_oracle(data):
    ndim = data.draw(st.integers(1, 3))
    data_shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    index_shape = tuple(
        data.draw(st.integers(0, 6)) if d == axis % ndim else data.draw(st.integers(0, n))
        for d, n in enumerate(data_shape)
    )
    reduction = data.draw(st.sampled_from(REDUCTIONS))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    size = data_shape[axis]
    idx = rng.integers(-size, size, index_shape)
    # Small integers (and a NaN now and then for max/min): ties, zeros and duplicates are common.
    d = rng.integers(-2, 3, data_shape).astype(np.float64)
    u = rng.integers(-2, 3, index_shape).astype(np.float64)
    if reduction in ("max", "min") and data.draw(st.booleans()):
        d[rng.random(data_shape) < 0.2] = np.nan
        u[rng.random(index_shape) < 0.2] = np.nan
    g = rng.standard_normal(data_shape)
    got = sx.scatter_elements_vjp(g, d, idx, u, axis, reduction)
    for a, b in zip(got, oracle.scatter_elements_vjp(g, d, idx, u, axis, reduction)):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=0)


def _vjp_on_1_2_3_threads(g, d, i, u, axis, reduction):
    """scatter_elements_vjp on 1, 2 and 3 threads, asserted bitwise the same; the gradients."""
    previous = sx.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            sx.set_num_threads(threads)
            results.append(sx.scatter_elements_vjp(g, d, i, u, axis, reduction))
    finally:
        sx.set_num_threads(previous)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    return results[0]


@pytest.mark.parametrize("axis", [1, 2])
def test_mul_backward_in_parallel_is_thread_independent_and_matches_torch(axis):
    """Large enough for several threads: bitwise the same for 1, 2 and 3 threads, and close
    to PyTorch (which divides by the result, so only to rounding) where no update is zero."""
    rng = np.random.default_rng(9)
    d = rng.standard_normal((8, 300, 40))
    ishape = [8, 300, 40]
    ishape[axis] = 500
    i = rng.integers(-d.shape[axis], d.shape[axis], ishape)
    u = rng.uniform(0.5, 1.5, ishape)
    g = rng.standard_normal(d.shape)
    got = _vjp_on_1_2_3_threads(g, d, i, u, axis, "mul")
    for a, b in zip(got, _torch_vjp(g, d, i % d.shape[axis], u, axis, "mul")):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("streaming_outputs", ["off", "wide", "narrow"], indirect=True)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize(
    "data_shape, index_shape, axis",
    [
        # 160 fibers of 2.4 KB in a row: groups of 109 and 51 fibers in the per-thread scratch
        # of 256 KB (54, 54 and 52 complex ones of 4.8 KB).
        ((1, 300, 160), (1, 250, 160), 1),
        # Fibers along the last axis, each contiguous in the arrays.
        ((40, 300), (40, 250), 1),
        # Fibers of 272 KB, beyond the scratch: P and S in grad_data itself.
        ((2, 34_000), (2, 300), 1),
        ((34_000, 2), (300, 2), 0),
        # S of 2.2 MB (4.4 MB complex), beyond the cache as well, in rows of eight fibers.
        ((34_000, 8), (600, 8), 0),
        # One fiber of 320 KB: S beyond the scratch, walked as rows of one.
        ((40_000,), (5_000,), 0),
        # Fibers of 160 KB (320 KB complex): groups of one fiber in the scratch, or beyond it.
        ((20_000, 3), (900, 3), 0),
    ],
)
def test_mul_backward_in_groups_and_beyond_the_scratch(data_shape, index_shape, axis, dtype, streaming_outputs):
    """Against the literal oracle, and bitwise the same for 1, 2 and 3 threads. Updates and data
    are in {-2, ..., 2} (with imaginary parts for complex): zeros and duplicates abound, and the
    float64 products stay exact. With streaming outputs (but "off"), dD is written as for a
    large call (by streaming stores from the pass over the scratch; normally above 32 MB in
    all)."""
    rng = np.random.default_rng(11)
    size = data_shape[axis]

    def small(shape):
        x = rng.integers(-2, 3, shape).astype(dtype)
        if dtype == np.complex128:
            x += 1j * rng.integers(-2, 3, shape)
        return x

    d, u = small(data_shape), small(index_shape)
    i = rng.integers(-size, size, index_shape).astype(np.int32)
    g = rng.standard_normal(data_shape).astype(dtype)
    with paths_taken() as taken:
        got = _vjp_on_1_2_3_threads(g, d, i, u, axis, "mul")
    # A fiber within the 256 KB scratch (kMulScratchBytes) keeps P and S there, a longer one in dD.
    fits = size * np.dtype(dtype).itemsize <= 256 << 10
    assert taken == {"mul_backward_scratch" if fits else "mul_backward_in_place": 3}
    rtol = 1e-14 if dtype == np.float64 else 1e-12
    for a, b in zip(got, oracle.scatter_elements_vjp(g, d, i, u, axis, "mul")):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0)


_MUL_MEMORY = """
import json, sys, numpy as np, scatterx as sx
from scatterx._bench import peak_extra
rng = np.random.default_rng(5)
d = rng.standard_normal((70_000, 8)).astype(np.float32)
g = rng.standard_normal(d.shape).astype(np.float32)
i = rng.integers(0, 70_000, (100_000, 8))
u = rng.uniform(0.5, 1.5, i.shape).astype(np.float32)
run = lambda: sx.scatter_elements_vjp(g, d, i, u, 0, "mul")
run()
sx.set_output_cache_limit(0)
inputs = d.nbytes + g.nbytes + i.nbytes + u.nbytes
print(json.dumps([peak_extra(run, d.nbytes + u.nbytes), inputs]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS is read from /proc")
def test_mul_backward_beyond_the_scratch_stays_within_five_percent_of_the_inputs():
    """SPEC section 8: extra memory beyond the outputs at most 5 % of the inputs. Fibers of 280 KB
    (beyond the scratch), whose products in an array of their own (2.2 MB, as until stop 51)
    would be 16 % of the inputs: the peak resident set of a fresh process (it sees native
    allocations: test_the_memory_instrument_sees_native_and_numpy_allocations)."""
    import json
    import os
    import subprocess

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, "-c", _MUL_MEMORY], capture_output=True, text=True, env=env, check=True)
    report, inputs = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["rss_extra_bytes"] is None:
        pytest.skip("the peak resident set cannot be reset here")
    assert report["rss_extra_bytes"] <= 0.05 * inputs


def _extremum_three_ways(monkeypatch, g, d, i, u, axis, reduction):
    """The native pass comparing values (on 1, 2 and 3 threads) and reading the residuals' tie
    masks, each fetching every update's count and share or only the tying updates' (the way
    taken on Intel CPUs; both are run on any machine), comparing float32 rows sixteen updates at
    a time or one by one (the first where the CPU has AVX-512F and DQ, else only the second),
    and the NumPy way (ties counted in integers), asserted bitwise the same."""
    with monkeypatch.context() as m:
        m.setattr(_autodiff, "_NATIVE_TIES_LIMIT", dict.fromkeys(_autodiff._NATIVE_TIES_LIMIT, 0))
        expected = sx.scatter_elements_vjp(g, d, i, u, axis, reduction)
    before = _core.set_ties_by_select(False), _core.set_ties_by_rows(False)
    try:
        for select, rows in itertools.product((False, True), (False, True)):
            _core.set_ties_by_select(select)
            _core.set_ties_by_rows(rows)
            got = _vjp_on_1_2_3_threads(g, d, i, u, axis, reduction)
            masks = _autodiff.scatter_backward(_autodiff.scatter_residuals(scatter_call(d, i, u, axis, reduction)), g)
            for other in (got, masks):
                for a, b in zip(other, expected):
                    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    finally:
        _core.set_ties_by_select(before[0])
        _core.set_ties_by_rows(before[1])
    return got


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(
    "data_shape, index_shape, axis",
    [((20_000, 16), (40_000, 16), 0), ((20_000, 16), (30_000, 9), 0), ((16, 3_000), (12, 5_000), 1)],
)
def test_extremum_backward_native_and_numpy_agree(monkeypatch, reduction, dtype, data_shape, index_shape, axis):
    """The native pass (ties counted in the compute type), comparing values itself (a single
    call) or reading the residuals' tie masks (a forward kept for its backward), against the
    NumPy way (counted in integers, which an index of 2^24 or more along the axis takes),
    bitwise, for 1, 2 and 3 threads; ties and NaN abound. Large enough for the prefetching row
    walk and for threads."""
    rng = np.random.default_rng(12)
    d = rng.integers(-3, 4, data_shape).astype(dtype)
    u = rng.integers(-3, 4, index_shape).astype(dtype)
    d[rng.random(data_shape) < 0.01] = np.nan
    u[rng.random(index_shape) < 0.01] = np.nan
    i = rng.integers(-data_shape[axis], data_shape[axis], index_shape)
    g = rng.standard_normal(data_shape).astype(dtype)
    got = _extremum_three_ways(monkeypatch, g, d, i, u, axis, reduction)
    assert (got[1] != 0).any() and (got[0] == 0).any()  # ties taken and lost


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("ties", [14, 15, 16, 17, 40, 255, 256, 257, 511, 512, 700])
def test_extremum_backward_counts_more_ties_than_a_byte(monkeypatch, reduction, ties, last):
    """The native pass counts a target's tying updates in four bits, widens the counts to bytes
    at a 16th tie, and counts again in the compute type when a byte wraps: up to hundreds of
    updates tie at one target of each column (data loses there), the other targets get a few
    ties with data, counted before the many (`last`: the counts held in four bits must survive
    the widening) or after them."""
    rng = np.random.default_rng(ties)
    sign = 1 if reduction == "max" else -1
    d = rng.integers(0, 3, (40, 6)).astype(np.float32) * sign
    d[0] = 0
    i = rng.integers(1, 40, (ties + 100, 6))
    many = slice(100, None) if last else slice(None, ties)
    i[many] = 0
    u = rng.integers(0, 3, i.shape).astype(np.float32) * sign
    u[many] = 5 * sign  # the result at row 0, from every one of them
    g = rng.standard_normal(d.shape).astype(np.float32)
    gd, gu = _extremum_three_ways(monkeypatch, g, d, i, u, 0, reduction)
    np.testing.assert_array_equal(gd[0], 0)
    share = g[0] / np.float32(ties)
    np.testing.assert_array_equal(gu[many], np.broadcast_to(share, (ties, 6)))


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_extremum_backward_in_groups_of_fibers(monkeypatch, reduction):
    """An axis so long that the native pass counts a few fibers at a time (each fiber's byte
    table is as long as the axis): groups of fibers within each thread's block (a 2 MB table
    holds 5 fibers of 400 000; 13 fibers make blocks of 7 and 6 on two threads)."""
    rng = np.random.default_rng(31)
    d = rng.integers(-3, 4, (400_000, 13)).astype(np.float32)
    i = rng.integers(-400_000, 400_000, (30_000, 13))
    i[::7] = i[1::7][: len(i[::7])]  # many updates at a few targets: ties among updates
    u = rng.integers(-3, 4, i.shape).astype(np.float32)
    g = rng.standard_normal(d.shape).astype(np.float32)
    gd, gu = _extremum_three_ways(monkeypatch, g, d, i, u, 0, reduction)
    assert (gu != 0).any() and (gu == 0).any() and (gd == 0).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("reduction", ["max", "min"])
def test_extremum_backward_rows_of_more_than_sixteen_fibers(monkeypatch, reduction, index_dtype, dtype):
    """float32 and float64 rows of 40 fibers, counted sixteen updates at a time where the CPU
    allows (16, 16 and 8 on one thread; 20 a thread, 16 and 4, on two), with the targets of a
    later row asked for (the result, 9.6 or 19.2 MB, beyond the cache), ties, NaN and negative
    indices: the same bits as one by one and as the NumPy way (_extremum_three_ways)."""
    rng = np.random.default_rng(47)
    d = rng.integers(-3, 4, (60_000, 40)).astype(dtype)
    u = rng.integers(-3, 4, (120_000, 40)).astype(dtype)
    d[rng.random(d.shape) < 0.01] = np.nan
    u[rng.random(u.shape) < 0.01] = np.nan
    i = rng.integers(-60_000, 60_000, u.shape).astype(index_dtype)
    g = rng.standard_normal(d.shape).astype(dtype)
    gd, gu = _extremum_three_ways(monkeypatch, g, d, i, u, 0, reduction)
    assert (gu != 0).any() and (gu == 0).any() and (gd != 0).any() and (gd == 0).any()


# Values of each type among which ties are decided: zeros of both signs, NaNs of several
# payloads and both signs, infinity, the smallest subnormals, and neighbours that a narrower type
# would merge (float64 ones 2^-40 apart, which float32 rounds to one value).
_TIE_POOLS = {
    np.dtype(np.float64): np.array([0.0, -0.0, 1.0, 1.0 + 2.0**-40, 1.0 - 2.0**-40, 3.0, np.inf,
                                    np.float64(np.uint64(0x7FF8000000000001).view(np.float64)), np.nan]),
    np.dtype(np.float32): np.array([0x00000000, 0x80000000, 0x3F800000, 0x3F800001, 0x7F800000, 0x00000001,
                                    0x7FC00000, 0x7F800001, 0xFFC00001], np.uint32).view(np.float32),
    np.dtype(np.float16): np.array([0x0000, 0x8000, 0x3C00, 0x3C01, 0x7C00, 0x0001, 0x8001,
                                    0x7E00, 0x7C01, 0xFE00, 0xFFFF], np.uint16).view(np.float16),
    BF16: np.array([0x0000, 0x8000, 0x3F80, 0x3F81, 0x7F80, 0x0001, 0x8001,
                    0x7FC0, 0x7F81, 0xFFC0, 0xFFFF], np.uint16).view(BF16),
}


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", list(_TIE_POOLS), ids=str)
def test_extremum_backward_ties_are_equality_in_the_data_type(monkeypatch, reduction, dtype):
    """A tie is equality in the data's own type (SPEC section 5): zeros of either sign tie, a NaN
    ties any NaN whatever its payload and sign, and float64 values that differ tie with nothing
    but themselves, though float32 would round them to one value. Data and updates drawn from
    `_TIE_POOLS`, against the oracle (float64), every native way and the NumPy way alike."""
    rng = np.random.default_rng(67)
    pool = _TIE_POOLS[dtype]
    d = pool[rng.integers(0, pool.size, (60, 20))]
    i = rng.integers(-60, 60, (130, 20))
    u = pool[rng.integers(0, pool.size, i.shape)]
    g = np.full(d.shape, 840, dtype)  # 840 / n is exact for every n up to 8
    got = _extremum_three_ways(monkeypatch, g, d, i, u, 0, reduction)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        want = oracle.scatter_elements_vjp(g, d, i, u, 0, reduction)
    eps = float(ml_dtypes.finfo(dtype).eps) if dtype == BF16 else float(np.finfo(dtype).eps)
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=2 * eps, atol=0)
    # Shares were handed out, and withheld.
    assert (got[1] != 0).any() and (got[1] == 0).any() and (got[0] != 0).any() and (got[0] == 0).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("lane", [3, 21, 39])
def test_extremum_backward_names_a_bad_index_in_a_row_of_sixteen(rows, lane, dtype):
    """An index out of bounds in the first, second or last sixteen of a row of 40 float32 or
    float64 updates (the row then goes one by one): an IndexError that names it, with the rows
    counted sixteen at a time or not."""
    rng = np.random.default_rng(53)
    d = rng.standard_normal((60_000, 40)).astype(dtype)
    i = rng.integers(-60_000, 60_000, (120_000, 40))
    i[70_001, lane] = 60_000
    u = rng.standard_normal(i.shape).astype(dtype)
    before = _core.set_ties_by_rows(rows)
    try:
        with pytest.raises(IndexError, match=rf"index 60000 at indices\[70001, {lane}\]"):
            sx.scatter_elements_vjp(d, d, i, u, 0, "max")
    finally:
        _core.set_ties_by_rows(before)


@pytest.mark.parametrize("ishape", [(0, 3, 0), (0, 3, 4), (2, 3, 0)])
def test_mul_backward_with_empty_indices(ishape):
    """No update: dD = G, dU is empty (empty arrays may carry any strides)."""
    rng = np.random.default_rng(10)
    d = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g = rng.standard_normal((2, 3, 4)).astype(np.float32)
    i = np.zeros(ishape, np.int64)
    # Empty, with the strides of a 3x4 slab (as the fuzz found): NumPy keeps them.
    updates = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), ishape, (12, 4, 4))
    gd, gu = sx.scatter_elements_vjp(g, d, i, updates, 0, "mul")
    np.testing.assert_array_equal(gd, g)
    assert gu.shape == ishape


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bad", [64, -65])
@pytest.mark.parametrize("reduction", ["mul", "max", "min"])
def test_backward_names_an_index_out_of_bounds_met_by_its_walks(reduction, bad, index_dtype):
    """Rows of fibers contiguous along them (the plain walks of the backward of "mul"), with
    negative indices among the valid ones and one out of bounds deep inside: an IndexError that
    names it."""
    rng = np.random.default_rng(23)
    d = rng.standard_normal((4, 64, 32)).astype(np.float32)
    i = rng.integers(-64, 64, (4, 50, 32)).astype(index_dtype)
    i[2, 17, 5] = bad
    u = rng.standard_normal(i.shape).astype(np.float32)
    g = rng.standard_normal(d.shape).astype(np.float32)
    with pytest.raises(IndexError, match=rf"index {bad} at indices\[2, 17, 5\]"):
        sx.scatter_elements_vjp(g, d, i, u, 1, reduction)


@pytest.mark.parametrize("bad", [70_000, -70_001])
def test_mul_backward_beyond_the_cache_names_a_bad_index(bad):
    """The walks of the backward of "mul" over rows of fibers whose P and S lie beyond the cache
    (2.2 MB), in grad_data, with negative indices among the valid ones and one out of bounds: an
    IndexError that names it."""
    rng = np.random.default_rng(24)
    d = rng.standard_normal((70_000, 8)).astype(np.float32)
    i = rng.integers(-70_000, 70_000, (400, 8))
    i[123, 5] = bad
    u = rng.standard_normal(i.shape).astype(np.float32)
    g = rng.standard_normal(d.shape).astype(np.float32)
    with pytest.raises(IndexError, match=rf"index {bad} at indices\[123, 5\]"):
        sx.scatter_elements_vjp(g, d, i, u, 0, "mul")


@pytest.mark.parametrize("streaming_outputs", ["off", "wide", "narrow"], indirect=True)
@pytest.mark.parametrize(
    "dtype, data_shape, index_shape",
    [
        (np.float32, (300, 37), (300, 20)),  # rows of 148 bytes: streamed out from a misaligned start
        (np.complex64, (200, 64), (200, 90)),  # more updates than targets: duplicates in every row
        (np.float64, (3, 9000), (3, 50)),  # rows of 72 KB, longer than a staged row
        (np.float64, (3, 100), (3, 9000)),  # 72 KB of update gradients a row: the row staged, they not
    ],
)
def test_none_backward_of_rows_staged_or_not(dtype, data_shape, index_shape, streaming_outputs):
    """The backward of "none" along a last axis, against the literal oracle, bitwise the same on
    1, 2 and 3 threads. With streaming outputs (but "off"), each row and its update gradients
    are staged in a per-thread buffer and written out by streaming stores, as in a large call
    (normally above 32 MB in all)."""
    rng = np.random.default_rng(29)
    size = data_shape[1]
    d = rng.standard_normal(data_shape).astype(dtype)
    g = (rng.standard_normal(data_shape) + (1j * rng.standard_normal(data_shape) if dtype == np.complex64 else 0))
    g = g.astype(dtype)
    i = rng.integers(-size, size, index_shape)
    u = rng.standard_normal(index_shape).astype(dtype)
    with paths_taken() as taken:
        got = _vjp_on_1_2_3_threads(g, d, i, u, 1, "none")
    # Streamed, a row of at most 64 KB (kRowStageBytes) is staged, and its update gradients
    # beside it where they too fit.
    itemsize = np.dtype(dtype).itemsize
    staged = streaming_outputs and size * itemsize <= 64 << 10
    updates_staged = staged and index_shape[1] * itemsize <= 64 << 10
    assert taken == {**({"none_backward_staged": 3} if staged else {}),
                     **({"none_backward_staged_updates": 3} if updates_staged else {})}
    for a, b in zip(got, oracle.scatter_elements_vjp(g, d, i, u, 1, "none")):
        np.testing.assert_array_equal(a, b)


def test_none_backward_staged_names_a_bad_index(streaming_outputs):
    rng = np.random.default_rng(31)
    g = rng.standard_normal((64, 100)).astype(np.float32)
    i = rng.integers(-100, 100, (64, 40))
    i[50, 7] = 100
    with pytest.raises(IndexError, match=r"index 100 at indices\[50, 7\]"):
        sx.scatter_elements_vjp(g, g, i, np.ones(i.shape, np.float32), 1, "none")
