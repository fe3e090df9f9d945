"""The default-domain opset a model's types need: a node's schema at the model's opset may not
take the element types it is given (Conv takes bfloat16 from opset 22, as do Gemm's and
MaxPool's later versions), and the model is valid only at an opset whose schemas do.

    types_opset(model)   # the least opset >= the model's own at which every node takes its types
"""

from __future__ import annotations

import onnx
from onnx import defs, helper, shape_inference


def _value_types(model: onnx.ModelProto) -> dict[str, str]:
    """Every typed value's type string ('tensor(bfloat16)'), declared or inferred."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False).graph
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
