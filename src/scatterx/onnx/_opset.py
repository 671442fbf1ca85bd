"""Which opset a graph needs: the lowest version of the default domain that keeps every node's meaning.

A node of the graph is *defined* against one opset version (the newest one for nodes built with
the API, the model's own version for imported nodes). It may be exported at any version whose
schema for its operator has the same signature (inputs, outputs, attribute names and types)
and accepts the node's element types, unless the operator's meaning changed at a version
boundary without a change of signature (the table below). ScatterElements and GatherElements
have their own rule (SPEC section 6).
"""

from __future__ import annotations

from functools import cache

import onnx
import onnx.defs

LATEST = onnx.defs.onnx_opset_version()

# Below opset 11 many operators refused negative axes; the library starts where
# ScatterElements starts.
FLOOR = 11

# Version boundaries at which an operator changed meaning but kept its signature.
SEMANTIC_BREAKS = frozenset({
    ("Softmax", 13), ("LogSoftmax", 13), ("Hardmax", 13),  # one axis instead of a 2-D coercion
    ("GroupNormalization", 21),  # scale and bias per channel instead of per group
    ("Pad", 19),  # mode "wrap" added
})


def scatter_needs(reduction: str, bfloat16: bool) -> int:
    """Lowest opset of ScatterElements with `reduction` (SPEC section 6)."""
    if reduction in ("max", "min"):
        return 18
    if reduction in ("add", "mul"):
        return 16
    return 13 if bfloat16 else 11


def gather_needs(bfloat16: bool) -> int:
    return 13 if bfloat16 else 11


@cache
def _versions(op_type: str, domain: str) -> tuple[int, ...]:
    """Every since_version of an operator, oldest first."""
    versions = []
    version = LATEST
    while version >= 1:
        try:
            schema = onnx.defs.get_schema(op_type, version, domain)
        except onnx.defs.SchemaError:
            break
        versions.append(schema.since_version)
        version = schema.since_version - 1
    return tuple(reversed(versions))


def _uses(a: onnx.defs.OpSchema, b: onnx.defs.OpSchema, n_inputs: int, attributes: frozenset[str]) -> bool:
    """The two schemas read a node with `n_inputs` inputs and these attributes the same way.

    Inputs and attributes the node does not use may be new in one of them: ONNX adds them as
    optional, with a default that keeps the old behaviour.
    """
    def formals(schema, n):
        params = list(schema.inputs)
        return [(p.name, p.option) for p in params[:n]] + (
            [] if n <= len(params) else [(params[-1].option,)]
        )

    if formals(a, n_inputs) != formals(b, n_inputs):
        return False
    if [(p.name, p.option) for p in a.outputs] != [(p.name, p.option) for p in b.outputs]:
        return False
    for name in attributes:
        if name not in a.attributes or name not in b.attributes:
            return False
        if a.attributes[name].type != b.attributes[name].type:
            return False
    for schema in (a, b):
        for name, attr in schema.attributes.items():
            if attr.required and name not in attributes:
                return False
    return True


def _accepts(schema: onnx.defs.OpSchema, input_types: list[str | None]) -> bool:
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = list(schema.inputs)
    for i, type_str in enumerate(input_types):
        if not type_str:
            continue
        if not formals:
            return False
        formal = formals[min(i, len(formals) - 1)]
        allowed = constraints.get(formal.type_str, {formal.type_str})
        if type_str not in allowed:
            return False
    return True


def compatible_range(
    op_type: str, domain: str, defined_at: int, input_types: list[str | None],
    attributes: frozenset[str] = frozenset(),
) -> tuple[int, int]:
    """The versions [low, high] at which a node defined at `defined_at` keeps its meaning.

    `attributes` are the names of the attributes the node sets.

    `input_types` are the node's input types as ONNX type strings ("tensor(float)"), "" for an
    absent optional input and None where unknown (the node then keeps its own version's range).
    Raises ``onnx.defs.SchemaError`` when the operator does not exist.
    """
    versions = _versions(op_type, domain)
    if not versions:
        raise onnx.defs.SchemaError(f"no operator {op_type!r} in domain {domain!r}")
    here = max((v for v in versions if v <= defined_at), default=None)
    if here is None:
        raise onnx.defs.SchemaError(f"operator {op_type!r} does not exist at opset {defined_at}")
    schema = onnx.defs.get_schema(op_type, here, domain)
    if any(t is None for t in input_types):
        return here, _next(versions, here) - 1
    position = versions.index(here)
    low = here
    for older in reversed(versions[:position]):
        candidate = onnx.defs.get_schema(op_type, older, domain)
        if (op_type, low) in SEMANTIC_BREAKS or not _same(candidate, schema, input_types, attributes):
            break
        low = older
    high = _next(versions, here) - 1
    for newer in versions[position + 1:]:
        candidate = onnx.defs.get_schema(op_type, newer, domain)
        if (op_type, newer) in SEMANTIC_BREAKS or not _same(candidate, schema, input_types, attributes):
            break
        high = _next(versions, newer) - 1
    return low, high


def _next(versions: tuple[int, ...], version: int) -> int:
    later = [v for v in versions if v > version]
    return later[0] if later else LATEST + 1


def _same(a: onnx.defs.OpSchema, b: onnx.defs.OpSchema, input_types: list[str | None],
          attributes: frozenset[str]) -> bool:
    return (
        not a.deprecated
        and _uses(a, b, len(input_types), attributes)
        and _accepts(a, input_types)
        and _accepts(b, input_types)
    )
