"""scatterx.torch: autograd Functions on CPU tensors, checked with torch.autograd.gradcheck."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import scatterx as sx

torch = pytest.importorskip("torch")
st = pytest.importorskip("scatterx.torch")

REDUCTIONS = ("none", "add", "mul", "max", "min")


def test_importing_scatterx_does_not_import_torch():
    code = "import sys, scatterx; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _generic(reduction, dtype=torch.float64, seed=0):
    """Distinct random values (no ties) and indices with duplicates (negative ones included)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(5, 4, 3, dtype=dtype, generator=g)
    i = torch.randint(-4, 4, (5, 7, 3), generator=g)
    u = torch.randn(5, 7, 3, dtype=dtype, generator=g)
    if reduction == "mul":
        u = 0.5 + torch.rand(5, 7, 3, dtype=torch.float64, generator=g).to(dtype)
    return d.requires_grad_(), i, u.requires_grad_()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck_float64(reduction):
    d, i, u = _generic(reduction)
    assert torch.autograd.gradcheck(lambda d, u: st.scatter_elements(d, i, u, 1, reduction), (d, u))


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_gradcheck_complex128(reduction):
    d, i, u = _generic(reduction, torch.complex128, seed=1)
    assert torch.autograd.gradcheck(lambda d, u: st.scatter_elements(d, i, u, -2, reduction), (d, u))


def test_gradcheck_gather():
    d = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    i = torch.randint(-6, 6, (3, 9))
    assert torch.autograd.gradcheck(lambda d: st.gather_elements(d, i, 1), (d,))
    dc = torch.randn(4, 6, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(lambda d: st.gather_elements(d, i, 1), (dc,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradients_equal_the_vjp_times_lda(reduction):
    d, i, u = _generic(reduction, torch.float32, seed=2)
    g = torch.randn(d.shape)
    y = st.scatter_elements(d, i, u, 1, reduction, lda_coeff=-2.0)
    np.testing.assert_array_equal(y.detach().numpy(), sx.scatter_elements(d.detach().numpy(), i.numpy(), u.detach().numpy(), 1, reduction))
    y.backward(g)
    want_d, want_u = sx.scatter_elements_vjp(g.numpy(), d.detach().numpy(), i.numpy(), u.detach().numpy(), 1, reduction)
    np.testing.assert_array_equal(d.grad.numpy(), -2 * want_d)
    np.testing.assert_array_equal(u.grad.numpy(), -2 * want_u)


def test_agrees_with_torch_scatter_add_and_gather():
    d, i, u = _generic("add", seed=3)
    i = i % 4
    g = torch.randn(d.shape, dtype=torch.float64)
    ours = torch.autograd.grad(st.scatter_elements(d, i, u, 1, "add"), (d, u), g)
    theirs = torch.autograd.grad(torch.scatter_add(d, 1, i, u), (d, u), g)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    gg = torch.randn(i.shape, dtype=torch.float64)
    (ours,) = torch.autograd.grad(st.gather_elements(d, i, 1, lda_coeff=0.5), d, gg)
    (theirs,) = torch.autograd.grad(torch.gather(d, 1, i), d, gg)
    torch.testing.assert_close(ours, 0.5 * theirs)


def test_only_requested_gradients():
    d, i, u = _generic("mul", seed=4)
    d.requires_grad_(False)
    y = st.scatter_elements(d, i, u, 1, "mul")
    y.sum().backward()  # the incoming gradient is an expanded (stride-0) tensor
    assert d.grad is None and u.grad is not None
    _, want_u = sx.scatter_elements_vjp(np.ones(d.shape), d.numpy(), i.numpy(), u.detach().numpy(), 1, "mul")
    np.testing.assert_allclose(u.grad.numpy(), want_u, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_tensors(dtype):
    d, i, u = _generic("max", dtype, seed=5)
    g = torch.randn(d.shape).to(dtype)
    y = st.scatter_elements(d, i, u, 1, "max")
    assert y.dtype == dtype
    y.backward(g)
    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == torch.bfloat16 else np.dtype(np.float16)

    def arr(t):
        return t.detach().float().numpy().astype(np_dtype)

    want_d, want_u = sx.scatter_elements_vjp(arr(g), arr(d), i.numpy(), arr(u), 1, "max")
    assert d.grad.dtype == u.grad.dtype == dtype
    np.testing.assert_array_equal(arr(d.grad), want_d)
    np.testing.assert_array_equal(arr(u.grad), want_u)


def test_inputs_are_viewed_not_copied():
    from scatterx.torch import _to_numpy, _to_tensor

    base = torch.randn(6, 8)
    view = base[1::2, ::3]  # non-contiguous, with an offset
    arr = _to_numpy(view, "data")
    assert arr.ctypes.data == view.data_ptr() and arr.strides == tuple(4 * s for s in view.stride())
    bf = torch.randn(4, 5).bfloat16()[:, 1:]
    arr = _to_numpy(bf, "data")
    assert arr.dtype == np.dtype(ml_dtypes.bfloat16) and arr.ctypes.data == bf.data_ptr()
    result = np.arange(4.0)
    assert _to_tensor(result).data_ptr() == result.ctypes.data


def test_non_contiguous_and_conjugated_inputs():
    d = torch.randn(4, 6, dtype=torch.complex128)
    dt = d.t()  # transposed view
    u = torch.randn(6, 2, dtype=torch.complex128).conj()  # conjugate bit set
    i = torch.tensor([[0, 3], [1, 1], [2, 0], [3, 3], [0, 1], [1, 2]])
    got = st.scatter_elements(dt, i, u, 1, "add")
    want = sx.scatter_elements(dt.numpy(), i.numpy(), u.resolve_conj().numpy(), 1, "add")
    np.testing.assert_array_equal(got.numpy(), want)


def test_in_place_change_before_backward_is_reported():
    d, i, u = _generic("mul", seed=6)
    leaf = u.detach().clone().requires_grad_()
    work = leaf * 1.0
    y = st.scatter_elements(d, i, work, 1, "mul")
    with torch.no_grad():
        work.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_errors():
    d = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(IndexError, match="index 3 at indices"):
        st.scatter_elements(d, torch.tensor([3]), torch.ones(1, dtype=torch.float64), 0, "add")
    with pytest.raises(TypeError, match="lda_coeff must be a real number"):
        st.gather_elements(d, torch.tensor([0]), lda_coeff="1")
    with pytest.raises(ValueError, match="lda_coeff must be finite"):
        st.scatter_elements(d, torch.tensor([0]), torch.ones(1, dtype=torch.float64), lda_coeff=float("nan"))
    ints = torch.zeros(3, dtype=torch.int64)
    y = st.scatter_elements(ints, torch.tensor([1]), torch.tensor([5]), 0, "add")
    assert y.tolist() == [0, 5, 0] and not y.requires_grad
    y = st.scatter_elements(d, torch.tensor([1]), torch.ones(1, dtype=torch.float64), 0, "none")
    with pytest.raises(RuntimeError, match="once_differentiable|double backward|does not require grad"):
        (g,) = torch.autograd.grad(y.sum(), d, create_graph=True)
        torch.autograd.grad(g.sum(), d)
