"""The implementations that ``scatterx bench`` compares: scatterx and its peers, as a registry.

Every implementation has one signature: ``prepare(case, inputs, threads)`` returns a
`Prepared` whose ``run()`` performs one call of the case and whose ``to_numpy(result)`` turns
that call's result into NumPy arrays for the correctness check. Everything a user would do once
(converting arrays to tensors, building an onnxruntime session) happens in ``prepare``, outside
the timing; everything a user must do per call (copying data before an in-place NumPy routine,
building the index tuple of ``ufunc.at``) happens in ``run``. scatterx, NumPy and PyTorch
receive an expanded index (message passing) as the stride-0 view a user would pass (PyTorch has
a fast path for it); onnxruntime, which needs a contiguous input, reads it materialised. An
implementation that does not define a case raises `Unsupported` with the reason, which the table
prints as a note.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._bench_cases import Case, Inputs
from ._rules import bfloat16

_BF16 = bfloat16()


class Unsupported(Exception):
    """The implementation does not define this case; the message says why."""


@dataclass
class Prepared:
    run: Callable[[], Any]
    to_numpy: Callable[[Any], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class Impl:
    """One implementation.

    `sequential` marks an implementation that applies updates one by one in row-major order,
    as scatterx does: its floating-point sums and products must then agree bit for bit.
    `requires` names the modules that must be importable; otherwise the whole column is
    skipped with a note.
    """

    name: str
    prepare: Callable[[Case, Inputs, int], Prepared]
    requires: tuple[str, ...] = ()
    sequential: bool = False

    def missing(self) -> str | None:
        """The first required module that is not installed, or None."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return module
        return None


