"""Element-wise math, comparisons, logic and casts: the vocabulary of imperative kernels.

Box decoding needs exp and log, normalization sqrt, rotary position embeddings sin and cos (of
positions computed at run time from the attention mask), clipping maximum and minimum, score updates
comparisons and boolean logic. All ops broadcast like NumPy/ONNX; comparisons and isnan return
bool, logic ops take and return bool, `cast` converts to `dtype` with NumPy's `astype`. `clip`
(ONNX Clip, PyTorch's relu6 and hardtanh) bounds a floating-point tensor by static bounds.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.ops.elementwise import _Binary, _Unary
from einsat.ir.ops.onnx_args import const_input
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, register, same_dtype
from einsat.ir.types import TensorType, is_float


def _unary(name: str, op: Op, onnx: str, fn, cost: int = 1, doc: str = "", **flags) -> type[OpDef]:
    """An element-wise function of one input computed by the NumPy ufunc `fn`; `flags`: the
    registry's flags it sets."""
    cls = type(name, (_Unary,), {
        "op": op, "onnx_type": onnx, "flops_per_element": cost, "__doc__": doc, "ufunc": fn, **flags,
        "numpy": lambda self, args, attrs: [np.asarray(fn(args[0]), dtype=args[0].dtype)],
    })
    return register(cls)


Exp = _unary("Exp", Op.EXP, "Exp", np.exp, 4, "out = e ** x", layout_commutes=True, chain_fusable=True)
Log = _unary("Log", Op.LOG, "Log", np.log, 4, "out = ln x (nan below 0, -inf at 0)", chain_fusable=True)
Sqrt = _unary("Sqrt", Op.SQRT, "Sqrt", np.sqrt, 4, "out = √x", layout_commutes=True, chain_fusable=True)
Neg = _unary("Neg", Op.NEG, "Neg", np.negative, 1, "out = -x", multilinear=True, exact_in_half=True,
             layout_commutes=True, eop_fusable=True, chain_fusable=True)
Abs = _unary("Abs", Op.ABS, "Abs", np.absolute, 1, "out = |x|", exact_in_half=True, eop_fusable=True,
             chain_fusable=True)
Floor = _unary("Floor", Op.FLOOR, "Floor", np.floor, 1, "out = ⌊x⌋")
# sin and cos are computed by NumPy's ufuncs, but the frontend does not trace them (no `ufunc`)
Sin = _unary("Sin", Op.SIN, "Sin", np.sin, 4, "out = sin x (radians)", ufunc=None)
Cos = _unary("Cos", Op.COS, "Cos", np.cos, 4, "out = cos x (radians)", ufunc=None)


@register
class IsNaN(_Unary):
    """out = x is NaN (bool)."""

    op = Op.ISNAN
    dtype_of_first = False  # bool
    onnx_type = "IsNaN"

    def infer(self, types, attrs):
        return [TensorType(types[0].shape, np.bool_)]

    def numpy(self, args, attrs):
        return [np.isnan(args[0])]


@register
class Clip(_Unary):
    """out = min(max(x, low), high): NaN stays NaN, and low > high gives high (ONNX Clip).

    Floating-point x only; the bounds are static (ONNX's optional min/max inputs, constants at
    import) and float32 numbers, like every float attribute.
    """

    op = Op.CLIP
    exact_in_half = True
    onnx_type = "Clip"
    attrs = {"low": Attr("float", float("-inf")), "high": Attr("float", float("inf"))}

    def infer(self, types, attrs):
        if not is_float(types[0].dtype):
            raise ShapeError(f"clip takes a floating-point input, got {types[0]}")
        return [types[0]]

    def numpy(self, args, attrs):
        x = args[0]
        return [np.minimum(np.maximum(x, x.dtype.type(attrs["low"])), x.dtype.type(attrs["high"]))]

    def from_onnx(self, ctx, onode):
        if not is_float(ctx.type(onode.input[0]).dtype):
            raise ctx.not_representable(f"Clip of {ctx.type(onode.input[0])} (einsat's clips floating point)")
        bounds = {}
        for k, name, default in ((1, "low", -np.inf), (2, "high", np.inf)):
            value = const_input(ctx, onode, k, name)
            value = default if value is None else float(value)
            if value != float(np.float32(value)):
                raise ctx.not_representable(f"Clip's {name} bound {value!r} is not a float32 number")
            bounds[name] = value
        return [onode.input[0]], bounds

    def to_onnx(self, ctx, node):
        dtype = ctx.type(node.inputs[0]).dtype
        bounds = [ctx.constant(np.array(v, dtype), name) if np.isfinite(v) else ""
                  for name, v in (("low", node.attrs["low"]), ("high", node.attrs["high"]))]
        while bounds and not bounds[-1]:
            bounds.pop()
        ctx.node("Clip", [node.inputs[0], *bounds], node.outputs)


@register
class Pow(_Binary):
    """out = a ** b (same dtypes)."""

    op = Op.POW
    ufunc = np.power
    chain_fusable = True
    onnx_type = "Pow"

    def numpy(self, args, attrs):
        return [np.power(*args)]


