"""Constant folding at ONNX import: the shape arithmetic exporters emit.

Exporters compute shapes at run time: `Shape -> Gather -> Unsqueeze -> Concat -> Reshape`,
`ConstantOfShape`, `Range`, `Cast`, arithmetic on constants. einsat's shapes are static, so at
import every node whose inputs are all known constants is evaluated once, with `onnx.reference`
(ONNX's own semantics), and its outputs become constants: consumed as attributes by the op
that reads them (Reshape's shape, Slice's starts) or kept as weights. `Shape` and `Size` fold
as soon as their input's static type is known, CastLike as soon as its first input is
constant and its second input's dtype known.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from einsat.ir.ops.opaque import run_onnx_node
from einsat.ir.types import TensorType

# ops whose result is not a function of their inputs: never folded
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}


def foldable(onode: onnx.NodeProto, constants, types) -> bool:
    """True when `onode` can be evaluated now: all its inputs are constants (or the inputs it
    reads only the type of are typed), it is deterministic and has no subgraph."""
    if onode.domain not in ("", "ai.onnx") or onode.op_type in NONDETERMINISTIC:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in onode.attribute):
        return False
    if onode.op_type in ("Shape", "Size") and onode.input[0] in types:
        return True
    if onode.op_type == "CastLike" and onode.input[0] in constants and onode.input[1] in types:
        return True  # CastLike reads only the dtype of its second input
    return all(not i or i in constants for i in onode.input)


def fold(onode: onnx.NodeProto, constants, types, opset: int) -> list[np.ndarray]:
    """The values of `onode`'s outputs (one per output name, '' outputs included), as ONNX defines
    them, infinities and NaNs included, without NumPy's RuntimeWarnings: an exporter's constant
    arithmetic computes values a later node discards (T5's relative-position buckets take the log
    of a zero distance and cast the -inf to an integer, then a Where keeps the exact small
    distances there), and a warning at import would only be noise."""
    with np.errstate(all="ignore"):
        return _fold(onode, constants, types, opset)


def _fold(onode: onnx.NodeProto, constants, types, opset: int) -> list[np.ndarray]:
    if onode.op_type in ("Shape", "Size"):
        t = types.get(onode.input[0]) or TensorType.of(constants[onode.input[0]])
        if onode.op_type == "Size":
            return [np.array(t.size, dtype=np.int64)]
        attrs = {a.name: a.i for a in onode.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", t.rank)
        return [np.array(t.shape[slice(start, end)], dtype=np.int64)]
    if onode.op_type == "CastLike":
        t = types.get(onode.input[1]) or TensorType.of(constants[onode.input[1]])
        return [np.asarray(constants[onode.input[0]]).astype(t.dtype)]
    if onode.op_type == "Constant":
        return [_constant_value(onode, opset)]
    if onode.op_type == "ConstantOfShape":
        value = [numpy_helper.to_array(a.t) for a in onode.attribute if a.name == "value"]
        fill = value[0].reshape(()) if value else np.zeros((), np.float32)
        shape = tuple(int(d) for d in constants[onode.input[0]])
        return [np.full(shape, fill, dtype=fill.dtype)]
    args = [constants[i] if i else None for i in onode.input]
    return evaluate(onode, args, opset)


def _constant_value(onode, opset: int) -> np.ndarray:
    a = onode.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t)
    if a.name in ("value_float", "value_int"):
        return np.array(helper.get_attribute_value(a), dtype=np.float32 if a.name == "value_float" else np.int64)
    if a.name in ("value_floats", "value_ints"):
        return np.array(helper.get_attribute_value(a), dtype=np.float32 if a.name == "value_floats" else np.int64)
    return evaluate(onode, [], opset)[0]  # sparse_value, value_string(s): onnx.reference decides


def evaluate(onode: onnx.NodeProto, args: list, opset: int) -> list[np.ndarray | None]:
    """Run one ONNX node on NumPy arrays with `onnx.reference` (None for '' outputs)."""
    values = iter(run_onnx_node(onode.SerializeToString(), onode.domain, opset, args))
    return [next(values) if o else None for o in onode.output]
