"""The graph: tensors and nodes added one at a time, each checked when it is added (SPEC section 6)."""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from .._rules import (
    check_reduction,
    check_reduction_for_dtype,
    dtype_category,
    is_float_dtype,
    normalize_axis,
)
from . import _opset
from ._types import Shape, Tensor, as_dtype, as_shape, from_type_proto, type_string, value_info

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_BFLOAT16 = as_dtype("bfloat16")
# Integer initializers and constants up to this size are handed to shape inference, so that
# shape arguments (Reshape, Expand, Unsqueeze axes, ...) give static output shapes.
_KNOWN_VALUE_LIMIT = 4096

TensorLike = Tensor | str | np.ndarray


@dataclass
class Node:
    """One node of a graph: its ONNX proto and the training parameters that are not ONNX attributes."""

    proto: onnx.NodeProto
    training: bool = True
    lda_coeff: float = 1.0
    # The default-domain opset version the node was defined against (see _opset).
    defined_at: int = _opset.LATEST

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def op_type(self) -> str:
        return self.proto.op_type


@dataclass
class Imported:
    """What a model brings that the graph API does not build: kept as it is for export."""

    opset_import: dict[str, int]
    ir_version: int
    functions: list[onnx.FunctionProto] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    value_info: list[onnx.ValueInfoProto] = field(default_factory=list)
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    graph_doc_string: str = ""
    # The declared types of the model's inputs and outputs.
    types: dict[str, onnx.TypeProto] = field(default_factory=dict)


