"""Convolution (strided, dilated, grouped; any number of spatial dims).

Layouts are ONNX's: input [N, C, *spatial], weight [F, C/groups, *kernel], bias [F].
`padding` is ONNX's `pads`: all begins, then all ends.
"""

from __future__ import annotations

from math import prod

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from einsat.ir.expr import Call, Expr, var
from einsat.ir.expr.build import epilogue, iters, read, window
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, positive, register, same_dtype
from einsat.ir.types import TensorType

# im2col buffers above this many bytes are built one batch slice at a time
IM2COL_BYTES = 256 << 20


def spatial_attrs(attrs, nsp: int, names=("stride", "dilation")) -> dict:
    """Expand int / per-dim shorthands: stride=2 -> (2, 2); padding=1 -> (1, 1, 1, 1);
    padding=(1, 2) -> (1, 2, 1, 2)."""
    out = dict(attrs)
    for name in names:
        v = out[name]
        if len(v) == 1 and nsp != 1:
            v = v * nsp
        if len(v) != nsp:
            raise ShapeError(f"{name}={v} needs {nsp} values, one per spatial dim")
        out[name] = v
    p = out.get("padding")
    if p is not None:
        if len(p) == 1:
            p = p * (2 * nsp)
        elif len(p) == nsp:
            p = p + p
        if len(p) != 2 * nsp:
            raise ShapeError(f"padding={p} needs {2 * nsp} values (begins, then ends)")
        out["padding"] = p
    return out


def conv_out_dims(in_dims, kernel, stride, dilation, padding, ceil_mode: bool = False,
                  window: str = "dilated kernel") -> tuple[int, ...]:
    """Output spatial dims of a sliding window (conv, pooling). With `ceil_mode`, a last partial
    window counts if it starts inside the input or its begin padding (ONNX pooling)."""
    nsp = len(in_dims)
    out = []
    for i in range(nsp):
        span = dilation[i] * (kernel[i] - 1) + 1
        padded = in_dims[i] + padding[i] + padding[nsp + i]
        if padded < span:
            raise ShapeError(f"spatial dim {i}: padded size {padded} is smaller than the {window} {span}")
        n = (padded - span) // stride[i] + 1
        if ceil_mode:
            n = -(-(padded - span) // stride[i]) + 1
            if (n - 1) * stride[i] >= in_dims[i] + padding[i]:
                n -= 1
        out.append(n)
    return tuple(out)


def windows(x: np.ndarray, kernel, stride, dilation, padding) -> np.ndarray:
    """A strided view [N, C, *out, *kernel] of x's (padded) sliding windows: no copy but padding."""
    nsp = x.ndim - 2
    pads = [(0, 0), (0, 0)] + [(padding[i], padding[nsp + i]) for i in range(nsp)]
    if any(padding):
        x = np.pad(x, pads)
    span = tuple(dilation[i] * (kernel[i] - 1) + 1 for i in range(nsp))
    v = sliding_window_view(x, span, axis=tuple(range(2, 2 + nsp)))
    idx = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride) \
        + tuple(slice(None, None, d) for d in dilation)
    return v[idx]


