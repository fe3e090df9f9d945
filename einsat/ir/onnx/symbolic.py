"""Shape arithmetic on symbolic dims at ONNX import (`load_onnx(..., symbolic=True)`).

Exporters compute shapes at run time: `Shape -> Gather -> Unsqueeze -> Concat -> Reshape`.
With static inputs `onnx.fold` evaluates such chains once. With symbolic dims the values are
dims (`batch`, `sequence * 12`), so here each such node is evaluated on *object arrays of dims*
(`ctx.dim_values`): `Shape` of a symbolic type, then Gather, Slice, Squeeze, Unsqueeze, Concat,
Reshape, Cast, Neg, Add, Sub, Mul, Div, Equal, Where, Max and Min on them and on constants. A result
with no symbol left becomes a constant, exactly as folding makes it. A symbolic result is
recorded for the ops that read a shape as an attribute (Reshape's and Expand's targets through
`ctx.dims`), and the node is *also* imported as a runtime node (Shape as an opaque node, the
arithmetic as einsat ops on int64 tensors): where the value is read only as a target, that
chain is dead and dropped; where data reads it (a Range of positions), it runs.

A fact that holds for some sizes only (an `Equal` of `batch` and 4, a division not exact for
every size) is never decided: the value stays unknown (no dim value) and the node runs.
"""

from __future__ import annotations

import numpy as np
import onnx

from einsat.errors import ShapeError
from einsat.ir.dims import SymDim, exact_div, prove_eq

# the ops evaluated on dims; any other node reading a dim value just runs
ARITH = {"Add", "Sub", "Mul", "Div", "Max", "Min"}
SHAPE_OPS = {"Shape", "Size", "Gather", "Slice", "Squeeze", "Unsqueeze", "Concat", "Reshape", "Cast", "Equal",
             "Where", "Expand", "ConstantOfShape", "Neg", "Identity", *ARITH}


def fold_dims(ctx, onode: onnx.NodeProto) -> bool:
    """Evaluate `onode` on dims when it is shape arithmetic on a symbolic value. True: its
    outputs became constants (no symbol left), nothing more to import; False: import the node as
    usual (its dim value, if any, is recorded in `ctx.dim_values`)."""
    if onode.domain not in ("", "ai.onnx") or onode.op_type not in SHAPE_OPS:
        return False
    if onode.op_type in ("Shape", "Size"):
        t = ctx.type(onode.input[0]) if onode.input[0] in ctx.types else None
        if t is None or t.is_static:
            return False
    elif not any(i in ctx.dim_values for i in onode.input if i):
        return False
    elif not all(not i or i in ctx.dim_values or ctx.constant(i) is not None for i in onode.input):
        return False
    try:
        value = _evaluate(ctx, onode)
    except (ShapeError, TypeError, ValueError, IndexError, ZeroDivisionError):
        value = None  # not decided for every size: the node runs
    if value is None:
        return False
    if not isinstance(value, np.ndarray):  # a scalar taken by np.take or np.squeeze
        value = np.array(value, dtype=object if isinstance(value, SymDim) else None)
    if not any(isinstance(d, SymDim) for d in value.reshape(-1)):
        ctx.constants[onode.output[0]] = _frozen(np.asarray(value.astype(np.int64) if value.dtype == object
                                                            else value))
        ctx.folded.add(onode.output[0])
        return True
    ctx.dim_values[onode.output[0]] = value
    return False


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


def _arg(ctx, name: str) -> np.ndarray:
    if name in ctx.dim_values:
        return ctx.dim_values[name]
    value = np.asarray(ctx.constant(name))
    if value.dtype.kind in "iu":
        return value.astype(object) if value.size else value.astype(np.int64)
    return value


def _attrs(onode) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in onode.attribute}


