"""The default-domain opset a model's types need: a node's schema at the model's opset may not
take the element types it is given (Conv takes bfloat16 from opset 22, as do Gemm's and
MaxPool's later versions), and the model is valid only at an opset whose schemas do.

    types_opset(model)   # the least opset >= the model's own at which every node takes its types

and the opset a written model declares (`written_opset(model, cap)`): the least at which every node,
written for the schemas of the cap, means the same.
"""

from __future__ import annotations

import onnx
from onnx import defs, helper, shape_inference

from einsat.errors import OnnxError

SMALL_INITIALIZER = 1024  # bytes: initializers kept with their values for the inference (shapes, axes)


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its large initializers as typed graph inputs without data: element types are
    inferred alike (no op's output type depends on a tensor's values), and the inference does not
    serialize the weights (4 s of BERT-base's write)."""
    g = model.graph
    large, small = [], []
    for t in g.initializer:
        (large if t.ByteSize() > SMALL_INITIALIZER else small).append(t)
    if not large:
        return model
    inputs = list(g.input) + [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large]
    graph = helper.make_graph(list(g.node), g.name, inputs, list(g.output), small, value_info=list(g.value_info))
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                             functions=list(model.functions))


def _value_types(model: onnx.ModelProto) -> dict[str, str]:
    """Every typed value's type string ('tensor(bfloat16)'), declared or inferred."""
    try:
        inferred = shape_inference.infer_shapes(_skeleton(model), strict_mode=False).graph
    except Exception:  # noqa: BLE001 — inference is a help here: the declared types remain
        inferred = model.graph
    types = {}
    for vi in (*inferred.input, *inferred.output, *inferred.value_info, *model.graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = _type_str(vi.type.tensor_type.elem_type)
    for t in model.graph.initializer:
        types[t.name] = _type_str(t.data_type)
    return types


def _type_str(elem_type: int) -> str:
    """The schema's spelling of an element type: TensorProto.BFLOAT16 -> 'tensor(bfloat16)'."""
    return f"tensor({helper.tensor_dtype_to_string(elem_type).split('.')[-1].lower()})"


def _takes(schema, node: onnx.NodeProto, types: dict[str, str]) -> bool:
    if schema is None:
        return True
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = list(schema.inputs)
    for k, name in enumerate(node.input):
        if not name or name not in types or not formals:
            continue
        formal = formals[min(k, len(formals) - 1)]  # a variadic last input takes the rest
        ok = allowed.get(formal.type_str)
        if ok is not None and types[name] not in ok:
            return False
    return True


def types_opset(model: onnx.ModelProto) -> int:
    """The least default-domain opset, at least the model's, whose schema of every default-domain
    node takes that node's input types (the model's own where none needs more)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if not _has_half(model):  # einsat's other types are taken at the opset it writes
        return opset
    newest = defs.onnx_opset_version()
    types = _value_types(model)
    need = opset
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or _takes(_schema(node.op_type, opset), node, types):
            continue
        for version in range(opset + 1, newest + 1):
            if _takes(_schema(node.op_type, version), node, types):
                need = max(need, version)
                break
    return need


def _schema(op_type: str, version: int):
    try:
        return defs.get_schema(op_type, version, "")
    except defs.SchemaError:  # not an op of this opset: nothing to check here (the checker says)
        return None


def _has_half(model: onnx.ModelProto) -> bool:
    half = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    g = model.graph
    return any(t.data_type in half for t in g.initializer) or any(
        vi.type.tensor_type.elem_type in half for vi in (*g.input, *g.output, *g.value_info))


# Default-domain schema versions that kept an op's inputs, outputs and attributes but changed what a
# node means (an attribute value added or redefined, an input's shape): a node written for the newer
# schema is never declared below it. (Type-only versions, the most, are judged by the node's types.)
MEANING_CHANGES = {
    ("GridSample", 20),          # mode 'bilinear'/'bicubic' renamed 'linear'/'cubic', N-d
    ("Pad", 19),                 # mode 'wrap'
    ("Resize", 18), ("Resize", 19),  # antialias/axes policies; 'half_pixel_symmetric'
    ("ScatterElements", 18), ("ScatterND", 18),  # reduction 'max'/'min'
    ("GroupNormalization", 21),  # scale and bias per channel, not per group
}  # (Attention 24 and 25 add inputs and attributes for caches and windows: a node without them means 23's)
FLOOR_OPSET = 13  # einsat reads opsets 13 and newer (`read.MIN_OPSET`): it never declares fewer


def written_opset(model: onnx.ModelProto, cap: int) -> int:
    """The least default-domain opset at which every default-domain node of `model` (written for the
    schemas of opset `cap`, subgraphs included) has a schema that takes it and means the same: for
    each node, its schema at `cap` and every older schema down to the one declared take its inputs,
    outputs and attributes, with the same defaults for the attributes it leaves out, take its input
    types, and none of them changed its meaning (`MEANING_CHANGES`). At least `FLOOR_OPSET`."""
    types = _value_types(model)
    need = FLOOR_OPSET
    for node in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        need = max(need, node_opset(node, cap, types))
    return need


def node_opset(node: onnx.NodeProto, cap: int, types: dict[str, str]) -> int:
    """The least opset (>= FLOOR_OPSET) from which `node`, written for its schema at `cap`, means
    the same up to `cap` (see `written_opset`)."""
    schema = _schema(node.op_type, cap)
    if schema is None:  # unknown to this onnx: the checker says; declare what it was written for
        return cap
    if not _takes(schema, node, types):
        newer = next((v for v in range(cap + 1, defs.onnx_opset_version() + 1)
                      if _takes(_schema(node.op_type, v), node, types)), None)
        where = f"from opset {newer} on" if newer else "at no opset this onnx knows"
        raise OnnxError(f"node {node.name!r} ({node.op_type}) takes its input types "
                        f"({', '.join(types.get(i, '?') for i in node.input if i)}) {where}; "
                        f"the opset cap is {cap}")
    lowest = schema.since_version
    while lowest > FLOOR_OPSET and (node.op_type, lowest) not in MEANING_CHANGES:
        older = _schema(node.op_type, lowest - 1)
        if older is None or not _same_meaning(node, schema, older) or not _takes(older, node, types):
            break
        lowest = older.since_version
        schema = older
    return max(lowest, FLOOR_OPSET)


def _same_meaning(node: onnx.NodeProto, newer, older) -> bool:
    """Whether `older` takes `node` as `newer` does: its attributes exist there, the ones it leaves
    out default alike, and its input and output counts fit."""
    set_ = {a.name for a in node.attribute}
    if not set_ <= set(older.attributes):
        return False
    for name, attr in newer.attributes.items():
        if name in set_ or name not in older.attributes:
            continue
        if attr.default_value != older.attributes[name].default_value:
            return False
    n_in = len(node.input)
    n_out = len(node.output)
    return older.min_input <= n_in <= older.max_input and older.min_output <= n_out <= older.max_output


def _all_nodes(graph: onnx.GraphProto):
    """The graph's nodes and those of its subgraphs (If/Loop/Scan bodies), depth first."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _all_nodes(g)
