"""Extremal reductions: reduce_max, reduce_min (ONNX ReduceMax/ReduceMin) and argmax.

reduce_max/min: axes=() reduces every axis; keepdims=1 keeps reduced axes as size 1.
argmax: the first position of the maximum along `axis` (ONNX ArgMax, select_last_index=0), int64.
Axes are normalized non-negative and sorted.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.ops.onnx_args import const_ints
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, normalize_axis, one_of, register
from einsat.ir.types import TensorType


def _reduced_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


class _ReduceExtremum(OpDef):
    attrs = {"axes": Attr("ints", (), doc="() reduces all axes"),
             "keepdims": Attr("int", 1, one_of(0, 1))}
    fn = staticmethod(np.max)

    def normalize(self, attrs, types):
        rank = types[0].rank
        axes = tuple(sorted({normalize_axis(a, rank) for a in attrs["axes"]}))
        attrs["axes"] = axes or tuple(range(rank))
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        if any(x.shape[a] == 0 for a in attrs["axes"]):
            raise ShapeError(f"cannot take the {self.op.value} of an empty axis of {x}")
        return [TensorType(_reduced_shape(x.shape, attrs["axes"], attrs["keepdims"]), x.dtype)]

    def numpy(self, args, attrs):
        out = self.fn(args[0], axis=attrs["axes"], keepdims=bool(attrs["keepdims"]))
        return [np.asarray(out, dtype=args[0].dtype)]

    def flops(self, ins, outs, attrs):
        """One comparison per input element."""
        return ins[0].size

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        axes = const_ints(ctx, onode, 1, "axes") if ctx.opset >= 18 else a.get("axes")
        if not axes and a.get("noop_with_empty_axes", 0):
            raise ctx.not_representable(f"{onode.op_type} with noop_with_empty_axes=1 and no axes")
        return [onode.input[0]], {"axes": tuple(axes or ()), "keepdims": a.get("keepdims", 1)}

    def to_onnx(self, ctx, node):
        ctx.reduce(self.onnx_type, node.inputs[0], node.attrs["axes"], node.outputs[0], node.attrs["keepdims"])


@register
class ReduceMax(_ReduceExtremum):
    """out = max of x over `axes`."""

    op = Op.REDUCE_MAX
    reduces = Op.MAXIMUM
    exact_in_half = True
    onnx_type = "ReduceMax"
    fn = staticmethod(np.max)


@register
class ReduceMin(_ReduceExtremum):
    """out = min of x over `axes`."""

    op = Op.REDUCE_MIN
    reduces = Op.MINIMUM
    exact_in_half = True
    onnx_type = "ReduceMin"
    fn = staticmethod(np.min)


@register
class ArgMax(OpDef):
    """out = the first index of the maximum of x along `axis` (int64)."""

    op = Op.ARGMAX
    dtype_of_first = False  # int64
    exact_in_half = True
    onnx_type = "ArgMax"
    attrs = {"axis": Attr("int", 0), "keepdims": Attr("int", 1, one_of(0, 1))}

    def normalize(self, attrs, types):
        attrs["axis"] = normalize_axis(attrs["axis"], types[0].rank)
        return attrs

    def infer(self, types, attrs):
        x, axis = types[0], attrs["axis"]
        if x.rank == 0 or x.shape[axis] == 0:
            raise ShapeError(f"argmax needs a non-empty axis {axis}, got {x}")
        return [TensorType(_reduced_shape(x.shape, (axis,), attrs["keepdims"]), np.int64)]

    def numpy(self, args, attrs):
        out = np.argmax(args[0], axis=attrs["axis"], keepdims=bool(attrs["keepdims"]))
        return [np.asarray(out, dtype=np.int64)]

    def flops(self, ins, outs, attrs):
        return ins[0].size

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        if a.get("select_last_index", 0):
            raise ctx.not_representable("ArgMax with select_last_index=1")
        return [onode.input[0]], {"axis": a.get("axis", 0), "keepdims": a.get("keepdims", 1)}

    def to_onnx(self, ctx, node):
        ctx.node("ArgMax", node.inputs, node.outputs, axis=node.attrs["axis"],
                 keepdims=node.attrs["keepdims"])
