"""Graph <-> ModelProto: the export opset, the metadata that carries the node parameters, safe loading."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper, numpy_helper

from . import _opset
from ._graph import Graph, Imported, Node
from ._types import Tensor, from_type_proto, type_string, value_info

# Keys of ModelProto.metadata_props that carry what ONNX has no field for.
NODES_KEY = "scatterx.nodes"
TRAINABLE_KEY = "scatterx.trainable"


def _is_default(domain: str) -> bool:
    return domain in ("", "ai.onnx")


def _node_needs(graph: Graph, node: Node) -> tuple[int, int]:
    """The versions [low, high] of the default domain at which `node` keeps its meaning."""
    p = node.proto
    if p.op_type in ("ScatterElements", "GatherElements"):
        data = graph._tensors.get(p.input[0])
        bf16 = data is not None and type_string(data.dtype) == "tensor(bfloat16)"
        if p.op_type == "GatherElements":
            return _opset.gather_needs(bf16), _opset.LATEST
        reduction = next((a.s.decode() for a in p.attribute if a.name == "reduction"), "none")
        return _opset.scatter_needs(reduction, bf16), _opset.LATEST
    types = []
    for name in p.input:
        t = graph._tensors.get(name) if name else None
        types.append("" if not name else None if t is None else type_string(t.dtype))
    try:
        low, high = _opset.compatible_range(
            p.op_type, "", node.defined_at, types, frozenset(a.name for a in p.attribute)
        )
    except onnx.defs.SchemaError:
        return 1, _opset.LATEST
    for sub in _subgraph_nodes(p):
        if _is_default(sub.domain):
            try:
                l2, h2 = _opset.compatible_range(sub.op_type, "", node.defined_at, [None])
            except onnx.defs.SchemaError:
                continue
            low, high = max(low, l2), min(high, h2)
    return low, high


def _subgraph_nodes(proto: onnx.NodeProto) -> Iterator[onnx.NodeProto]:
    for a in proto.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                yield n
                yield from _subgraph_nodes(n)


def default_opset(graph: Graph, extra: int = 0) -> int:
    """The lowest default-domain opset that every node of `graph` (and `extra`) allows.

    ValueError naming the node when one node's meaning does not reach the version another needs.
    """
    floor = _opset.FLOOR if graph._imported is None else graph._defined_opset()
    ranges = [(n, *_node_needs(graph, n)) for n in graph._nodes if _is_default(n.proto.domain)]
    opset = max([floor, extra] + [low for _, low, _ in ranges])
    for node, _, high in ranges:
        if high < opset:
            needing = [f"node {n.name!r} ({n.op_type})" for n, low, _ in ranges if low == opset]
            why = needing[0] if needing else "the new node" if extra == opset else "the imported model"
            raise ValueError(
                f"node {node.name!r} ({node.op_type}) keeps its meaning only up to opset {high}, "
                f"but {why} needs opset {opset}"
            )
    return opset


def _params_metadata(graph: Graph) -> dict[str, str]:
    nodes = [{"name": n.name, "training": n.training, "lda_coeff": n.lda_coeff} for n in graph._nodes]
    return {
        NODES_KEY: json.dumps(nodes, separators=(",", ":")),
        TRAINABLE_KEY: json.dumps(graph.trainable, separators=(",", ":")),
    }


def to_onnx(graph: Graph, *, check: bool = True) -> onnx.ModelProto:
    """Export `graph`; see `Graph.to_onnx`."""
    imported = graph._imported
    opsets = dict(imported.opset_import) if imported is not None else {}
    has_default = any(_is_default(n.proto.domain) for n in graph._nodes) or imported is None
    if has_default:
        opsets.pop("ai.onnx", None)
        opsets[""] = default_opset(graph)
    opset_ids = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    declared = imported.types if imported is not None else {}
    inputs = [_value_info(t, declared) for t in graph.inputs]
    outputs = [_value_info(t, declared) for t in graph.outputs]
    initializers = [numpy_helper.from_array(np.asarray(a), n) for n, a in graph._initializers.items()]
    nodes = [n.proto for n in graph._nodes]
    g = helper.make_graph(
        nodes, graph.name, inputs, outputs, initializers,
        value_info=list(imported.value_info) if imported is not None else None,
        doc_string=imported.graph_doc_string if imported is not None else None,
    )
    model = helper.make_model(
        g, opset_imports=opset_ids, functions=list(imported.functions) if imported is not None else None
    )
    model.ir_version = helper.find_min_ir_version_for(opset_ids)
    metadata = dict(imported.metadata) if imported is not None else {}
    if imported is not None:
        model.ir_version = max(model.ir_version, imported.ir_version)
        model.producer_name, model.producer_version = imported.producer_name, imported.producer_version
        model.domain, model.model_version = imported.domain, imported.model_version
        model.doc_string = imported.doc_string
    else:
        model.producer_name = "scatterx"
        from .. import __version__

        model.producer_version = __version__
    metadata.update(_params_metadata(graph))
    helper.set_model_props(model, metadata)
    _fill_output_types(model)
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise ValueError(f"graph {graph.name!r} does not make a valid model: {e}") from None
    return model


def _value_info(t: Tensor, declared: dict[str, onnx.TypeProto]) -> onnx.ValueInfoProto:
    """The model's own declaration where it has one (also sequences, maps, optionals)."""
    if t.name in declared:
        return helper.make_value_info(t.name, declared[t.name])
    return value_info(t.name, t.dtype, t.shape)


