"""Element-wise ops: arithmetic with NumPy/ONNX broadcasting, and activations."""

from __future__ import annotations

import math

import numpy as np

from einsat.ir.expr.build import elementwise
from einsat.ir.expr.nodes import BINARY, UNARY
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, register, same_dtype
from einsat.ir.types import TensorType


class _Binary(OpDef):
    arity = (2, 2)
    elementwise = True

    def infer(self, types, attrs):
        a, b = types
        return [TensorType(broadcast_shapes(a.shape, b.shape), same_dtype(types))]

    def flops(self, ins, outs, attrs):
        return outs[0].size

    def expression(self, inputs, attrs):
        """L_out op(a[...], b[...]) with broadcasting (arithmetic ops only)."""
        if self.op.value not in BINARY:
            return None
        return elementwise(self.op.value, [t.shape for t in inputs], self.infer(inputs, attrs)[0].shape)


@register
class Add(_Binary):
    op = Op.ADD
    commutative = True
    ufunc = np.add
    eop_fusable = True
    chain_fusable = True
    nchwc = "carried"
    multilinear = True  # linear in its inputs jointly (PET's Table 1 lists it)
    onnx_type = "Add"

    def numpy(self, args, attrs):
        return [np.add(*args)]


@register
class Sub(_Binary):
    op = Op.SUB
    ufunc = np.subtract
    eop_fusable = True
    chain_fusable = True
    multilinear = True
    onnx_type = "Sub"

    def numpy(self, args, attrs):
        return [np.subtract(*args)]


@register
class Mul(_Binary):
    op = Op.MUL
    commutative = True
    ufunc = np.multiply
    eop_fusable = True
    chain_fusable = True
    nchwc = "carried"
    multilinear = True  # linear in each input separately
    onnx_type = "Mul"

    def numpy(self, args, attrs):
        return [np.multiply(*args)]


@register
class Div(_Binary):
    op = Op.DIV
    ufunc = np.divide
    parameter_inputs = (1,)  # the divisor
    chain_fusable = True
    onnx_type = "Div"

    def numpy(self, args, attrs):
        a, b = args
        if np.issubdtype(a.dtype, np.integer):
            return [np.trunc(a / b).astype(a.dtype)]  # ONNX integer division truncates
        return [np.divide(a, b)]


class _Unary(OpDef):
    arity = (1, 1)
    elementwise = True
    flops_per_element = 1

    def infer(self, types, attrs):
        return [types[0]]

    def flops(self, ins, outs, attrs):
        return self.flops_per_element * outs[0].size

    def expression(self, inputs, attrs):
        """L_out fn(x[...]) (functions with their default attributes only)."""
        if self.op.value not in UNARY or any(v != self.attrs[k].default for k, v in attrs.items()):
            return None
        return elementwise(self.op.value, [inputs[0].shape], inputs[0].shape)


@register
class Relu(_Unary):
    op = Op.RELU
    exact_in_half = True
    layout_commutes = True
    eop_fusable = True
    chain_fusable = True
    nchwc = "carried"
    onnx_type = "Relu"

    def numpy(self, args, attrs):
        return [np.maximum(args[0], np.zeros((), args[0].dtype))]


@register
class Sigmoid(_Unary):
    op = Op.SIGMOID
    layout_commutes = True
    eop_fusable = True
    chain_fusable = True
    nchwc = "carried"
    onnx_type = "Sigmoid"
    flops_per_element = 4

    def numpy(self, args, attrs):
        x = args[0]
        # the two-branch form never overflows exp()
        e = np.exp(-np.abs(x))
        return [np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)]


@register
class Tanh(_Unary):
    op = Op.TANH
    ufunc = np.tanh
    layout_commutes = True
    eop_fusable = True
    chain_fusable = True
    nchwc = "carried"
    onnx_type = "Tanh"
    flops_per_element = 4

    def numpy(self, args, attrs):
        return [np.tanh(args[0])]


