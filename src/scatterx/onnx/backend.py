"""An ``onnx.backend.base.Backend`` over `Session`, so that ONNX's backend test suite can drive scatterx.

Example
-------
>>> import onnx.backend.test
>>> import scatterx.onnx.backend as backend
>>> tests = onnx.backend.test.BackendTest(backend, __name__).include("test_scatter_elements")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ._session import Session


class ScatterxRep(BackendRep):
    """A prepared model: `run` takes the inputs in graph order (or by name) and returns the outputs in order."""

    def __init__(self, session: Session) -> None:
        self.session = session
        graph = session.graph
        self._feed_names = [n for n in graph._inputs if n not in graph._initializers]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            names = self.session.input_names if len(inputs) > len(self._feed_names) else self._feed_names
            if len(inputs) != len(names):
                raise ValueError(f"{len(inputs)} inputs given, the model takes {len(names)}: {names}")
            feeds = dict(zip(names, inputs))
        outputs = self.session.run(feeds)
        return tuple(outputs[n] for n in self.session.output_names)


class ScatterxBackend(Backend):
    """CPU backend: scatterx kernels for ScatterElements/GatherElements/Scatter, onnx.reference for the rest."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> ScatterxRep:
        if not cls.supports_device(device):
            raise ValueError(f"scatterx runs on the CPU only, not on {device!r}")
        return ScatterxRep(Session(model))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None, **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run one node on `inputs` (one array per non-empty node input, in order)."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        names = [n for n in node.input if n]
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.shape(a))
            for n, a in zip(names, inputs)
        ]
        outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = helper.make_graph([node], "run_node", graph_inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
        model = onnx.shape_inference.infer_shapes(model)
        return cls.prepare(model, device).run([np.asarray(a) for a in inputs])


prepare = ScatterxBackend.prepare
run_model = ScatterxBackend.run_model
run_node = ScatterxBackend.run_node
supports_device = ScatterxBackend.supports_device
is_compatible = ScatterxBackend.is_compatible
