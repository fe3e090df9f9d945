"""A residual sum and the norm of it, as one op with two outputs: onnxruntime's contrib
`SkipLayerNormalization` and `SkipSimplifiedLayerNormalization` (domain com.microsoft).

    skip_layernorm(x, skip, scale, beta?, bias?) = (layernorm(s, scale, beta), s),
        s = x + skip (+ bias)
    skip_rmsnorm(x, skip, scale, bias?) = (rmsnorm(s, scale), s),  s = x + skip (+ bias)

The sum `s` is computed in x's dtype (as the chain's Add computes it) and is the second output:
the residual stream every later transformer layer reads. The norm's statistics are float32 at
least (layernorm's and rmsnorm's semantics). Output 1 may be left unread (the last layer's sum).

Export (`to_onnx`): the com.microsoft op where the export allows contrib ops (`ctx.contrib`: the
file is written for onnxruntime, cost "cpu") and onnxruntime's kernel takes the shapes (x of rank
2 or 3, the norm over the last dim, skip of x's shape, scale, beta and bias vectors of the hidden
size, float32 or float16), else the minimal chain: Add (Add), then layernorm's or rmsnorm's own
export (LayerNormalization; RMSNormalization from opset 23, its chain below). Import
(`from_onnx`): the com.microsoft ops onnxruntime's transformers optimizer writes.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import Node
from einsat.ir.ops.normalization import _axis, broadcasts_to
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, opdef, register, same_dtype
from einsat.ir.types import TensorType, is_float

CONTRIB = "com.microsoft"


def _sum(x, skip, bias):
    s = x + skip
    if bias is not None:
        s = s + bias
    return s.astype(x.dtype, copy=False)


class SkipNorm(OpDef):
    """What the two skip ops share: inputs (x, skip, <norm's parameters>, bias?), outputs (norm, sum)."""

    norm: Op                 # the norm applied to the sum
    params: tuple[str, ...]  # the norm's parameter inputs after x and skip
    contrib_type: str        # onnxruntime's op

    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5, non_negative)}
    onnx_domain = CONTRIB

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def num_outputs(self, attrs):
        return 2

    def _bias(self, args):
        k = 2 + len(self.params)
        return args[k] if len(args) > k else None

    def _norm_args(self, args):
        return list(args[2:2 + len(self.params)])

    def infer(self, types, attrs):
        x, skip = types[0], types[1]
        if x.rank == 0 or not is_float(x.dtype):
            raise ShapeError(f"{self.op.value} needs a floating-point input of rank >= 1, got {x}")
        if skip is None or not broadcasts_to(skip.shape, x.shape):
            raise ShapeError(f"skip {skip} does not broadcast to x {x}")
        bias = self._bias(types)
        norm = x.shape[attrs["axis"]:]
        if bias is not None and not broadcasts_to(bias.shape, norm):
            raise ShapeError(f"bias {bias} does not broadcast to the normalized dims {list(norm)}")
        y = opdef(self.norm).infer([x] + self._norm_args(types), attrs)[0]
        dt = same_dtype([t for t in types if t is not None])
        return [TensorType(y.shape, dt), TensorType(x.shape, dt)]

    def numpy(self, args, attrs):
        s = _sum(args[0], args[1], self._bias(args))
        (y,) = opdef(self.norm).numpy([s] + self._norm_args(args), attrs)
        return [y, s]

    def flops(self, ins, outs, attrs):
        """The sum's adds (one per element, two with a bias) and the norm's flops."""
        adds = outs[1].size * (1 if self._bias(ins) is None else 2)
        return adds + opdef(self.norm).flops([ins[0]] + self._norm_args(ins), outs[:1], attrs)

    # -- ONNX -------------------------------------------------------------------------------------
    def _contrib_form(self, ctx, node) -> bool:
        """onnxruntime's kernel takes this application (checked on onnxruntime 1.31: rank 2 or 3,
        float32 or float16, the last dim normalized, parameters [hidden])."""
        if not getattr(ctx, "contrib", False):
            return False
        x = ctx.type(node.inputs[0])
        h = x.shape[-1]
        return (x.rank in (2, 3) and node.attrs["axis"] == x.rank - 1 and np.dtype(x.dtype) in (np.float32, np.float16)
                and ctx.type(node.inputs[1]).shape == x.shape
                and all(ctx.type(i).shape == (h,) for i in node.inputs[2:] if i))

    def _written_outputs(self, ctx, node):
        """The node's outputs, the sum '' where nothing reads it (a contrib op's optional output)."""
        read = {i for n in ctx.graph.nodes for i in n.inputs} | set(ctx.graph.outputs)
        return [node.outputs[0], node.outputs[1] if node.outputs[1] in read else ""]

    def to_onnx(self, ctx, node):
        """The contrib op (see `_contrib_form`), else Add (twice with a bias) and the norm's own
        export."""
        if self._contrib_form(ctx, node):
            y, s = self._written_outputs(ctx, node)
            ins = self._contrib_inputs(list(node.inputs))
            ctx.node(self.contrib_type, ins, [y, "", "", s] if s else [y], domain=CONTRIB,
                     epsilon=node.attrs["epsilon"])
            return
        x, skip = node.inputs[0], node.inputs[1]
        bias = self._bias(node.inputs)
        s = node.outputs[1]
        if bias:
            (xs,) = ctx.node("Add", [x, skip], [ctx.fresh("skip_sum")])
            ctx.node("Add", [xs, bias], [s])
        else:
            ctx.node("Add", [x, skip], [s])
        params = self._norm_args(node.inputs)
        attrs = {"axis": node.attrs["axis"], "epsilon": node.attrs["epsilon"]}
        opdef(self.norm).to_onnx(ctx, Node(self.norm, (s, *[p for p in params if p]), (node.outputs[0],), attrs,
                                           name=node.outputs[0]))

    def _contrib_inputs(self, ins):
        return ins

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        used = [o for o in list(onode.output)[1:3] if o]
        if used:
            raise ctx.not_representable(f"{onode.op_type}'s mean and inverse standard deviation outputs {used} "
                                        "have no einsat op")
        x = ctx.type(onode.input[0])
        if x is None or x.rank not in (2, 3):
            raise ctx.not_representable(f"{onode.op_type} of an input of rank other than 2 or 3")
        return self._einsat_inputs(list(onode.input)), {"axis": x.rank - 1, "epsilon": a.get("epsilon", 1e-12)}

    def _einsat_inputs(self, ins):
        return ins

    def onnx_outputs(self, onode):
        """einsat's outputs (norm, sum) of the contrib op's (output, mean, inv_std_var, sum)."""
        outs = list(onode.output)
        return [outs[0], outs[3] if len(outs) > 3 else ""]


@register
class SkipLayerNorm(SkipNorm):
    """x + skip (+ bias), then layernorm(scale, beta) over the dims from `axis`; outputs the norm
    and the sum (onnxruntime's SkipLayerNormalization, com.microsoft: inputs input, skip, gamma,
    beta?, bias?)."""

    op = Op.SKIP_LAYERNORM
    norm = Op.LAYERNORM
    params = ("scale", "beta")
    contrib_type = "SkipLayerNormalization"
    onnx_type = "SkipLayerNormalization"
    arity = (3, 5)

    def _norm_args(self, args):
        scale = args[2]
        beta = args[3] if len(args) > 3 else None
        return [scale] if beta is None else [scale, beta]


@register
class SkipRMSNorm(SkipNorm):
    """x + skip (+ bias), then rmsnorm(scale) over the dims from `axis`; outputs the norm and the sum
    (onnxruntime's SkipSimplifiedLayerNormalization, com.microsoft: inputs input, skip, gamma,
    bias?)."""

    op = Op.SKIP_RMSNORM
    norm = Op.RMSNORM
    params = ("scale",)
    contrib_type = "SkipSimplifiedLayerNormalization"
    onnx_type = "SkipSimplifiedLayerNormalization"
    arity = (3, 4)
