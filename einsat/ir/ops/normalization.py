"""Normalizations: batchnorm (inference form), layernorm, rmsnorm, softmax, lrn.

    batchnorm(x, scale, bias, mean, var)[n, c, ...] = (x - mean[c]) · scale[c] / sqrt(var[c] + eps) + bias[c]
    layernorm(x, scale, bias) = (x - E[x]) / sqrt(Var[x] + eps) · scale + bias,
        E and Var (biased) over the dims axis..rank-1, computed in float32 at least
    rmsnorm(x, scale) = x / sqrt(E[x²] + eps) · scale, E over the dims axis..rank-1, in float32 at least
    softmax(x)[..] = exp(x - max) / sum(exp(x - max)) along `axis`
    lrn(x)[n, c, ...] = x[n, c, ...] / (bias + alpha / size · Σ_{c' ∈ window(c)} x[n, c', ...]²) ** beta,
        window(c) = [c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉] ∩ channels (ONNX LRN, AlexNet's)
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.expr import build
from einsat.ir.ops.onnx_args import first_output_only
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, normalize_axis, register, same_dtype
from einsat.ir.types import TensorType, is_float


def broadcasts_to(shape, target) -> bool:
    """Whether `shape` broadcasts to `target` (unidirectionally)."""
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))


def _axis(attrs, types):
    x = types[0]
    if x is not None:
        attrs["axis"] = normalize_axis(attrs["axis"], x.rank)
    return attrs


@register
class BatchNorm(OpDef):
    """Inference-form batch normalization over channel dim 1 (ONNX BatchNormalization,
    training_mode 0). Affine in x, hence not flagged multi-linear."""

    op = Op.BATCHNORM
    per_position = True
    shape_of_first = True
    parameter_inputs = (1, 2, 3, 4)  # scale, bias, mean, var
    nchwc = "carried"
    arity = (5, 5)
    onnx_type = "BatchNormalization"
    attrs = {"epsilon": Attr("float", 1e-5, non_negative)}

    def infer(self, types, attrs):
        x = types[0]
        if x.rank < 2:
            raise ShapeError(f"batchnorm needs an input [N, C, ...], got {x}")
        for name, t in zip(("scale", "bias", "mean", "var"), types[1:]):
            if t.shape != (x.shape[1],):
                raise ShapeError(f"{name} {t} must be [{x.shape[1]}] (one value per channel)")
        return [TensorType(x.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        x, scale, bias, mean, var = args
        shape = (1, -1) + (1,) * (x.ndim - 2)
        inv = scale / np.sqrt(var + np.asarray(attrs["epsilon"], var.dtype))
        y = (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """2 per element (one multiply-add once the per-channel factors are folded) + 4 per channel."""
        return 2 * outs[0].size + 4 * ins[1].size

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        if a.get("training_mode", 0):
            raise ctx.not_representable("BatchNormalization in training mode")
        first_output_only(ctx, onode)
        return list(onode.input), {"epsilon": a.get("epsilon", 1e-5)}

    def to_onnx(self, ctx, node):
        ctx.node("BatchNormalization", node.inputs, node.outputs, epsilon=node.attrs["epsilon"])


@register
class LayerNorm(OpDef):
    """Normalization over the trailing dims from `axis` (ONNX LayerNormalization, first output);
    scale and bias broadcast to x.shape[axis:]."""

    op = Op.LAYERNORM
    shape_of_first = True
    chain_fusable = True
    arity = (2, 3)
    onnx_type = "LayerNormalization"
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5, non_negative)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        x = types[0]
        if x.rank == 0:
            raise ShapeError("layernorm needs an input of rank >= 1")
        norm = x.shape[attrs["axis"]:]
        for name, t in zip(("scale", "bias"), types[1:]):
            if t is not None and not broadcasts_to(t.shape, norm):
                raise ShapeError(f"{name} {t} does not broadcast to the normalized dims {list(norm)}")
        return [TensorType(x.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        x, scale = args[0], args[1]
        bias = args[2] if len(args) > 2 else None
        axes = tuple(range(attrs["axis"], x.ndim))
        xf = x.astype(np.promote_types(x.dtype, np.float32), copy=False)
        mean = xf.mean(axis=axes, keepdims=True)
        d = xf - mean
        var = (d * d).mean(axis=axes, keepdims=True)
        y = d / np.sqrt(var + np.asarray(attrs["epsilon"], xf.dtype)) * scale
        if bias is not None:
            y = y + bias
        return [y.astype(x.dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """8 per element: mean (1), centre (1), square and sum (2), divide (2), scale and shift (2)."""
        return 8 * outs[0].size

    def expression(self, inputs, attrs):
        """The mean and variance as scopes over the leading dims, then the normalized value
        (`expr.build.layernorm`): how a fused eOperator reads it."""
        bias = inputs[2].shape if len(inputs) > 2 and inputs[2] is not None else None
        return build.layernorm(inputs[0].shape, attrs["axis"], attrs["epsilon"], inputs[1].shape, bias)

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        first_output_only(ctx, onode)
        return list(onode.input), {"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)}

    def to_onnx(self, ctx, node):
        ctx.node("LayerNormalization", node.inputs, node.outputs, axis=node.attrs["axis"],
                 epsilon=node.attrs["epsilon"])


@register
class RMSNorm(OpDef):
    """Root-mean-square normalization over the trailing dims from `axis` (ONNX RMSNormalization,
    opset 23; Llama's, Qwen2's and Mistral's norm): x / sqrt(mean(x²) + eps) · scale, the
    statistics (and the product) in float32 at least, as stash_type 1 asks; scale broadcasts to
    x.shape[axis:]."""

    op = Op.RMSNORM
    shape_of_first = True
    chain_fusable = True
    arity = (2, 2)
    onnx_type = "RMSNormalization"  # ONNX opset 23
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5, non_negative)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        x, scale = types[0], types[1]
        if x.rank == 0:
            raise ShapeError("rmsnorm needs an input of rank >= 1")
        norm = x.shape[attrs["axis"]:]
        if not broadcasts_to(scale.shape, norm):
            raise ShapeError(f"scale {scale} does not broadcast to the normalized dims {list(norm)}")
        return [TensorType(x.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        x, scale = args
        axes = tuple(range(attrs["axis"], x.ndim))
        xf = x.astype(np.promote_types(x.dtype, np.float32), copy=False)
        ms = (xf * xf).mean(axis=axes, keepdims=True)
        y = xf / np.sqrt(ms + np.asarray(attrs["epsilon"], xf.dtype)) * scale.astype(xf.dtype, copy=False)
        return [y.astype(x.dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """4 per element: square and sum (2), divide (1), scale (1)."""
        return 4 * outs[0].size

    def expression(self, inputs, attrs):
        """The sum of squares as a scope over the leading dims, then the normalized value
        (`expr.build.rmsnorm`): how a fused eOperator reads it."""
        return build.rmsnorm(inputs[0].shape, attrs["axis"], attrs["epsilon"], inputs[1].shape)

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        if a.get("stash_type", 1) != 1 and np.dtype(ctx.type(onode.input[0]).dtype).itemsize < 4:
            raise ctx.not_representable("RMSNormalization computing a half input in its own type (stash_type != 1)")
        return list(onode.input), {"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)}

    def to_onnx(self, ctx, node):
        """RMSNormalization where the export's opset has it (23), else the minimal chain
        Mul(x, x), ReduceMean, Add(eps), Sqrt, Div, Mul(scale), in float32 for a half input (Casts
        around it): no view."""
        (x, scale), (y,) = node.inputs, node.outputs
        axis, eps = node.attrs["axis"], node.attrs["epsilon"]
        if ctx.opset >= 23:
            ctx.node("RMSNormalization", [x, scale], [y], axis=axis, epsilon=eps)
            return
        t = ctx.type(x)
        half = np.dtype(t.dtype).itemsize < 4
        dt = np.float32 if half else t.dtype
        xf, sf = x, scale
        if half:
            from onnx import helper  # here: einsat's NumPy runs never load onnx
            f32 = helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))
            (xf,) = ctx.node("Cast", [x], [ctx.fresh("x32")], to=f32)
            (sf,) = ctx.node("Cast", [scale], [ctx.fresh("scale32")], to=f32)
        (sq,) = ctx.node("Mul", [xf, xf], [ctx.fresh("square")])
        (ms,) = ctx.reduce("ReduceMean", sq, range(axis, t.rank), ctx.fresh("mean_square"), keepdims=1)
        (ms,) = ctx.node("Add", [ms, ctx.constant(np.array(eps, dt), "epsilon")], [ctx.fresh("plus_eps")])
        (rms,) = ctx.node("Sqrt", [ms], [ctx.fresh("rms")])
        (n,) = ctx.node("Div", [xf, rms], [ctx.fresh("normalized")])
        if half:
            (yf,) = ctx.node("Mul", [n, sf], [ctx.fresh("scaled")])
            ctx.node("Cast", [yf], [y], to=helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)))
        else:
            ctx.node("Mul", [n, sf], [y])


@register
class Softmax(OpDef):
    """Softmax along one axis (ONNX Softmax, opset 13 semantics)."""

    op = Op.SOFTMAX
    shape_of_first = True
    chain_fusable = True
    onnx_type = "Softmax"
    attrs = {"axis": Attr("int", -1)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        if types[0].rank == 0:
            raise ShapeError("softmax needs an input of rank >= 1")
        return [types[0]]

    def numpy(self, args, attrs):
        x = args[0]
        e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
        return [(e / e.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """5 per element: max, subtract, exp, sum, divide."""
        return 5 * outs[0].size

    def expression(self, inputs, attrs):
        """The row max and the row sum as scopes, then exp(x - max) / sum (`expr.build.softmax`)."""
        return build.softmax(inputs[0].shape, attrs["axis"])

    def from_onnx(self, ctx, onode):
        return [onode.input[0]], {"axis": ctx.attrs(onode).get("axis", -1)}

    def to_onnx(self, ctx, node):
        ctx.node("Softmax", node.inputs, node.outputs, axis=node.attrs["axis"])


@register
class LRN(OpDef):
    """Local response normalization across channels (dim 1), as the ONNX spec defines it."""

    op = Op.LRN
    onnx_type = "LRN"
    attrs = {"size": Attr("int", check=lambda v: None if v > 0 else "must be positive"),
             "alpha": Attr("float", 1e-4), "beta": Attr("float", 0.75), "bias": Attr("float", 1.0)}

    def infer(self, types, attrs):
        x = types[0]
        if x.rank < 3 or not is_float(x.dtype):
            raise ShapeError(f"lrn takes a floating-point [N, C, *spatial] input, got {x}")
        return [x]

    def numpy(self, args, attrs):
        x, size = args[0], attrs["size"]
        c = x.shape[1]
        lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
        sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
        total = sum(sq[:, k:k + c] for k in range(size))
        scale = x.dtype.type(attrs["bias"]) + x.dtype.type(attrs["alpha"] / size) * total
        return [(x / scale ** x.dtype.type(attrs["beta"])).astype(x.dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """A square and `size` adds per element, then the scale, its power and the divide."""
        return (attrs["size"] + 5) * outs[0].size

    def to_onnx(self, ctx, node):
        """ONNX LRN where onnxruntime runs it (rank 4, an odd size; other ranks are reshaped to
        [N, C, prod(spatial), 1], the sum running across channels alone). An even size, which
        onnxruntime refuses, is written out: the channel window's sum of squares as an average pool
        over [N, 1, C, prod(spatial)] padded (size-1)//2 before and size//2 after, then
        x / (bias + alpha * mean)^beta."""
        (x,), (y,) = node.inputs, node.outputs
        t = ctx.type(x)
        shape, a = t.shape, node.attrs
        if a["size"] % 2:
            attrs = {k: a[k] for k in ("size", "alpha", "beta", "bias")}
            if len(shape) == 4:
                ctx.node("LRN", [x], [y], **attrs)
                return
            flat = (shape[0], shape[1], prod(shape[2:]), 1)
            (x4,) = ctx.node("Reshape", [x, ctx.constant(np.array(flat, np.int64), "shape")], [ctx.fresh("x4")])
            (y4,) = ctx.node("LRN", [x4], [ctx.fresh("y4")], **attrs)
            ctx.node("Reshape", [y4, ctx.constant(np.array(shape, np.int64), "shape")], [y])
            return
        size, lo = a["size"], (a["size"] - 1) // 2
        scalar = lambda v, hint: ctx.constant(np.array(v, t.dtype), hint)
        (sq,) = ctx.node("Mul", [x, x], [ctx.fresh("sq")])
        flat = np.array((shape[0], 1, shape[1], prod(shape[2:])), np.int64)
        (sq,) = ctx.node("Reshape", [sq, ctx.constant(flat, "shape")], [ctx.fresh("sq4")])
        (mean,) = ctx.node("AveragePool", [sq], [ctx.fresh("mean")], kernel_shape=(size, 1),
                           pads=(lo, 0, size - 1 - lo, 0), count_include_pad=1)
        (mean,) = ctx.node("Reshape", [mean, ctx.constant(np.array(shape, np.int64), "shape")], [ctx.fresh("m")])
        (scale,) = ctx.node("Mul", [mean, scalar(a["alpha"], "alpha")], [ctx.fresh("scaled")])
        (scale,) = ctx.node("Add", [scale, scalar(a["bias"], "bias")], [ctx.fresh("scale")])
        (scale,) = ctx.node("Pow", [scale, scalar(a["beta"], "beta")], [ctx.fresh("power")])
        ctx.node("Div", [x, scale], [y])