def conv_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride, dilation, padding, groups):
    """im2col as a strided view, then one batched BLAS matmul per batch slice."""
    n, c = x.shape[:2]
    f, cg = w.shape[:2]
    kernel = w.shape[2:]
    nsp = len(kernel)
    v = windows(x, kernel, stride, dilation, padding)          # [N, C, *out, *k]
    out_dims = v.shape[2:2 + nsp]
    npix, kk = prod(out_dims), prod(kernel)
    v = v.reshape((n, groups, cg) + out_dims + tuple(kernel))
    # -> [N, G, *out, Cg, *k]
    v = v.transpose((0, 1) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp)))
    wm = w.reshape(groups, f // groups, cg * kk).transpose(0, 2, 1)  # [G, Cg*k, Fg]
    per_item = groups * npix * cg * kk * x.dtype.itemsize
    step = max(1, IM2COL_BYTES // max(per_item, 1))
    y = np.empty((n, groups, npix, f // groups), dtype=np.result_type(x, w))
    for s in range(0, n, step):
        cols = v[s:s + step].reshape(-1, groups, npix, cg * kk)
        np.matmul(cols, wm, out=y[s:s + step])
    y = y.transpose(0, 1, 3, 2).reshape((n, f) + out_dims)
    if b is not None:
        y = y + b.reshape((1, f) + (1,) * nsp)
    return np.ascontiguousarray(y)


def grouped_loops(out_shape, groups: int, cg: int, fg: int):
    """(traversals n, f, *spatial; the channel summation c; the input channel (f // Fg)·Cg + c)
    of a grouped window op's expression."""
    loops = iters("o", out_shape)
    c = iters("c", (cg,))
    chan = var(c[0].name) + (var(loops[1].name).floordiv(fg) * cg if groups > 1 else 0)
    return loops, c, chan


def conv_expression(ins, out_shape, attrs) -> Expr:
    """L_{n,f,o} Σ_{c,k} x[n, (f // Fg)·Cg + c, o·stride + k·dilation − pad] · w[f, c, k], plus
    bias[f] (a scope) when there is a bias input."""
    x, w = ins[0], ins[1]
    nsp, g = x.rank - 2, attrs["groups"]
    loops, c, chan = grouped_loops(out_shape, g, w.shape[1], w.shape[0] // g)
    n, f, sp = loops[0], loops[1], loops[2:]
    taps = iters("k", w.shape[2:])
    xs = [window(o, k, s, d, p) for o, k, s, d, p in zip(sp, taps, attrs["stride"], attrs["dilation"],
                                                         attrs["padding"][:nsp])]
    body = Call("mul", (read(0, n.name, chan, *xs), read(1, f.name, c[0].name, *(k.name for k in taps))))
    core = Expr(loops, c + taps, body)
    if len(ins) > 2 and ins[2] is not None:
        return epilogue(core, loops, read(2, f.name))
    return core


CONV_ATTRS = {
    "stride": Attr("ints", (1,), positive),
    "padding": Attr("ints", (0,), non_negative, "ONNX pads: begins, then ends"),
    "dilation": Attr("ints", (1,), positive),
    "groups": Attr("int", 1, positive),
}


@register
class Conv(OpDef):
    op = Op.CONV
    stacks = True
    per_position = True
    matched = 3
    derivable = True
    nchwc = "blocked"
    packed_inputs = (1, 2)  # the weight and the bias
    tensor_core = "conv"
    arity = (2, 3)
    multilinear = True  # in the input and in the weight (bias aside)
    onnx_type = "Conv"
    attrs = CONV_ATTRS

    def normalize(self, attrs, types):
        w = types[1]
        if w is None or w.rank < 3:
            raise ShapeError(f"the weight must be [F, C/groups, *kernel], got {w}")
        return spatial_attrs(attrs, w.rank - 2, ("stride", "dilation"))

    def infer(self, types, attrs):
        x, w = types[0], types[1]
        bias = types[2] if len(types) > 2 else None
        g = attrs["groups"]
        if x.rank != w.rank:
            raise ShapeError(f"input {x} and weight {w} must have the same rank")
        if x.shape[1] != w.shape[1] * g:
            raise ShapeError(f"input channels {x.shape[1]} != weight channels {w.shape[1]} x groups {g}")
        if w.shape[0] % g:
            raise ShapeError(f"output channels {w.shape[0]} are not divisible by groups {g}")
        if bias is not None and bias.shape != (w.shape[0],):
            raise ShapeError(f"bias {bias} must be [{w.shape[0]}]")
        dims = conv_out_dims(x.shape[2:], w.shape[2:], attrs["stride"], attrs["dilation"], attrs["padding"])
        return [TensorType((x.shape[0], w.shape[0]) + dims, same_dtype(types))]

    def numpy(self, args, attrs):
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else None
        return [conv_numpy(x, w, b, attrs["stride"], attrs["dilation"], attrs["padding"], attrs["groups"])]

    def expression(self, inputs, attrs):
        return conv_expression(inputs, self.infer(inputs, attrs)[0].shape, attrs)

    def flops(self, ins, outs, attrs):
        w = ins[1]
        macs = outs[0].size * prod(w.shape[1:])
        return 2 * macs + (outs[0].size if len(ins) > 2 and ins[2] is not None else 0)

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        x, w = ctx.type(onode.input[0]), ctx.type(onode.input[1])
        stride, dilation, pads, auto = onnx_window_attrs(a, w.rank - 2)
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = same_pads(x.shape[2:], w.shape[2:], stride, dilation, upper=auto == "SAME_UPPER")
        attrs = {"stride": stride, "dilation": dilation, "padding": pads, "groups": a.get("group", 1)}
        return [i for i in onode.input], attrs

    def to_onnx(self, ctx, node):
        a = node.attrs
        ctx.node("Conv", node.inputs, node.outputs, strides=a["stride"], pads=a["padding"],
                 dilations=a["dilation"], group=a["groups"])


def onnx_window_attrs(a: dict, nsp: int) -> tuple[tuple, tuple, tuple, str]:
    """The window geometry of an ONNX Conv, ConvTranspose or pooling node, ONNX's defaults filled
    in: (strides, dilations, pads, auto_pad). auto_pad VALID gives zero pads; SAME_UPPER /
    SAME_LOWER pads depend on the op's output size and are left to the caller."""
    stride = tuple(a.get("strides", (1,) * nsp))
    dilation = tuple(a.get("dilations", (1,) * nsp))
    auto = a.get("auto_pad", "NOTSET")
    pads = (0,) * 2 * nsp if auto == "VALID" else tuple(a.get("pads", (0,) * 2 * nsp))
    return stride, dilation, pads, auto


def same_pads(in_dims, kernel, stride, dilation, upper: bool) -> tuple[int, ...]:
    """ONNX auto_pad SAME_UPPER / SAME_LOWER as explicit pads."""
    begins, ends = [], []
    for d, k, s, dl in zip(in_dims, kernel, stride, dilation):
        out = -(-d // s)
        total = max(0, (out - 1) * s + dl * (k - 1) + 1 - d)
        small, big = total // 2, total - total // 2
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return tuple(begins + ends)
