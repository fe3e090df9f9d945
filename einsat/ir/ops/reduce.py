"""Reductions: reduce_sum and reduce_mean over `axes` (ONNX ReduceSum / ReduceMean), and the
running sums of cumsum (ONNX CumSum).

All are linear. `axes` is normalized to an explicit sorted tuple of non-negative axes; the
default () means every axis and is filled in. keepdims=1 keeps reduced dims as size 1.
cumsum is not flagged multi-linear: the corrector (`einsat/verify`) has no rule for it.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.expr import Call, Const, Expr, Read, var
from einsat.ir.expr.build import iters, scope_read
from einsat.ir.ops.layout import normalize_axes
from einsat.ir.ops.onnx_args import const_ints
from einsat.ir.ops.slicing import _axis
from einsat.ir.registry import Attr, Op, OpDef, one_of, register
from einsat.ir.types import TensorType


class _Reduce(OpDef):
    multilinear = True
    attrs = {"axes": Attr("ints", (), doc="() = all axes; filled in"),
             "keepdims": Attr("int", 1, one_of(0, 1))}

    def normalize(self, attrs, types):
        x = types[0]
        if x is not None:
            axes = attrs["axes"] or tuple(range(x.rank))
            attrs["axes"] = normalize_axes(axes, x.rank)
        return attrs

    def infer(self, types, attrs):
        x, axes = types[0], attrs["axes"]
        if attrs["keepdims"]:
            shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
        else:
            shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return [TensorType(shape, x.dtype)]

    def expression(self, inputs, attrs):
        """L_kept Σ_reduced x[...] (for the mean, that sum divided by the count)."""
        x, axes = inputs[0], attrs["axes"]
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        sums = iters("r", [x.shape[a] for a in axes])
        kept, summed = iter(loops), iter(sums)
        idx = []
        for k in range(x.rank):
            if k in axes:
                if attrs["keepdims"]:
                    next(kept)
                idx.append(var(next(summed).name))
            else:
                idx.append(var(next(kept).name))
        total = Expr(loops, sums, Read(0, tuple(idx)))
        if self.op is not Op.REDUCE_MEAN:
            return total
        # the mean is the sum divided by the count where it is read, as NumPy's `mean` rounds (a sum
        # of x * (1/n) is not: Σ(x - mean) then came out 0 where the reference's is 1.2e-7, and a
        # tolerance relative to that output refused a right program; einsat fuzz --seed 2)
        count = 1
        for a in axes:
            count *= x.shape[a]
        return Expr(loops, (), Call("div", (scope_read(total, loops), Const(float(max(count, 1))))))

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        if ctx.opset >= 18 or self.onnx_type == "ReduceSum":  # axes became an input
            axes = const_ints(ctx, onode, 1, "axes")
        else:
            axes = a.get("axes")
        if not axes and a.get("noop_with_empty_axes", 0):
            raise ctx.not_representable(f"{onode.op_type} with noop_with_empty_axes and no axes")
        return [onode.input[0]], {"axes": tuple(axes or ()), "keepdims": a.get("keepdims", 1)}

    def to_onnx(self, ctx, node):
        ctx.reduce(self.onnx_type, node.inputs[0], node.attrs["axes"], node.outputs[0], node.attrs["keepdims"])


@register
class ReduceSum(_Reduce):
    op = Op.REDUCE_SUM
    reduces = Op.ADD
    chain_fusable = True
    onnx_type = "ReduceSum"

    def numpy(self, args, attrs):
        x = args[0]
        return [np.sum(x, axis=attrs["axes"], keepdims=bool(attrs["keepdims"]), dtype=x.dtype)]

    def flops(self, ins, outs, attrs):
        """One add per input element."""
        return ins[0].size


@register
class ReduceMean(_Reduce):
    op = Op.REDUCE_MEAN
    chain_fusable = True
    onnx_type = "ReduceMean"

    def numpy(self, args, attrs):
        x = args[0]
        return [np.mean(x, axis=attrs["axes"], keepdims=bool(attrs["keepdims"]), dtype=x.dtype)]

    def flops(self, ins, outs, attrs):
        """One add per input element, one divide per output element."""
        return ins[0].size + outs[0].size


@register
class CumSum(OpDef):
    """Running sums along `axis`: out[.., i, ..] = Σ_{j ≤ i} x[.., j, ..]; `exclusive` leaves out
    x[i] itself (j < i), `reverse` sums from the end (j ≥ i, or j > i when exclusive)."""

    op = Op.CUMSUM
    onnx_type = "CumSum"
    attrs = {"axis": Attr("int", 0), "exclusive": Attr("int", 0, one_of(0, 1)),
             "reverse": Attr("int", 0, one_of(0, 1))}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        return [types[0]]

    def numpy(self, args, attrs):
        x, axis = args[0], attrs["axis"]
        if attrs["reverse"]:
            x = np.flip(x, axis)
        y = np.cumsum(x, axis=axis, dtype=x.dtype)
        if attrs["exclusive"]:
            y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
        return [np.flip(y, axis) if attrs["reverse"] else y]

    def flops(self, ins, outs, attrs):
        """One add per element."""
        return ins[0].size

    def from_onnx(self, ctx, onode):
        (axis,) = const_ints(ctx, onode, 1, "axis")
        a = ctx.attrs(onode)
        return [onode.input[0]], {"axis": axis, "exclusive": a.get("exclusive", 0), "reverse": a.get("reverse", 0)}

    def to_onnx(self, ctx, node):
        a = node.attrs
        axis = ctx.constant(np.array(a["axis"], np.int64), "axis")
        ctx.node("CumSum", [node.inputs[0], axis], node.outputs, exclusive=a["exclusive"], reverse=a["reverse"])