class _Extremum(_Binary):
    """The element-wise extremum of two tensors (ONNX's Max/Min with two inputs)."""

    def from_onnx(self, ctx, onode):
        if len(onode.input) != 2:
            raise ctx.not_representable(f"{onode.op_type} with {len(onode.input)} inputs (einsat's takes 2)")
        return list(onode.input), {}


@register
class Maximum(_Extremum):
    """out = max(a, b); NaN if either is NaN (NumPy's maximum)."""

    op = Op.MAXIMUM
    commutative = True
    ufunc = np.maximum
    exact_in_half = True
    chain_fusable = True
    onnx_type = "Max"

    def numpy(self, args, attrs):
        return [np.maximum(*args)]


@register
class Minimum(_Extremum):
    """out = min(a, b); NaN if either is NaN (NumPy's minimum)."""

    op = Op.MINIMUM
    commutative = True
    ufunc = np.minimum
    exact_in_half = True
    chain_fusable = True
    onnx_type = "Min"

    def numpy(self, args, attrs):
        return [np.minimum(*args)]


class _Compare(_Binary):
    """A comparison: a bool tensor of the broadcast shape; both inputs of one dtype."""

    comparison = True
    dtype_of_first = False  # bool

    def infer(self, types, attrs):
        a, b = types
        same_dtype(types)
        return [TensorType(broadcast_shapes(a.shape, b.shape), np.bool_)]


def _compare(name: str, op: Op, onnx: str, fn, **flags) -> type[OpDef]:
    cls = type(name, (_Compare,), {
        "op": op, "onnx_type": onnx, "__doc__": f"out = a {name.lower()} b, element-wise", "ufunc": fn, **flags,
        "numpy": lambda self, args, attrs: [np.asarray(fn(*args), dtype=np.bool_)],
    })
    return register(cls)


Greater = _compare("Greater", Op.GREATER, "Greater", np.greater)
Less = _compare("Less", Op.LESS, "Less", np.less)
GreaterEqual = _compare("GreaterEqual", Op.GREATER_EQUAL, "GreaterOrEqual", np.greater_equal)
LessEqual = _compare("LessEqual", Op.LESS_EQUAL, "LessOrEqual", np.less_equal)
Equal = _compare("Equal", Op.EQUAL, "Equal", np.equal, commutative=True)


class _Logic(_Binary):
    """Boolean logic: bool inputs, a bool output."""

    def infer(self, types, attrs):
        if any(t.dtype != np.bool_ for t in types):
            raise ShapeError(f"logic ops take bool inputs, got {[str(t) for t in types]}")
        return super().infer(types, attrs)


def _logic(name: str, op: Op, onnx: str, fn, bitwise) -> type[OpDef]:
    """Commutative boolean logic computed by `fn`, and on bools by `bitwise` too."""
    cls = type(name, (_Logic,), {
        "op": op, "onnx_type": onnx, "__doc__": f"out = a {onnx.lower()} b, element-wise",
        "ufunc": fn, "bool_ufunc": bitwise, "commutative": True,
        "numpy": lambda self, args, attrs: [fn(*args)],
    })
    return register(cls)


LogicalAnd = _logic("LogicalAnd", Op.LOGICAL_AND, "And", np.logical_and, np.bitwise_and)
LogicalOr = _logic("LogicalOr", Op.LOGICAL_OR, "Or", np.logical_or, np.bitwise_or)
LogicalXor = _logic("LogicalXor", Op.LOGICAL_XOR, "Xor", np.logical_xor, np.bitwise_xor)


@register
class LogicalNot(_Unary):
    """out = not x (bool)."""

    op = Op.LOGICAL_NOT
    ufunc = np.logical_not
    bool_ufunc = np.invert
    onnx_type = "Not"

    def infer(self, types, attrs):
        if types[0].dtype != np.bool_:
            raise ShapeError(f"logical_not takes a bool input, got {types[0]}")
        return [types[0]]

    def numpy(self, args, attrs):
        return [np.logical_not(args[0])]


def _dtype_name(v) -> str:
    try:
        return np.dtype(v).name
    except TypeError:
        raise ValueError(f"dtype {v!r} is not a NumPy dtype name") from None


@register
class Cast(OpDef):
    """out = x.astype(dtype): NumPy's conversion (floats to ints truncate toward zero)."""

    op = Op.CAST
    dtype_of_first = False  # its attribute's
    elementwise = True
    onnx_type = "Cast"
    attrs = {"dtype": Attr("str", doc="a NumPy dtype name, e.g. 'float32'")}

    def normalize(self, attrs, types):
        attrs["dtype"] = _dtype_name(attrs["dtype"])
        return attrs

    def infer(self, types, attrs):
        return [TensorType(types[0].shape, attrs["dtype"])]

    def numpy(self, args, attrs):
        return [args[0].astype(attrs["dtype"])]

    def flops(self, ins, outs, attrs):
        return 0

    def from_onnx(self, ctx, onode):
        from onnx import helper

        to = ctx.attrs(onode)["to"]
        return [onode.input[0]], {"dtype": _dtype_name(helper.tensor_dtype_to_np_dtype(to))}

    def to_onnx(self, ctx, node):
        from onnx import helper

        ctx.node("Cast", node.inputs, node.outputs, to=helper.np_dtype_to_tensor_dtype(np.dtype(node.attrs["dtype"])))