def _evaluate(ctx, onode) -> np.ndarray | None:
    op, attrs = onode.op_type, _attrs(onode)
    if op == "Shape":
        shape = ctx.type(onode.input[0]).shape
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return np.array(list(shape[slice(start, end)]) or [], dtype=object).reshape(-1)
    if op == "Size":
        return np.array(ctx.type(onode.input[0]).size, dtype=object)
    args = [_arg(ctx, i) if i else None for i in onode.input]
    if op in ("ConstantOfShape", "Expand"):
        return None  # a tensor of data with a symbolic shape, not a dim value: imported as a node
    if op == "Gather":
        if args[1].dtype == object and any(isinstance(i, SymDim) for i in args[1].reshape(-1)):
            return None
        return np.take(args[0], np.asarray(args[1], dtype=np.int64), axis=attrs.get("axis", 0))
    if op == "Slice":
        if args[0].ndim != 1 or any(a is not None and any(isinstance(x, SymDim) for x in a.reshape(-1))
                                    for a in args[1:]):
            return None
        starts, ends = (int(x) for x in args[1].reshape(-1)), (int(x) for x in args[2].reshape(-1))
        step = int(args[4].reshape(-1)[0]) if len(args) > 4 and args[4] is not None else 1
        return args[0][slice(next(starts), next(ends), step)]
    if op == "Unsqueeze":
        axes = attrs.get("axes") if len(args) < 2 else [int(a) for a in args[1].reshape(-1)]
        out = args[0]
        rank = out.ndim + len(axes)
        for a in sorted(x % rank for x in axes):
            out = np.expand_dims(out, a)
        return out
    if op == "Squeeze":
        axes = attrs.get("axes") if len(args) < 2 else [int(a) for a in args[1].reshape(-1)]
        return np.squeeze(args[0], axis=None if axes is None else tuple(axes))
    if op == "Concat":
        return np.concatenate([np.asarray(a, dtype=object).reshape(-1) if a.ndim == 0 else a.astype(object)
                               for a in args], axis=attrs.get("axis", 0))
    if op == "Reshape":
        shape = [int(x) for x in args[1].reshape(-1)]
        return args[0].reshape(shape)
    if op == "Neg":
        return np.array([-x for x in args[0].reshape(-1)], dtype=object).reshape(args[0].shape)
    if op == "Identity":
        return args[0]
    if op == "Cast":
        to = onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])
        return args[0] if to.kind in "iu" else None
    if op in ARITH:
        a, b = np.broadcast_arrays(args[0].astype(object), args[1].astype(object))
        out = [_binary(op, x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))]
        if any(v is None for v in out):
            return None
        return np.array(out, dtype=object).reshape(a.shape)
    if op == "Equal":
        a, b = np.broadcast_arrays(args[0].astype(object), args[1].astype(object))
        out = [prove_eq(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))]
        if any(v is None for v in out):
            return None
        return np.array(out, dtype=bool).reshape(a.shape)
    if op == "Where":
        c, a, b = np.broadcast_arrays(args[0], args[1].astype(object), args[2].astype(object))
        return np.where(c.astype(bool), a, b)
    return None


def _binary(op: str, x, y):
    if op == "Add":
        return x + y
    if op == "Sub":
        return x - y
    if op == "Mul":
        return x * y
    if op == "Div":  # integer division of sizes: exact for every size, or not decided
        return exact_div(x, y) if isinstance(x, SymDim) or isinstance(y, SymDim) else x // y
    if op in ("Max", "Min"):
        if not (isinstance(x, SymDim) or isinstance(y, SymDim)):
            return max(x, y) if op == "Max" else min(x, y)
        from einsat.ir.dims import prove_ge
        ge = prove_ge(x, y)
        if ge is None:
            return None
        return (x if ge else y) if op == "Max" else (y if ge else x)
    return None


def opaque_types(ctx, onode: onnx.NodeProto, missing: list[str]) -> dict:
    """Symbolic output types of an opaque node that ONNX could not type statically: Range's
    length from its dim-valued bounds; else ONNX shape inference's types with its `dim_param`s
    read as dims, and every dim it could not name (a size that depends on data: NonZero, a Range
    of data) a fresh symbol `<value>.<axis>`, which the program keeps as it is."""
    from einsat.ir.dims import floordiv, sym
    from einsat.ir.onnx.read import symbolic_type
    from einsat.ir.types import TensorType

    out = {}
    if onode.op_type == "Range" and onode.domain in ("", "ai.onnx"):
        bounds = [ctx.dims(i) for i in onode.input]
        if all(b is not None and len(b) == 1 for b in bounds):
            (start,), (limit,), (delta,) = bounds
            if isinstance(delta, int) and delta >= 1 and not isinstance(start, SymDim):
                t = ctx.type(onode.input[0])
                out[onode.output[0]] = TensorType([floordiv(limit - start + delta - 1, delta)], t.dtype)
    infos = {vi.name: vi for vi in (*ctx.model.graph.value_info, *ctx.model.graph.output)}
    for o in missing:
        if o not in out and o in infos:
            t = symbolic_type(infos[o], lambda name, k: sym(f"{name}.{k}"))
            if t is not None:
                out[o] = t
    return out
