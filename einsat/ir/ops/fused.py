"""Fused kernels: a convolution or matmul with its bias, a residual addend and an activation.

    fused_conv(x, w, bias?, residual?)  = act(conv(x, w, bias) + residual)
    fused_matmul(a, b, bias?, residual?) = act(a @ b + bias + residual)

These are what cuDNN's conv-bias-activation and cuBLASLt's epilogues run as one kernel: the
intermediate tensors are never written. The rewrites of `einsat.rewrites.post.fusion` create
them; the cost model sees the saved bytes and launches. einsat's own GPU runtime runs the vendor
call, then the epilogue as one element-wise kernel of its own (`gpu/lower/fused.py`), and its cost
models charge that kernel (`extract.cost.separate_epilogue`). `activation` is one of `none`, `relu`,
`sigmoid`, `tanh`. A residual has the output's shape; fused_matmul's bias broadcasts to the
output's shape (a [N] vector, typically). ONNX has no such ops: export expands each into Conv or
MatMul, Add and the activation.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.expr import Call, Expr
from einsat.ir.expr.build import broadcast_read, epilogue, scope_read
from einsat.ir.ops.conv import Conv, conv_expression, conv_numpy
from einsat.ir.ops.linear import matmul_expression, matmul_shape
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, one_of, register, same_dtype
from einsat.ir.types import TensorType

ACTIVATIONS = {"none": None, "relu": Op.RELU, "sigmoid": Op.SIGMOID, "tanh": Op.TANH}
_ONNX_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def activate(y: np.ndarray, activation: str) -> np.ndarray:
    from einsat.ir.registry import opdef
    op = ACTIVATIONS[activation]
    return y if op is None else opdef(op).numpy([y], {})[0]


def activation_flops(activation: str, out: TensorType) -> int:
    from einsat.ir.registry import opdef
    op = ACTIVATIONS[activation]
    return 0 if op is None else opdef(op).flops([out], [out], {})


def _epilogue_onnx(ctx, first: str, outs, residual: str, activation: str, hint: str) -> None:
    """Emit `first` (a callable writing the product to a name), + residual, then the activation."""
    out = outs[0]
    steps = bool(residual) + (activation != "none")
    cur = out if steps == 0 else ctx.fresh(hint)
    first(cur)
    if residual:
        nxt = out if activation == "none" else ctx.fresh(f"{hint}_residual")
        ctx.node("Add", [cur, residual], [nxt])
        cur = nxt
    if activation != "none":
        ctx.node(_ONNX_ACT[activation], [cur], [out])


def _epilogue_expression(core: Expr, ins, first: int, activation: str) -> Expr:
    """act(core + ins[first] + ins[first + 1] ...) as scopes over `core` (absent inputs skipped)."""
    loops = core.loops
    e = core
    for k in range(first, len(ins)):
        if ins[k] is not None:
            e = epilogue(e, loops, broadcast_read(k, ins[k].shape, loops))
    if ACTIVATIONS[activation] is not None:
        e = Expr(loops, (), Call(ACTIVATIONS[activation].value, (scope_read(e, loops),)))
    return e


def _input(node, k: int) -> str:
    return node.inputs[k] if len(node.inputs) > k else ""


@register
class FusedConv(OpDef):
    """act(conv(x, w, bias) + residual): cuDNN's convolution-bias-activation forward."""

    op = Op.FUSED_CONV
    fused_core = Op.CONV
    nchwc = "blocked"
    packed_inputs = (1, 2)  # the weight and the bias
    tensor_core = "conv"
    arity = (2, 4)
    attrs = {**Conv.attrs, "activation": Attr("str", "none", one_of(*ACTIVATIONS))}

    def normalize(self, attrs, types):
        return Conv.normalize(self, attrs, types)

    def infer(self, types, attrs):
        out = Conv.infer(self, list(types[:3]), attrs)[0]
        res = types[3] if len(types) > 3 else None
        if res is not None and res.shape != out.shape:
            raise ShapeError(f"the residual {res} must have the output's shape {list(out.shape)}")
        return [TensorType(out.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else None
        y = conv_numpy(x, w, b, attrs["stride"], attrs["dilation"], attrs["padding"], attrs["groups"])
        if len(args) > 3 and args[3] is not None:
            y = y + args[3]
        return [activate(y, attrs["activation"])]

    def expression(self, inputs, attrs):
        out = self.infer(inputs, attrs)[0].shape
        return _epilogue_expression(conv_expression(inputs[:3], out, attrs), inputs, 3, attrs["activation"])

    def flops(self, ins, outs, attrs):
        conv = Conv.flops(self, list(ins[:3]), outs, attrs)
        residual = outs[0].size if len(ins) > 3 and ins[3] is not None else 0
        return conv + residual + activation_flops(attrs["activation"], outs[0])

    def to_onnx(self, ctx, node):
        a = node.attrs
        conv = lambda out: ctx.node("Conv", [node.inputs[0], node.inputs[1], _input(node, 2)], [out],  # noqa: E731
                                    strides=a["stride"], pads=a["padding"], dilations=a["dilation"],
                                    group=a["groups"])
        _epilogue_onnx(ctx, conv, node.outputs, _input(node, 3), a["activation"], "conv")


@register
class FusedMatMul(OpDef):
    """act(a @ b + bias + residual): a GEMM with cuBLASLt's bias and activation epilogue."""

    op = Op.FUSED_MATMUL
    fused_core = Op.MATMUL
    tensor_core = "gemm"
    arity = (2, 4)
    attrs = {"activation": Attr("str", "none", one_of(*ACTIVATIONS))}

    def infer(self, types, attrs):
        a, b = types[0], types[1]
        out = matmul_shape(a.shape, b.shape)
        for name, t in zip(("bias", "residual"), types[2:]):
            if t is None:
                continue
            try:
                fits = broadcast_shapes(out, t.shape) == out
            except ShapeError:
                fits = False
            if not fits:
                raise ShapeError(f"the {name} {t} must broadcast to the output's shape {list(out)}")
        return [TensorType(out, same_dtype(types))]

    def numpy(self, args, attrs):
        y = np.matmul(args[0], args[1])
        for extra in args[2:]:
            if extra is not None:
                y = y + extra
        return [activate(y, attrs["activation"])]

    def expression(self, inputs, attrs):
        a, b = inputs[0], inputs[1]
        core = matmul_expression(a.shape, b.shape, self.infer(inputs, attrs)[0].shape)
        return _epilogue_expression(core, inputs, 2, attrs["activation"])

    def flops(self, ins, outs, attrs):
        k = ins[0].shape[-1]
        addends = sum(1 for t in ins[2:] if t is not None)
        return 2 * outs[0].size * k + addends * outs[0].size + activation_flops(attrs["activation"], outs[0])

    def to_onnx(self, ctx, node):
        bias, residual = _input(node, 2), _input(node, 3)

        def product(out):
            if not bias:
                ctx.node("MatMul", node.inputs[:2], [out])
                return
            mm = ctx.fresh("matmul")
            ctx.node("MatMul", node.inputs[:2], [mm])
            ctx.node("Add", [mm, bias], [out])

        _epilogue_onnx(ctx, product, node.outputs, residual, node.attrs["activation"], "matmul")
