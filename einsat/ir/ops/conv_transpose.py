"""Transposed convolution (ONNX ConvTranspose): the adjoint of a strided, dilated, grouped conv.

Layouts are ONNX's: input [N, C, *spatial], weight [C, F/groups, *kernel], bias [F]. Each input
pixel scatters `x[n, c, p] · w[c, f, k]` to output position `p·stride + k·dilation - pad_begin`;
along each spatial dim the output has

    out = stride·(in - 1) + output_padding + dilation·(kernel - 1) + 1 - pad_begin - pad_end

entries (`output_padding` < stride adds zeros, plus bias, at the end). The NumPy semantics is col2im:
one batched BLAS matmul gives every (pixel, kernel offset) product, then a strided add per kernel
offset places them (no loop over pixels).
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.expr import Call, Expr, Guard, var
from einsat.ir.expr.build import epilogue, iters, read
from einsat.ir.ops.conv import CONV_ATTRS, IM2COL_BYTES, grouped_loops, onnx_window_attrs, spatial_attrs
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, register, same_dtype
from einsat.ir.types import TensorType

_SPATIAL = ("stride", "dilation", "output_padding")


def conv_transpose_out_dims(in_dims, kernel, stride, dilation, padding, output_padding) -> tuple[int, ...]:
    nsp = len(in_dims)
    out = []
    for i in range(nsp):
        if output_padding[i] >= stride[i]:  # onnxruntime's rule (PyTorch also allows < dilation)
            raise ShapeError(f"spatial dim {i}: output_padding {output_padding[i]} must be smaller than "
                             f"the stride {stride[i]}")
        full = stride[i] * (in_dims[i] - 1) + output_padding[i] + dilation[i] * (kernel[i] - 1) + 1
        d = full - padding[i] - padding[nsp + i]
        if d < 1:
            raise ShapeError(f"spatial dim {i}: padding {padding[i]}+{padding[nsp + i]} leaves no output "
                             f"of the full size {full}")
        out.append(d)
    return tuple(out)


def conv_transpose_numpy(x, w, b, stride, dilation, padding, output_padding, groups) -> np.ndarray:
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nsp = len(sp)
    fg, kernel = w.shape[1], w.shape[2:]
    cg, kk, npix = c // groups, prod(kernel), prod(sp)
    out_dims = conv_transpose_out_dims(sp, kernel, stride, dilation, padding, output_padding)
    full = [(sp[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 for i in range(nsp)]
    buf_dims = tuple(max(full[i], padding[i] + out_dims[i]) for i in range(nsp))
    dtype = np.result_type(x, w)
    buf = np.zeros((n, groups, fg) + buf_dims, dtype=dtype)
    wt = w.reshape(groups, cg, fg * kk).transpose(0, 2, 1)           # [G, Fg*K, Cg]
    xr = x.reshape(n, groups, cg, npix)                                # [N, G, Cg, P]
    step = max(1, IM2COL_BYTES // max(groups * fg * kk * npix * dtype.itemsize, 1))
    for s in range(0, n, step):
        cols = np.matmul(wt, xr[s:s + step])                           # [n', G, Fg*K, P]
        cols = cols.reshape(cols.shape[:2] + (fg,) + tuple(kernel) + tuple(sp))
        for koff in np.ndindex(*kernel):                               # scatter: one strided add per offset
            dst = tuple(slice(k * d, k * d + (m - 1) * st + 1, st)
                        for k, d, m, st in zip(koff, dilation, sp, stride))
            src = cols[(Ellipsis,) + koff + (slice(None),) * nsp]
            buf[(slice(s, s + step), slice(None), slice(None)) + dst] += src
    crop = tuple(slice(padding[i], padding[i] + out_dims[i]) for i in range(nsp))
    y = buf[(Ellipsis,) + crop].reshape((n, groups * fg) + out_dims)
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nsp)
    return np.asarray(y, order="C")


def conv_transpose_expression(ins, out_shape, attrs) -> Expr:
    """The gather form over input pixels: L_{n,f,o} Σ_{c,p} x[n, chan, p] · w[chan, f % Fg, k]
    with chan = (f // Fg)·Cg + c and k = (o + pad − p·stride) / dilation (a guard keeps the
    terms where the division is exact); taps outside the kernel read 0 (plus bias[f])."""
    x, w = ins[0], ins[1]
    nsp, g = x.rank - 2, attrs["groups"]
    fg = w.shape[1]
    loops, c, chan = grouped_loops(out_shape, g, x.shape[1] // g, fg)
    n, f, sp = loops[0], loops[1], loops[2:]
    pix = iters("p", x.shape[2:])
    wf = var(f.name).mod(fg) if g > 1 else var(f.name)
    taps, guards = [], []
    for o, p, s, d, pad in zip(sp, pix, attrs["stride"], attrs["dilation"], attrs["padding"][:nsp]):
        k = var(o.name) - var(p.name) * s + pad
        taps.append(k.floordiv(d))
        if d > 1:
            guards.append(k.mod(d))
    body = Call("mul", (read(0, n.name, chan, *(p.name for p in pix)), read(1, chan, wf, *taps)))
    for guard in guards:
        body = Guard(guard, 0, 1, body)
    core = Expr(loops, c + pix, body)
    if len(ins) > 2 and ins[2] is not None:
        return epilogue(core, loops, read(2, f.name))
    return core


@register
class ConvTranspose(OpDef):
    op = Op.CONV_TRANSPOSE
    derivable = True
    packed_inputs = (1, 2)  # the weight and the bias
    tensor_core = "conv"
    arity = (2, 3)
    multilinear = True  # in the input and in the weight (bias aside)
    onnx_type = "ConvTranspose"
    attrs = {
        **CONV_ATTRS,
        "output_padding": Attr("ints", (0,), non_negative, "extra output at the end of each dim"),
    }

    def normalize(self, attrs, types):
        w = types[1]
        if w is None or w.rank < 3:
            raise ShapeError(f"the weight must be [C, F/groups, *kernel], got {w}")
        return spatial_attrs(attrs, w.rank - 2, _SPATIAL)

    def infer(self, types, attrs):
        x, w = types[0], types[1]
        bias = types[2] if len(types) > 2 else None
        g = attrs["groups"]
        if x.rank != w.rank:
            raise ShapeError(f"input {x} and weight {w} must have the same rank")
        if x.shape[1] != w.shape[0]:
            raise ShapeError(f"input channels {x.shape[1]} != weight's first dim {w.shape[0]}")
        if x.shape[1] % g:
            raise ShapeError(f"input channels {x.shape[1]} are not divisible by groups {g}")
        f = w.shape[1] * g
        if bias is not None and bias.shape != (f,):
            raise ShapeError(f"bias {bias} must be [{f}]")
        a = attrs
        dims = conv_transpose_out_dims(x.shape[2:], w.shape[2:], a["stride"], a["dilation"], a["padding"],
                                       a["output_padding"])
        return [TensorType((x.shape[0], f) + dims, same_dtype(types))]

    def numpy(self, args, attrs):
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else None
        a = attrs
        return [conv_transpose_numpy(x, w, b, a["stride"], a["dilation"], a["padding"], a["output_padding"],
                                     a["groups"])]

    def expression(self, inputs, attrs):
        return conv_transpose_expression(inputs, self.infer(inputs, attrs)[0].shape, attrs)

    def flops(self, ins, outs, attrs):
        """2·N·C·prod(in spatial)·(F/groups)·prod(kernel): every input element meets its group's
        weights once; + the output size for the bias."""
        x, w = ins[0], ins[1]
        macs = x.size * prod(w.shape[1:])
        return 2 * macs + (outs[0].size if len(ins) > 2 and ins[2] is not None else 0)

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        x, w = ctx.type(onode.input[0]), ctx.type(onode.input[1])
        nsp = w.rank - 2
        stride, dilation, pads, auto = onnx_window_attrs(a, nsp)
        out_pad = tuple(a.get("output_padding", (0,) * nsp))
        target = a.get("output_shape")
        if target is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
            if target is None:
                target = tuple(d * s for d, s in zip(x.shape[2:], stride))
            target = tuple(target)[-nsp:]
            begins, ends = [], []
            for i in range(nsp):
                full = stride[i] * (x.shape[2 + i] - 1) + out_pad[i] + dilation[i] * (w.shape[2 + i] - 1) + 1
                total = full - target[i]
                if total < 0:
                    if "output_shape" in a:  # larger than the full output: no pads give it
                        raise ctx.not_representable(f"ConvTranspose output_shape {target} needs "
                                                    "negative pads")
                    total = 0  # auto_pad asks for in·stride but never pads negatively (onnxruntime)
                small, big = total // 2, total - total // 2
                begins.append(small if auto == "SAME_UPPER" else big)
                ends.append(big if auto == "SAME_UPPER" else small)
            pads = tuple(begins + ends)
        attrs = {"stride": stride, "dilation": dilation, "padding": pads, "groups": a.get("group", 1),
                 "output_padding": out_pad}
        return list(onode.input), attrs

    def to_onnx(self, ctx, node):
        a = node.attrs
        ctx.node("ConvTranspose", node.inputs, node.outputs, strides=a["stride"], pads=a["padding"],
                 dilations=a["dilation"], group=a["groups"], output_padding=a["output_padding"])