def _fill_output_types(model: onnx.ModelProto) -> None:
    """Outputs whose type the graph could not tell get ONNX's inferred type."""
    if all(o.type.WhichOneof("value") for o in model.graph.output):
        return
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in inferred.graph.value_info}
    for o in model.graph.output:
        if not o.type.WhichOneof("value") and o.name in types:
            o.type.CopyFrom(types[o.name])


# -- import -----------------------------------------------------------------------------------


def _all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    def in_graph(g: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        for n in g.node:
            yield from in_attributes(n.attribute)

    def in_attributes(attrs) -> Iterator[onnx.TensorProto]:
        for a in attrs:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from in_graph(a.g)
            for sub in a.graphs:
                yield from in_graph(sub)

    yield from in_graph(model.graph)
    for f in model.functions:
        for n in f.node:
            yield from in_attributes(n.attribute)


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Load a model file; its external data must lie inside the model's folder.

    Raises
    ------
    ValueError
        The file is not an ONNX model, or an external-data location is absolute or leaves the
        folder (``..``, symbolic links).
    """
    path = os.fspath(path)
    try:
        model = onnx.load_model(path, load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise ValueError(f"{path}: not a valid ONNX model ({e})") from None
    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    external = False
    for tensor in _all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        external = True
        location = external_data_helper.ExternalDataInfo(tensor).location
        target = os.path.realpath(os.path.join(base, location))
        if os.path.isabs(location) or os.path.commonpath([base, target]) != base:
            raise ValueError(
                f"{path}: tensor {tensor.name!r} refers to external data at {location!r}, "
                "outside the model's folder; refusing to read it"
            )
    if external:
        try:
            external_data_helper.load_external_data_for_model(model, base)
        except (OSError, ValueError, onnx.checker.ValidationError) as e:
            raise ValueError(f"{path}: cannot read external data ({e})") from None
    return model


def as_model(model_or_path: object) -> onnx.ModelProto:
    """A checked ModelProto from a ModelProto, serialized bytes or a path."""
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    elif isinstance(model_or_path, (bytes, bytearray)):
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except (DecodeError, ValueError) as e:
            raise ValueError(f"not a valid ONNX model ({e})") from None
    elif isinstance(model_or_path, (str, os.PathLike)):
        model = load_model(model_or_path)
    else:
        raise TypeError(f"expected a ModelProto, bytes or a path, got {type(model_or_path).__name__}")
    if any(external_data_helper.uses_external_data(t) for t in _all_tensors(model)):
        raise ValueError("the model's external data is not loaded: load the model from its path")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ValueError(f"not a valid ONNX model: {' '.join(str(e).split())}") from None
    return model


def _dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sp.values)
    indices = numpy_helper.to_array(sp.indices)
    dense = np.zeros(tuple(sp.dims), values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def from_onnx(model_or_path: object) -> Graph:
    """A Graph holding every node, tensor and setting of a valid model; see `Graph.from_onnx`.

    Unnamed nodes get generated names (``OpType_k``), and so do repeated names after the first.
    """
    model = as_model(model_or_path)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = model
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        types[vi.name] = from_type_proto(vi.type)
    metadata = {p.key: p.value for p in model.metadata_props}
    params, trainable = _read_params(metadata)
    gp = model.graph
    g = Graph(gp.name or "graph")
    g._imported = Imported(
        opset_import={o.domain: o.version for o in model.opset_import},
        ir_version=model.ir_version,
        functions=list(model.functions),
        metadata={k: v for k, v in metadata.items() if k not in (NODES_KEY, TRAINABLE_KEY)},
        value_info=list(gp.value_info),
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
        doc_string=model.doc_string,
        graph_doc_string=gp.doc_string,
        types={vi.name: vi.type for vi in list(gp.input) + list(gp.output) if vi.type.WhichOneof("value")},
    )
    for vi in gp.input:
        dtype, shape = types.get(vi.name, (None, None))
        g._tensors[vi.name] = Tensor(g, vi.name, dtype, shape)
        g._inputs.append(vi.name)
    arrays = [(t.name, numpy_helper.to_array(t)) for t in gp.initializer]
    arrays += [(sp.values.name, _dense(sp)) for sp in gp.sparse_initializer]
    for name, arr in arrays:
        if name in g._tensors:
            arr = g._as_initializer_array(arr)
            g._initializers[name] = arr
            g._tensors[name] = Tensor(g, name, arr.dtype, arr.shape)
            if trainable is None or name in trainable:
                g._trainable.add(name)
        else:
            g.initializer(name, arr, trainable=trainable is None or name in trainable)
    defaults = {o.domain: o.version for o in model.opset_import}
    for proto in gp.node:
        proto = onnx.NodeProto.FromString(proto.SerializeToString())
        if not proto.name or proto.name in g._by_name:
            proto.name = g._node_name(None, proto.op_type) if not proto.name else _fresh(g, proto.name)
        training, lda = params.get(proto.name, (True, 1.0))
        defined_at = defaults.get(proto.domain, defaults.get("ai.onnx" if proto.domain == "" else "", 0))
        outputs = [(n, *types.get(n, (None, None))) for n in proto.output if n]
        node = Node(proto, training, lda, defined_at)
        g._nodes.append(node)
        g._by_name[proto.name] = node
        for name, dtype, shape in outputs:
            g._tensors[name] = Tensor(g, name, dtype, shape)
        if proto.op_type == "Constant" and _is_default(proto.domain):
            try:
                g._remember_constant(proto, proto.output[0])
            except Exception:  # noqa: BLE001 - a constant the reference cannot build is only not remembered
                pass
    g._outputs = [o.name for o in gp.output]
    return g


def _fresh(g: Graph, name: str) -> str:
    k = 1
    while f"{name}_{k}" in g._by_name:
        k += 1
    return f"{name}_{k}"


def _read_params(metadata: dict[str, str]) -> tuple[dict[str, tuple[bool, float]], set[str] | None]:
    params: dict[str, tuple[bool, float]] = {}
    trainable = None
    try:
        if NODES_KEY in metadata:
            for entry in json.loads(metadata[NODES_KEY]):
                training, lda = entry["training"], entry["lda_coeff"]
                if not isinstance(training, bool) or isinstance(lda, bool) or not isinstance(lda, (int, float)):
                    raise ValueError(f"bad entry {entry!r}")
                params[str(entry["name"])] = (training, float(lda))
        if TRAINABLE_KEY in metadata:
            trainable = {str(n) for n in json.loads(metadata[TRAINABLE_KEY])}
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"malformed scatterx metadata in the model: {e}") from None
    return params, trainable
