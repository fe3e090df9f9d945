"""Pooling over the spatial dims of [N, C, *spatial] tensors: avgpool, maxpool, global_avgpool.

Window geometry is ONNX's (and onnxruntime's). Along each spatial dim, with span = dilation·(k-1)+1
and padded = in + pad_begin + pad_end:

    out = floor((padded - span) / stride) + 1                      (ceil_mode 0)
    out = ceil((padded - span) / stride) + 1, minus one if the last
          window would start in the end padding                      (ceil_mode 1)

A ceil-mode window that runs past the padded input sees nothing there: maxpool ignores it,
avgpool divides by the number of positions inside the input (count_include_pad 0) or inside the
padded input (count_include_pad 1). `ceil_mode` is normalized to 0 whenever it adds no window, so
that a node has one canonical form (and ONNX shape inference, which lacks the "minus one" rule,
agrees with every exported node).
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.expr import Call, Const, Expr
from einsat.ir.expr.build import iters, read, window
from einsat.ir.ops.conv import conv_out_dims, onnx_window_attrs, same_pads, spatial_attrs, windows
from einsat.ir.ops.onnx_args import first_output_only
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, one_of, positive, register
from einsat.ir.types import TensorType


def pool_out_dims(in_dims, kernel, stride, dilation, padding, ceil_mode) -> tuple[int, ...]:
    nsp = len(in_dims)
    for i in range(nsp):  # onnxruntime's rule for pooling
        if max(padding[i], padding[nsp + i]) >= kernel[i]:
            raise ShapeError(f"spatial dim {i}: padding {padding[i]}+{padding[nsp + i]} must be smaller "
                             f"than the kernel {kernel[i]}")
    return conv_out_dims(in_dims, kernel, stride, dilation, padding, ceil_mode, window="window")


def _pool_attrs(attrs, types, names):
    x = types[0]
    if x is None or x.rank < 3:
        raise ShapeError(f"pooling needs an input [N, C, *spatial], got {x}")
    nsp = x.rank - 2
    attrs = spatial_attrs(attrs, nsp, names)
    floor = pool_out_dims(x.shape[2:], attrs["kernel"], attrs["stride"], attrs.get("dilation", (1,) * nsp),
                          attrs["padding"], 0)
    ceil = pool_out_dims(x.shape[2:], attrs["kernel"], attrs["stride"], attrs.get("dilation", (1,) * nsp),
                         attrs["padding"], 1)
    if attrs["ceil_mode"] and ceil == floor:
        attrs["ceil_mode"] = 0
    return attrs


def _pool_reduce(x, kernel, stride, dilation, padding, out_dims, fill, ufunc):
    """`ufunc`-reduce every window of x padded with `fill` (and, for ceil mode, extended at the
    end with `fill` so that the last window exists): one strided, vectorized step per kernel
    offset. Returns the result [N, C, *out] and the end pads used."""
    nsp = x.ndim - 2
    ends = [max(padding[nsp + i], (out_dims[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
                - x.shape[2 + i] - padding[i]) for i in range(nsp)]
    widths = [(0, 0), (0, 0)] + [(padding[i], ends[i]) for i in range(nsp)]
    xp = np.pad(x, widths, constant_values=fill) if any(w != (0, 0) for w in widths) else x
    out = None
    for koff in np.ndindex(*kernel):
        taps = xp[(Ellipsis,) + tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                                      for k, d, o, s in zip(koff, dilation, out_dims, stride))]
        out = taps.copy() if out is None else ufunc(out, taps, out=out)
    return out, ends


def _from_onnx_pool(ctx, onode, with_dilation: bool):
    a = ctx.attrs(onode)
    first_output_only(ctx, onode)
    x = ctx.type(onode.input[0])
    kernel = tuple(a["kernel_shape"])
    stride, dilation, pads, auto = onnx_window_attrs(a, len(kernel))
    if not with_dilation and any(d != 1 for d in dilation):
        raise ctx.not_representable(f"{onode.op_type} with dilations {dilation}")
    if a.get("storage_order", 0):
        raise ctx.not_representable("MaxPool with storage_order=1")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(x.shape[2:], kernel, stride, dilation, upper=auto == "SAME_UPPER")
    attrs = {"kernel": kernel, "stride": stride, "padding": pads, "ceil_mode": a.get("ceil_mode", 0)}
    if with_dilation:
        attrs["dilation"] = dilation
    else:
        attrs["count_include_pad"] = a.get("count_include_pad", 0)
    return [onode.input[0]], attrs


_BIT = one_of(0, 1)


def pool_expression(out_shape, kernel, attrs, reduce: str) -> Expr:
    """L_{n,c,o} Σ_k x[n, c, o·stride + k·dilation − pad] / |k| (reduce "sum": the mean) or
    max_k x[...] (reduce "max")."""
    loops = iters("o", out_shape)
    taps = iters("k", kernel)
    nsp = len(kernel)
    dil = attrs.get("dilation", (1,) * nsp)
    idx = [window(o, k, s, d, p) for o, k, s, d, p in zip(loops[2:], taps, attrs["stride"], dil,
                                                         attrs["padding"][:nsp])]
    x = read(0, loops[0].name, loops[1].name, *idx)
    body = x if reduce == "max" else Call("mul", (x, Const(1.0 / prod(kernel))))
    return Expr(loops, taps, body, reduce)


@register
class AvgPool(OpDef):
    """The mean of each window (ONNX AveragePool without dilation)."""

    op = Op.AVGPOOL
    per_position = True
    nchwc = "blocked"
    multilinear = True
    onnx_type = "AveragePool"
    attrs = {
        "kernel": Attr("ints", check=positive),
        "stride": Attr("ints", (1,), positive),
        "padding": Attr("ints", (0,), non_negative, "ONNX pads: begins, then ends"),
        "count_include_pad": Attr("int", 0, _BIT),
        "ceil_mode": Attr("int", 0, _BIT),
    }

    def normalize(self, attrs, types):
        return _pool_attrs(attrs, types, ("kernel", "stride"))

    def infer(self, types, attrs):
        x = types[0]
        dims = pool_out_dims(x.shape[2:], attrs["kernel"], attrs["stride"], (1,) * (x.rank - 2),
                             attrs["padding"], attrs["ceil_mode"])
        return [TensorType(x.shape[:2] + dims, x.dtype)]

    def numpy(self, args, attrs):
        x = args[0]
        nsp = x.ndim - 2
        k, s, p = attrs["kernel"], attrs["stride"], attrs["padding"]
        ones = (1,) * nsp
        out_dims = self.infer([TensorType.of(x)], attrs)[0].shape[2:]
        total, ends = _pool_reduce(x, k, s, ones, p, out_dims, 0, np.add)
        # the divisor: positions of each window inside the input (or the padded input)
        mask = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
        widths = [(0, 0), (0, 0)] + [(p[i], ends[i]) for i in range(nsp)]
        if attrs["count_include_pad"]:
            inside = [(0, 0), (0, 0)] + [(p[i], p[nsp + i]) for i in range(nsp)]
            mask = np.pad(mask, inside, constant_values=1)
            widths = [(0, 0), (0, 0)] + [(0, ends[i] - p[nsp + i]) for i in range(nsp)]
        mask = np.pad(mask, widths)
        count = windows(mask, k, s, ones, (0,) * 2 * nsp)
        count = count[(Ellipsis,) + tuple(slice(0, o) for o in out_dims) + (slice(None),) * nsp]
        count = count.sum(axis=tuple(range(-nsp, 0)))
        return [(total / count).astype(x.dtype)]

    def expression(self, inputs, attrs):
        """The window mean, when every divisor is the kernel size (padding counted, no partial
        ceil-mode window)."""
        if attrs["ceil_mode"] or (any(attrs["padding"]) and not attrs["count_include_pad"]):
            return None
        return pool_expression(self.infer(inputs, attrs)[0].shape, attrs["kernel"], attrs, "sum")

    def flops(self, ins, outs, attrs):
        """One add per window element, one divide per output."""
        return outs[0].size * (prod(attrs["kernel"]) + 1)

    def from_onnx(self, ctx, onode):
        return _from_onnx_pool(ctx, onode, with_dilation=False)

    def to_onnx(self, ctx, node):
        a = node.attrs
        ctx.node("AveragePool", node.inputs, node.outputs, kernel_shape=a["kernel"], strides=a["stride"],
                 pads=a["padding"], count_include_pad=a["count_include_pad"], ceil_mode=a["ceil_mode"])


@register
class MaxPool(OpDef):
    """The maximum of each (dilated) window; padding never wins (ONNX MaxPool, first output)."""

    op = Op.MAXPOOL
    exact_in_half = True
    nchwc = "blocked"
    onnx_type = "MaxPool"
    attrs = {
        "kernel": Attr("ints", check=positive),
        "stride": Attr("ints", (1,), positive),
        "padding": Attr("ints", (0,), non_negative, "ONNX pads: begins, then ends"),
        "dilation": Attr("ints", (1,), positive),
        "ceil_mode": Attr("int", 0, _BIT),
    }

    def normalize(self, attrs, types):
        return _pool_attrs(attrs, types, ("kernel", "stride", "dilation"))

    def infer(self, types, attrs):
        x = types[0]
        dims = pool_out_dims(x.shape[2:], attrs["kernel"], attrs["stride"], attrs["dilation"],
                             attrs["padding"], attrs["ceil_mode"])
        return [TensorType(x.shape[:2] + dims, x.dtype)]

    def numpy(self, args, attrs):
        x = args[0]
        out_dims = self.infer([TensorType.of(x)], attrs)[0].shape[2:]
        lowest = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
        out, _ = _pool_reduce(x, attrs["kernel"], attrs["stride"], attrs["dilation"], attrs["padding"],
                              out_dims, lowest, np.maximum)
        return [out]

    def expression(self, inputs, attrs):
        """The window maximum, without padding (expressions pad with 0, maxpool with -inf)."""
        if attrs["ceil_mode"] or any(attrs["padding"]):
            return None
        return pool_expression(self.infer(inputs, attrs)[0].shape, attrs["kernel"], attrs, "max")

    def flops(self, ins, outs, attrs):
        """One comparison per window element."""
        return outs[0].size * prod(attrs["kernel"])

    def from_onnx(self, ctx, onode):
        return _from_onnx_pool(ctx, onode, with_dilation=True)

    def to_onnx(self, ctx, node):
        a = node.attrs
        ctx.node("MaxPool", node.inputs, node.outputs, kernel_shape=a["kernel"], strides=a["stride"],
                 pads=a["padding"], dilations=a["dilation"], ceil_mode=a["ceil_mode"])


@register
class GlobalAvgPool(OpDef):
    """The mean over all spatial dims: [N, C, *spatial] -> [N, C, 1, ..., 1]."""

    op = Op.GLOBAL_AVGPOOL
    nchwc = "carried"
    multilinear = True
    onnx_type = "GlobalAveragePool"

    def infer(self, types, attrs):
        x = types[0]
        if x.rank < 3:
            raise ShapeError(f"global_avgpool needs an input [N, C, *spatial], got {x}")
        return [TensorType(x.shape[:2] + (1,) * (x.rank - 2), x.dtype)]

    def numpy(self, args, attrs):
        x = args[0]
        return [np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True, dtype=x.dtype)]

    def expression(self, inputs, attrs):
        x = inputs[0]
        loops = iters("o", x.shape[:2] + (1,) * (x.rank - 2))
        sp = iters("k", x.shape[2:])
        body = Call("mul", (read(0, loops[0].name, loops[1].name, *(k.name for k in sp)),
                            Const(1.0 / prod(x.shape[2:]))))
        return Expr(loops, sp, body)

    def flops(self, ins, outs, attrs):
        """One add per input element, one divide per output."""
        return ins[0].size + outs[0].size