_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # the GPU machine may lack scipy: fall back to math.erf
        return _erf(x).astype(x.dtype)
    return sp_erf(x).astype(x.dtype)


@register
class Erf(_Unary):
    op = Op.ERF
    layout_commutes = True
    chain_fusable = True
    onnx_type = "Erf"
    flops_per_element = 8

    def numpy(self, args, attrs):
        return [erf(args[0])]


def _gelu_approx(v):
    return None if v in ("none", "tanh") else "must be 'none' or 'tanh'"


@register
class Gelu(_Unary):
    op = Op.GELU
    layout_commutes = True
    chain_fusable = True
    attrs = {"approximate": Attr("str", "none", _gelu_approx)}
    onnx_type = "Gelu"  # ONNX opset 20; its function body below it
    flops_per_element = 10

    def numpy(self, args, attrs):
        x = args[0]
        if attrs["approximate"] == "tanh":
            inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
            return [(0.5 * x * (1 + np.tanh(inner))).astype(x.dtype)]
        return [(0.5 * x * (1 + erf(x / np.sqrt(2).astype(x.dtype)))).astype(x.dtype)]

    def to_onnx(self, ctx, node):
        write_gelu(ctx, node.inputs[0], node.outputs[0], ctx.type(node.inputs[0]).dtype, node.attrs["approximate"])

    def onnx_call(self, ctx, inputs, output, dtype):
        return write_gelu(ctx, inputs[0], output, dtype, self.attrs["approximate"].default)


def write_gelu(ctx, x: str, output: str, dtype, approximate: str) -> str:
    """ONNX Gelu from opset 20; below, its function body: 0.5·x·(1 + erf(x/√2)), or with
    approximate='tanh' 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    if ctx.opset >= 20:
        return ctx.node("Gelu", [x], [output], approximate=approximate)[0]

    def c(v, hint):
        return ctx.constant(np.asarray(v, dtype), hint)

    def op(kind, ins, hint):
        return ctx.node(kind, ins, [ctx.fresh(hint)])[0]

    if approximate == "tanh":
        cube = op("Mul", [op("Mul", [x, x], "gelu_sq"), x], "gelu_cube")
        inner = op("Add", [x, op("Mul", [cube, c(0.044715, "gelu_k")], "gelu_kx3")], "gelu_inner")
        s = op("Tanh", [op("Mul", [inner, c(np.sqrt(2 / np.pi), "gelu_s")], "gelu_scaled")], "gelu_tanh")
    else:
        s = op("Erf", [op("Div", [x, c(np.sqrt(2), "gelu_sqrt2")], "gelu_scaled")], "gelu_erf")
    half_x = op("Mul", [x, c(0.5, "gelu_half")], "gelu_half_x")
    return ctx.node("Mul", [half_x, op("Add", [s, c(1.0, "gelu_one")], "gelu_sum")], [output])[0]


@register
class LeakyRelu(_Unary):
    op = Op.LEAKY_RELU
    layout_commutes = True
    attrs = {"alpha": Attr("float", 0.01)}
    onnx_type = "LeakyRelu"
    flops_per_element = 2

    def numpy(self, args, attrs):
        x = args[0]
        return [np.where(x >= 0, x, x * np.asarray(attrs["alpha"], x.dtype))]


@register
class Where(OpDef):
    op = Op.WHERE
    dtype_of_first = False  # the branches'
    exact_in_half = True
    arity = (3, 3)
    elementwise = True
    onnx_type = "Where"

    def infer(self, types, attrs):
        c, a, b = types
        if c.dtype != np.bool_:
            raise ShapeError(f"the condition must be bool, not {c.dtype}")
        return [TensorType(broadcast_shapes(c.shape, a.shape, b.shape), same_dtype([a, b]))]

    def numpy(self, args, attrs):
        return [np.where(*args)]

    def flops(self, ins, outs, attrs):
        return outs[0].size