def _fmt(shape: Shape | None) -> str:
    if shape is None:
        return "(unknown)"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_lda(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"lda_coeff must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"lda_coeff must be finite, got {value}")
    return value


def _check_training(value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"training must be a bool, got {type(value).__name__}")
    return bool(value)


class Graph:
    """An ONNX model architecture built node by node: graph in, node appended, graph out.

    Every node is checked when it is added (types, ranks, static dimensions, attributes,
    unique names) and its outputs get inferred types and shapes. Every node carries the two
    parameters that ONNX has no attribute for: ``training`` (False: frozen, no gradient flows
    through it) and ``lda_coeff`` (scales every gradient the node sends to its inputs); they
    travel in the model's ``metadata_props``.

    Parameters
    ----------
    name : str
        The ONNX graph name.

    Examples
    --------
    >>> g = Graph("mp")
    >>> x = g.input("x", "float32", ("N", 4))
    >>> idx = g.input("idx", "int64", ("E", 4))
    >>> msg = g.input("msg", "float32", ("E", 4))
    >>> y = g.scatter_elements(x, idx, msg, reduction="add", name="aggregate", output_names=["y"])
    >>> g.output(y)
    >>> model = g.to_onnx()    # opset 16: add needs it
    """

    def __init__(self, name: str = "graph") -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, got {type(name).__name__}")
        self.name = name
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[str] = []
        self._initializers: dict[str, np.ndarray] = {}
        self._trainable: set[str] = set()
        self._outputs: list[str] = []
        self._nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}
        self._known_values: dict[str, np.ndarray] = {}
        self._imported: Imported | None = None
        # Bumped on every structural change, so that a Session knows to rebuild.
        self._revision = 0

    # -- tensors -------------------------------------------------------------------------------

    def _new_tensor(self, name: str, dtype: np.dtype | None, shape: Shape | None) -> Tensor:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tensor name must be a non-empty string, got {name!r}")
        if name in self._tensors:
            raise ValueError(f"tensor name {name!r} is already used in graph {self.name!r}")
        tensor = Tensor(self, name, dtype, shape)
        self._tensors[name] = tensor
        self._revision += 1
        return tensor

    def input(self, name: str, dtype: object, shape: Sequence[int | str | None]) -> Tensor:
        """Declare a graph input; dims are ints, None (unknown) or symbolic names (str)."""
        tensor = self._new_tensor(name, as_dtype(dtype), as_shape(shape))
        self._inputs.append(name)
        return tensor

    def initializer(self, name: str, array: object, trainable: bool = True) -> Tensor:
        """A constant tensor of the graph; ``trainable`` ones receive gradients in a training Session."""
        arr = self._as_initializer_array(array)
        tensor = self._new_tensor(name, arr.dtype, arr.shape)
        self._initializers[name] = arr
        if _check_training(trainable):
            self._trainable.add(name)
        if arr.dtype.kind in "iu" and arr.size <= _KNOWN_VALUE_LIMIT:
            self._known_values[name] = arr
        return tensor

    def set_initializer(self, name: str, array: object) -> None:
        """Replace an initializer's value (same dtype and shape); a Session sees it at its next run.

        Shapes already inferred from the old value (the shape input of a Reshape, say) are not
        inferred again.
        """
        if name not in self._initializers:
            raise KeyError(f"graph {self.name!r} has no initializer named {name!r}")
        old = self._initializers[name]
        arr = self._as_initializer_array(array)
        if arr.dtype != old.dtype:
            raise TypeError(f"initializer {name!r} has dtype {old.dtype}, got {arr.dtype}")
        if arr.shape != old.shape:
            raise ValueError(f"initializer {name!r} has shape {old.shape}, got {arr.shape}")
        self._initializers[name] = arr
        if name in self._known_values:
            self._known_values[name] = arr

    @staticmethod
    def _as_initializer_array(array: object) -> np.ndarray:
        arr = np.array(array)
        if arr.dtype.kind in "USOT":
            arr = arr.astype(object)
        as_dtype(arr.dtype)
        arr.flags.writeable = False
        return arr

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no tensor named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def output(self, *tensors: Tensor | str) -> Graph:
        """Mark tensors as graph outputs, in order; returns the graph."""
        for t in tensors:
            name = self._resolve(t, "graph output").name
            if name in self._outputs:
                raise ValueError(f"tensor {name!r} is already an output of graph {self.name!r}")
            self._outputs.append(name)
        self._revision += 1
        return self

    @property
    def inputs(self) -> list[Tensor]:
        return [self._tensors[n] for n in self._inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return [self._tensors[n] for n in self._outputs]

    @property
    def initializers(self) -> dict[str, np.ndarray]:
        """Name -> current value (read-only arrays)."""
        return dict(self._initializers)

    @property
    def trainable(self) -> list[str]:
        """Names of the trainable initializers, in definition order.

        Only floating-point initializers can be trained: integer ones (indices, shapes) are
        constants whatever their flag says.
        """
        return [n for n, a in self._initializers.items() if n in self._trainable and is_float_dtype(a.dtype)]

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def _resolve(self, t: object, what: str) -> Tensor:
        if isinstance(t, Tensor):
            if t.graph is not self:
                raise ValueError(f"{what}: tensor {t.name!r} belongs to another graph")
            return t
        if isinstance(t, str):
            if t not in self._tensors:
                raise ValueError(f"{what}: graph {self.name!r} has no tensor named {t!r}")
            return self._tensors[t]
        raise TypeError(f"{what}: expected a Tensor or a tensor name, got {type(t).__name__}")

    @contextlib.contextmanager
    def _adding(self) -> Iterator[None]:
        """Undo the initializers made from array operands when the node is refused."""
        before = set(self._tensors)
        try:
            yield
        except BaseException:
            for name in [n for n in self._tensors if n not in before]:
                del self._tensors[name]
                self._initializers.pop(name, None)
                self._known_values.pop(name, None)
                self._trainable.discard(name)
            raise

    # -- nodes ---------------------------------------------------------------------------------

    def _node_name(self, name: str | None, op_type: str) -> str:
        if name is None:
            k = len(self._nodes)
            while f"{op_type}_{k}" in self._by_name:
                k += 1
            return f"{op_type}_{k}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"a node name must be a non-empty string, got {name!r}")
        if name in self._by_name:
            raise ValueError(f"node name {name!r} is already used in graph {self.name!r}")
        return name

    def _output_names(self, node: str, output_names: object, n_outputs: int) -> list[str]:
        if output_names is None:
            names = [f"{node}_output_{i}" for i in range(n_outputs)]
        else:
            names = [output_names] if isinstance(output_names, str) else list(output_names)
            if len(names) != n_outputs:
                raise ValueError(f"node {node!r}: {len(names)} output names for {n_outputs} outputs")
        if len(set(names)) != len(names):
            raise ValueError(f"node {node!r}: output names {names} are not distinct")
        for n in names:
            if not isinstance(n, str) or not n:
                raise ValueError(f"node {node!r}: an output name must be a non-empty string, got {n!r}")
            if n in self._tensors:
                raise ValueError(f"node {node!r}: tensor name {n!r} is already used in graph {self.name!r}")
        return names

    def _operand(self, node: str, op_type: str, role: str, value: object) -> Tensor:
        """A tensor handle or name; an array becomes a non-trainable initializer named after the node."""
        if isinstance(value, (Tensor, str)):
            return self._resolve(value, f"node {node!r} ({op_type}) input {role!r}")
        if isinstance(value, (np.ndarray, list, tuple, int, float, complex, np.generic)):
            try:
                return self.initializer(f"{node}_{role}", value, trainable=False)
            except (TypeError, ValueError) as e:
                raise type(e)(f"node {node!r} ({op_type}) input {role!r}: {e}") from None
        raise TypeError(
            f"node {node!r} ({op_type}) input {role!r}: expected a Tensor, a tensor name or an array, "
            f"got {type(value).__name__}"
        )

    def _append(self, proto: onnx.NodeProto, outputs: list[tuple[str, object, object]],
                training: bool, lda_coeff: float, defined_at: int) -> list[Tensor]:
        node = Node(proto, training, lda_coeff, defined_at)
        tensors = [self._new_tensor(n, dt, sh) for n, dt, sh in outputs]
        self._nodes.append(node)
        self._by_name[proto.name] = node
        return tensors

    def _defined_opset(self) -> int:
        if self._imported is None:
            return _opset.LATEST
        return self._imported.opset_import.get("", self._imported.opset_import.get("ai.onnx", _opset.LATEST))

    def scatter_elements(
        self, data: TensorLike, indices: TensorLike, updates: TensorLike, axis: int = 0,
        reduction: str = "none", *, name: str | None = None, output_names: object = None,
        training: bool = True, lda_coeff: float = 1.0,
    ) -> Tensor:
        """Append an ONNX ScatterElements node; returns its output tensor.

        Checked now, with errors that name the node: data and updates of one type T that
        scatterx supports (TypeError), indices int32 or int64 (TypeError), the reduction and
        whether T defines it, equal ranks, updates shaped like indices, indices fitting data in
        every known dimension except `axis`, the axis range (ValueError). The output has data's
        type and shape. The export opset follows the reduction (none: 11, or 13 with bfloat16;
        add/mul: 16; max/min: 18).
        """
        with self._adding():
            op = "ScatterElements"
            node = self._node_name(name, op)
            d = self._operand(node, op, "data", data)
            i = self._operand(node, op, "indices", indices)
            u = self._operand(node, op, "updates", updates)
            try:
                training, lda_coeff = _check_training(training), _check_lda(lda_coeff)
                reduction = check_reduction(reduction)
                self._check_elementwise(d, i, axis)
                if d.dtype is not None and u.dtype is not None and d.dtype != u.dtype:
                    raise TypeError(
                        f"data and updates must have the same dtype: data is {d.dtype}, updates is {u.dtype}"
                    )
                if d.dtype is not None:
                    check_reduction_for_dtype(reduction, d.dtype)
                if i.shape is not None and u.shape is not None:
                    if len(i.shape) != len(u.shape) or any(
                        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(i.shape, u.shape)
                    ):
                        raise ValueError(
                            f"updates must have the shape of indices: indices shape {_fmt(i.shape)}, "
                            f"updates shape {_fmt(u.shape)}"
                        )
                names = self._output_names(node, output_names, 1)
                self._check_opset_reachable(_opset.scatter_needs(reduction, d.dtype == _BFLOAT16))
            except (TypeError, ValueError) as e:
                raise type(e)(f"node {node!r} ({op}): {e}") from None
            attrs = {"axis": int(axis)}
            if reduction != "none":
                attrs["reduction"] = reduction
            proto = helper.make_node(op, [d.name, i.name, u.name], names, name=node, **attrs)
            outputs = [(names[0], d.dtype, d.shape)]
            return self._append(proto, outputs, training, lda_coeff, self._defined_opset())[0]

    def gather_elements(
        self, data: TensorLike, indices: TensorLike, axis: int = 0, *, name: str | None = None,
        output_names: object = None, training: bool = True, lda_coeff: float = 1.0,
    ) -> Tensor:
        """Append an ONNX GatherElements node; returns its output tensor (data's type, indices' shape).

        Checked now like `scatter_elements`: supported T, int32/int64 indices, equal ranks,
        indices fitting data except along `axis`, the axis range. Export opset 11 (13 with bfloat16).
        """
        with self._adding():
            op = "GatherElements"
            node = self._node_name(name, op)
            d = self._operand(node, op, "data", data)
            i = self._operand(node, op, "indices", indices)
            try:
                training, lda_coeff = _check_training(training), _check_lda(lda_coeff)
                self._check_elementwise(d, i, axis)
                names = self._output_names(node, output_names, 1)
                self._check_opset_reachable(_opset.gather_needs(d.dtype == _BFLOAT16))
            except (TypeError, ValueError) as e:
                raise type(e)(f"node {node!r} ({op}): {e}") from None
            proto = helper.make_node(op, [d.name, i.name], names, name=node, axis=int(axis))
            outputs = [(names[0], d.dtype, i.shape)]
            return self._append(proto, outputs, training, lda_coeff, self._defined_opset())[0]

    @staticmethod
    def _check_elementwise(d: Tensor, i: Tensor, axis: object) -> None:
        """The rules ScatterElements and GatherElements share, on what is known before run time."""
        if d.dtype is not None:
            dtype_category(d.dtype)
        if i.dtype is not None and i.dtype not in _INDEX_DTYPES:
            raise TypeError(f"indices must be int32 or int64 (ONNX Tind), got {i.dtype}")
        if isinstance(axis, bool):
            raise TypeError("axis must be an integer, got bool")
        try:
            operator.index(axis)
        except TypeError:
            raise TypeError(f"axis must be an integer, got {type(axis).__name__}") from None
        if d.shape is None:
            return
        if len(d.shape) == 0:
            raise ValueError("data must have rank >= 1, got a rank-0 tensor")
        ax = normalize_axis(axis, len(d.shape))
        if i.shape is None:
            return
        if len(i.shape) != len(d.shape):
            raise ValueError(
                f"indices must have the rank of data: data shape {_fmt(d.shape)}, indices shape {_fmt(i.shape)}"
            )
        for dim, (n, s) in enumerate(zip(i.shape, d.shape)):
            if dim != ax and isinstance(n, int) and isinstance(s, int) and n > s:
                raise ValueError(
                    f"indices shape {_fmt(i.shape)} does not fit data shape {_fmt(d.shape)}: "
                    f"dimension {dim} has {n} > {s} (only the axis {ax} may be longer)"
                )

    def _check_opset_reachable(self, needed: int) -> None:
        """An imported graph raises its opset only when its other nodes keep their meaning there."""
        if self._imported is None or needed <= self._defined_opset():
            return
        from ._export import default_opset

        default_opset(self, extra=needed)

    def node(
        self, op_type: str, inputs: Sequence[TensorLike | None], *, name: str | None = None,
        output_names: object = None, n_outputs: int | None = None, training: bool = True,
        lda_coeff: float = 1.0, **attributes: object,
    ) -> Tensor | tuple[Tensor, ...]:
        """Append any standard ONNX operator; returns its output tensor (a tuple when it has several).

        `inputs` are tensors, names, arrays (they become non-trainable initializers) or None for
        an absent optional input; `attributes` are the ONNX attributes. The node is checked
        with the ONNX checker and ONNX shape inference (strict) at the graph's opset, and its
        input types against the operator's type constraints (TypeError); other problems are
        ValueErrors. Both name the node.
        """
        own = {"ScatterElements": (self.scatter_elements, 3), "GatherElements": (self.gather_elements, 2)}
        if op_type in own and len(inputs) == own[op_type][1] and n_outputs in (None, 1):
            # The dedicated builders check more than ONNX inference does (index types, fits).
            builder = own[op_type][0]
            return builder(*inputs, name=name, output_names=output_names, training=training,
                           lda_coeff=lda_coeff, **attributes)
        with self._adding():
            if not isinstance(op_type, str) or not op_type:
                raise TypeError(f"op_type must be a non-empty string, got {op_type!r}")
            node = self._node_name(name, op_type)
            if n_outputs is None:
                many = output_names is not None and not isinstance(output_names, str)
                n_outputs = len(list(output_names)) if many else 1
            defined_at = self._defined_opset()
            try:
                training, lda_coeff = _check_training(training), _check_lda(lda_coeff)
                try:
                    schema = onnx.defs.get_schema(op_type, defined_at, "")
                except onnx.defs.SchemaError:
                    raise ValueError(f"no standard ONNX operator {op_type!r} at opset {defined_at}") from None
                if schema.deprecated:
                    raise ValueError(f"operator {op_type!r} is deprecated at opset {defined_at}")
                names = self._output_names(node, output_names, n_outputs)
            except (TypeError, ValueError) as e:
                raise type(e)(f"node {node!r} ({op_type}): {e}") from None
            operands: list[Tensor | None] = []
            for k, value in enumerate(inputs):
                absent = value is None or (isinstance(value, str) and not value)
                operands.append(None if absent else self._operand(node, op_type, f"input{k}", value))
            try:
                proto = helper.make_node(
                    op_type, ["" if t is None else t.name for t in operands], names, name=node, **attributes
                )
            except (TypeError, ValueError) as e:
                raise TypeError(f"node {node!r} ({op_type}): bad attribute: {e}") from None
            try:
                _check_input_types(schema, [None if t is None else type_string(t.dtype) for t in operands])
                inferred = self._infer(proto, operands, defined_at)
            except (TypeError, ValueError) as e:
                raise type(e)(f"node {node!r} ({op_type}): {e}") from None
            outputs = [(n, *inferred.get(n, (None, None))) for n in names]
            tensors = self._append(proto, outputs, training, lda_coeff, defined_at)
            if op_type == "Constant":
                self._remember_constant(proto, names[0])
            return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _infer(self, proto: onnx.NodeProto, operands: list[Tensor | None], opset: int) -> dict:
        """Check one node alone with the ONNX checker and strict shape inference."""
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in proto.attribute):
            # A subgraph may read outer-scope tensors: it is checked with the whole model on export.
            return {}
        inputs, inits, seen = [], [], set()
        for t in operands:
            if t is None or t.name in seen:
                continue
            seen.add(t.name)
            if t.name in self._known_values:
                inits.append(numpy_helper.from_array(np.asarray(self._known_values[t.name]), t.name))
            elif t.dtype is None:
                return {}
            else:
                inputs.append(value_info(t.name, t.dtype, t.shape))
        graph = helper.make_graph([proto], "node", inputs, [], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
        try:
            onnx.checker.check_model(model)
            model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise ValueError(_onnx_message(e)) from None
        result = {}
        for vi in model.graph.value_info:
            dtype, shape = from_type_proto(vi.type)
            if shape is not None:
                shape = tuple(None if isinstance(d, str) and d.startswith("unk__") else d for d in shape)
            result[vi.name] = (dtype, shape)
        return result

    def _remember_constant(self, proto: onnx.NodeProto, name: str) -> None:
        from onnx.reference import ReferenceEvaluator

        value = np.asarray(ReferenceEvaluator(proto).run(None, {})[0])
        if value.dtype.kind in "iu" and value.size <= _KNOWN_VALUE_LIMIT:
            self._known_values[name] = value

    # -- per-node parameters ------------------------------------------------------------------

    def _select(self, key: object) -> list[Node]:
        if key is None:
            return list(self._nodes)
        if isinstance(key, str):
            if key not in self._by_name:
                raise KeyError(f"graph {self.name!r} has no node named {key!r}")
            return [self._by_name[key]]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            n = len(self._nodes)
            if not -n <= key < n:
                raise IndexError(f"node index {key} is out of range for {n} nodes")
            return [self._nodes[key]]
        raise TypeError(f"a node key is a name, an index or None, got {type(key).__name__}")

    def get_lda_coeff(self, key: str | int | None = None) -> float | dict[str, float]:
        """lda_coeff of the node `key` (name or index in node order), or ``{name: value}`` for None."""
        nodes = self._select(key)
        return {n.name: n.lda_coeff for n in nodes} if key is None else nodes[0].lda_coeff

    def set_lda_coeff(self, key: str | int | None, value: float) -> None:
        """Set lda_coeff of one node (name or index) or of every node (None)."""
        value = _check_lda(value)
        for n in self._select(key):
            n.lda_coeff = value

    def get_training(self, key: str | int | None = None) -> bool | dict[str, bool]:
        """Training status of the node `key`, or ``{name: value}`` for None."""
        nodes = self._select(key)
        return {n.name: n.training for n in nodes} if key is None else nodes[0].training

    def set_training(self, key: str | int | None, value: bool) -> None:
        """Set the training status of one node (name or index) or of every node (None)."""
        value = _check_training(value)
        for n in self._select(key):
            n.training = value

    # -- export and import --------------------------------------------------------------------

    def to_onnx(self, *, check: bool = True) -> onnx.ModelProto:
        """The model, at the lowest opset its nodes need; checked with ``full_check=True``."""
        from ._export import to_onnx

        return to_onnx(self, check=check)

    def save(self, path) -> None:
        """Write the model (checked) to `path`."""
        onnx.save_model(self.to_onnx(), path)

    @classmethod
    def from_onnx(cls, model_or_path) -> Graph:
        """A graph from a ModelProto, serialized bytes or a path; node parameters come from metadata."""
        from ._export import from_onnx

        return from_onnx(model_or_path)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return (
            f"Graph({self.name!r}: {len(self._inputs)} inputs, {len(self._initializers)} initializers, "
            f"{len(self._nodes)} nodes, outputs {self._outputs})"
        )


def _check_input_types(schema: onnx.defs.OpSchema, types: list[str | None]) -> None:
    """TypeError when an input's type breaks the operator's type constraints."""
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = list(schema.inputs)
    bound: dict[str, tuple[str, int]] = {}
    for k, t in enumerate(types):
        if t is None or not formals:
            continue
        if k >= len(formals) and formals[-1].option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
            continue
        formal = formals[min(k, len(formals) - 1)]
        allowed = constraints.get(formal.type_str)
        if allowed is None:
            continue
        if t not in allowed:
            raise TypeError(f"input {k} ({formal.name}) has type {t}, which {schema.name} does not accept")
        if formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic and not formal.is_homogeneous:
            continue
        if formal.type_str in bound and bound[formal.type_str][0] != t:
            first, j = bound[formal.type_str]
            raise TypeError(
                f"inputs {j} and {k} must have the same type ({formal.type_str}), got {first} and {t}"
            )
        bound.setdefault(formal.type_str, (t, k))


def _onnx_message(e: Exception) -> str:
    return " ".join(str(e).split("==> Context")[0].split())