def _as_tuple(result) -> tuple[np.ndarray, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


# -- scatterx --------------------------------------------------------------------------------


def _prepare_scatterx(case: Case, inputs: Inputs, threads: int) -> Prepared:
    import scatterx as sx

    sx.set_num_threads(threads)
    d, i, u, g, axis = inputs.data, inputs.expanded_indices(), inputs.updates, inputs.grad, case.axis
    if case.op == "scatter":
        return Prepared(lambda: sx.scatter_elements(d, i, u, axis, case.reduction), _as_tuple)
    if case.op == "gather":
        return Prepared(lambda: sx.gather_elements(d, i, axis), _as_tuple)
    if case.op == "scatter_vjp":
        if not hasattr(sx, "scatter_elements_vjp"):
            raise Unsupported("this scatterx has no scatter_elements_vjp")
        # Like PyTorch's backward, which reuses the forward result it saved, max/min get it.
        y = sx.scatter_elements(d, i, u, axis, case.reduction) if case.reduction in ("max", "min") else None
        return Prepared(lambda: sx.scatter_elements_vjp(g, d, i, u, axis, case.reduction, output=y), _as_tuple)
    if not hasattr(sx, "gather_elements_vjp"):
        raise Unsupported("this scatterx has no gather_elements_vjp")
    return Prepared(lambda: sx.gather_elements_vjp(g, d.shape, i, axis), _as_tuple)


# -- NumPy -----------------------------------------------------------------------------------

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _index_tuple(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """What a user builds for ``ufunc.at``: open ``arange`` grids, with `indices` on `axis`."""
    grids = []
    for d, n in enumerate(indices.shape):
        if d == axis:
            grids.append(indices)
        else:
            shape = [1] * indices.ndim
            shape[d] = n
            grids.append(np.arange(n).reshape(shape))
    return tuple(grids)


def _prepare_numpy(case: Case, inputs: Inputs, threads: int) -> Prepared:
    d, i, u, axis = inputs.data, inputs.expanded_indices(), inputs.updates, case.axis
    if case.op in ("scatter_vjp", "gather_vjp"):
        raise Unsupported("NumPy has no automatic differentiation")
    if case.op == "gather":
        return Prepared(lambda: np.take_along_axis(d, i, axis), _as_tuple)
    if case.reduction == "none":
        def run():
            out = d.copy()
            np.put_along_axis(out, i, u, axis)
            return out
    else:
        ufunc = _UFUNCS[case.reduction]

        def run():
            out = d.copy()
            ufunc.at(out, _index_tuple(i, axis), u)
            return out
    return Prepared(run, _as_tuple)


# -- PyTorch ---------------------------------------------------------------------------------

_TORCH_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}


def _to_torch(arr: np.ndarray):
    import torch

    if arr.dtype == _BF16:
        return torch.from_numpy(arr.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def _from_torch(t) -> np.ndarray:
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_BF16)
    return t.numpy()


def _torch_forward(case: Case):
    import torch

    axis = case.axis
    if case.op in ("gather", "gather_vjp"):
        return lambda d, i, u: torch.gather(d, axis, i)
    if case.reduction == "none":
        return lambda d, i, u: torch.scatter(d, axis, i, u)
    if case.reduction == "add":
        return lambda d, i, u: torch.scatter_add(d, axis, i, u)
    reduce = _TORCH_REDUCE[case.reduction]
    return lambda d, i, u: torch.scatter_reduce(d, axis, i, u, reduce, include_self=True)


def _prepare_torch(case: Case, inputs: Inputs, threads: int) -> Prepared:
    import torch

    torch.set_num_threads(threads)
    forward = _torch_forward(case)
    d = _to_torch(inputs.data)
    if inputs.index_rows is not None and inputs.index_rows.dtype == np.int64:
        # As PyTorch Geometric passes it; ATen has a fast path for this stride-0 index. That
        # path misreads int32 (PyTorch 2.13: gather returns wrong rows, scatter_add raises
        # "expected scalar type Long"), so int32 indices stay materialised.
        i = _to_torch(inputs.index_rows).expand(inputs.indices.shape)
    else:
        i = _to_torch(inputs.indices)
    u = None if inputs.updates is None else _to_torch(inputs.updates)

    def to_numpy(result):
        return tuple(_from_torch(t) for t in _as_tuple(result))

    if case.op in ("scatter", "gather"):
        return Prepared(lambda: forward(d, i, u), to_numpy)
    # Backward only: the forward graph is built once here, as a training step would have it.
    wrt = [d.requires_grad_()]
    if u is not None:
        wrt.append(u.requires_grad_())
    y = forward(d, i, u)
    g = _to_torch(inputs.grad)
    return Prepared(lambda: torch.autograd.grad(y, wrt, g, retain_graph=True), to_numpy)


# -- onnxruntime -----------------------------------------------------------------------------


def _onnx_type(dtype: np.dtype) -> int:
    from onnx import TensorProto

    if dtype == _BF16:
        return TensorProto.BFLOAT16
    return {
        "float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
        "int32": TensorProto.INT32, "int64": TensorProto.INT64,
    }[dtype.name]


def _one_node_model(case: Case, inputs: Inputs) -> bytes:
    from onnx import helper

    elem, ind = _onnx_type(inputs.data.dtype), _onnx_type(inputs.indices.dtype)
    names = ["data", "indices"] + (["updates"] if case.op == "scatter" else [])
    types = [elem, ind, elem]
    attrs = {"axis": case.axis}
    if case.op == "scatter":
        attrs["reduction"] = case.reduction
    node = helper.make_node(
        "ScatterElements" if case.op == "scatter" else "GatherElements", names, ["y"], **attrs
    )
    graph = helper.make_graph(
        [node], case.name,
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _ort_value(arr: np.ndarray):
    import onnxruntime as ort

    if arr.dtype == _BF16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(np.uint16), _onnx_type(arr.dtype))
    return ort.OrtValue.ortvalue_from_numpy(arr)


def _prepare_onnxruntime(case: Case, inputs: Inputs, threads: int) -> Prepared:
    import onnxruntime as ort

    if case.op not in ("scatter", "gather"):
        raise Unsupported("onnxruntime (inference) has no gradients")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(
        _one_node_model(case, inputs), options, providers=["CPUExecutionProvider"]
    )
    names = ["data", "indices", "updates"]
    arrays = [inputs.data, inputs.indices] + ([inputs.updates] if case.op == "scatter" else [])
    # onnxruntime decides support by type, but 1.32 crashes the process (SIGFPE) instead of
    # raising "not supported" when the real inputs are large and it has several threads (e.g.
    # bfloat16 max, 100000x32): ask with one-element inputs first.
    tiny = [np.zeros((1,) * a.ndim, a.dtype) for a in arrays]
    _ort_call(session, dict(zip(names, map(_ort_value, tiny))))
    # Inputs and the output are bound to NumPy buffers once: no conversion or allocation per
    # call is charged to onnxruntime (the output buffer is even reused, which favours it).
    out = np.empty(inputs.output_shape, inputs.data.dtype)
    binding = session.io_binding()
    for name, arr in zip(names, arrays):
        binding.bind_ortvalue_input(name, _ort_value(arr))
    binding.bind_ortvalue_output("y", _ort_value(out))

    def run():
        _ort_call(session, binding)
        return out

    return Prepared(run, lambda result: (result.copy(),))


def _ort_call(session, feeds) -> None:
    """Runs `session` on an io binding or a dict of OrtValues; `Unsupported` for a missing kernel."""
    try:
        if isinstance(feeds, dict):
            session.run_with_ort_values(["y"], feeds)
        else:
            session.run_with_iobinding(feeds)
    except Exception as exc:  # onnxruntime raises its own Fail/RuntimeException types
        message = str(exc)
        if "not supported" in message or "NOT_IMPLEMENTED" in message:
            raise Unsupported(message.split("Status Message:")[-1].strip()) from None
        raise


IMPLEMENTATIONS: tuple[Impl, ...] = (
    Impl("scatterx", _prepare_scatterx, sequential=True),
    Impl("numpy", _prepare_numpy, sequential=True),
    Impl("torch", _prepare_torch, requires=("torch",)),
    Impl("onnxruntime", _prepare_onnxruntime, requires=("onnxruntime", "onnx")),
)
