"""Band matrix products (EinNet Table 2, Longformer's sliding-window attention).

`g2bmm` (general to band matrix multiplication) computes, for each row, the dot products with a
dilated band of rows of the second input:

    g2bmm(a, b)[z, i, j] = Σ_k a[z, i, k] · b[z, i + D·(j − W), k]     (0 ≤ j ≤ 2W)

a, b: [Z, M, K]; out: [Z, M, 2W+1]; W = `width` (one side of the window), D = `dilation`.
Rows outside [0, M) contribute zero. `gbmm` (general band matrix multiplication) is its sibling
that applies such a band of weights back to the rows of a matrix:

    gbmm(p, v)[z, i, n] = Σ_j p[z, i, j] · v[z, i + D·(j − W), n]

p: [Z, M, 2W+1]; v: [Z, M, N]; out: [Z, M, N]. Longformer's attention is
`gbmm(softmax(g2bmm(q, k)), v)` (EinNet's `getLongformer`).

NumPy runs both as one batched matmul over a strided view of the zero-padded second input (no
copy of the band). ONNX has no band product: export expands each into standard nodes
(`_export_band`: the dilation regrouped away, the rows in chunks, one batched MatMul per product
with the band read off a skewed diagonal) whose memory stays within a small factor of the
inputs and output.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from einsat.ir.expr import Call, Expr, var
from einsat.ir.expr.build import iters, read
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, positive, register, same_dtype
from einsat.ir.types import TensorType


def band_rows(x: np.ndarray, width: int, dilation: int) -> np.ndarray:
    """A strided view [Z, M, C, 2W+1] of x [Z, M, C]: view[z, i, c, j] = x[z, i + D·(j − W), c],
    zero where that row is outside x. Only the zero padding is copied."""
    pad = dilation * width
    xp = np.pad(x, ((0, 0), (pad, pad), (0, 0)))
    return sliding_window_view(xp, 2 * pad + 1, axis=1)[..., ::dilation]


def _check_rank3(name: str, t: TensorType) -> None:
    if t.rank != 3:
        raise ShapeError(f"{name} must be [Z, M, C] (rank 3), got {t}")


@register
class G2BMM(OpDef):
    """out[z, i, j] = Σ_k a[z, i, k] · b[z, i + D·(j − W), k]; rows outside b count zero."""

    op = Op.G2BMM
    matched = 2
    derivable = True
    arity = (2, 2)
    multilinear = True  # linear in a and in b separately
    attrs = {
        "width": Attr("int", doc="W: the band holds 2W+1 rows", check=non_negative),
        "dilation": Attr("int", 1, positive, "D: the distance between band rows"),
    }
    doc = "general to band matrix multiplication (EinNet Table 2)"

    def infer(self, types, attrs):
        a, b = types
        _check_rank3("a", a)
        _check_rank3("b", b)
        if a.shape != b.shape:
            raise ShapeError(f"a {a} and b {b} must have the same shape [Z, M, K]")
        z, m, _ = a.shape
        return [TensorType((z, m, 2 * attrs["width"] + 1), same_dtype(types))]

    def numpy(self, args, attrs):
        a, b = args
        band = band_rows(b, attrs["width"], attrs["dilation"])          # [Z, M, K, J]
        return [np.matmul(a[:, :, None, :], band)[:, :, 0, :]]

    def expression(self, inputs, attrs):
        """L_{z,i,j} Σ_k a[z, i, k] · b[z, i + D·(j − W), k] (EinNet Table 2's G2BMM)."""
        z, i, j = iters("o", self.infer(inputs, attrs)[0].shape)
        (k,) = iters("k", (inputs[0].shape[2],))
        row = var(i.name) + (var(j.name) - attrs["width"]) * attrs["dilation"]
        return Expr((z, i, j), (k,), Call("mul", (read(0, z.name, i.name, k.name), read(1, z.name, row, k.name))))

    def flops(self, ins, outs, attrs):
        """2·K per output element."""
        return 2 * outs[0].size * ins[0].shape[2]

    def to_onnx(self, ctx, node):
        a, b = node.inputs
        _export_band(ctx, node, band_of=b, equation="zmk,zmjk->zmj", first=a)


@register
class GBMM(OpDef):
    """out[z, i, n] = Σ_j p[z, i, j] · v[z, i + D·(j − W), n], with p [Z, M, 2W+1]."""

    op = Op.GBMM
    derivable = True
    arity = (2, 2)
    multilinear = True  # linear in p and in v separately
    attrs = {"dilation": Attr("int", 1, positive, "D: the distance between band rows")}
    doc = "general band matrix multiplication (EinNet's GBMM): applies a band of weights to rows"

    def infer(self, types, attrs):
        p, v = types
        _check_rank3("p", p)
        _check_rank3("v", v)
        if p.shape[:2] != v.shape[:2]:
            raise ShapeError(f"p {p} and v {v} must agree on [Z, M]")
        if p.shape[2] % 2 == 0:
            raise ShapeError(f"the band of p {p} must have an odd length 2W+1")
        return [TensorType(v.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        p, v = args
        width = (p.shape[2] - 1) // 2
        band = band_rows(v, width, attrs["dilation"])                   # [Z, M, N, J]
        return [np.matmul(band, p[:, :, :, None])[:, :, :, 0]]

    def expression(self, inputs, attrs):
        """L_{z,i,n} Σ_j p[z, i, j] · v[z, i + D·(j − W), n]."""
        z, i, n = iters("o", inputs[1].shape)
        (j,) = iters("j", (inputs[0].shape[2],))
        row = var(i.name) + (var(j.name) - (inputs[0].shape[2] - 1) // 2) * attrs["dilation"]
        return Expr((z, i, n), (j,), Call("mul", (read(0, z.name, i.name, j.name), read(1, z.name, row, n.name))))

    def flops(self, ins, outs, attrs):
        """2·(2W+1) per output element."""
        return 2 * outs[0].size * ins[0].shape[2]

    def to_onnx(self, ctx, node):
        p, v = node.inputs
        _export_band(ctx, node, band_of=v, equation="zmj,zmjn->zmn", first=p,
                     width=(ctx.type(p).shape[2] - 1) // 2)


class _Export:
    """Small helpers over an export context for the band products' expansion."""

    def __init__(self, ctx):
        self.ctx = ctx

    def ints(self, values, hint: str) -> str:
        return self.ctx.constant(np.array(values, np.int64), hint)

    def op(self, op_type: str, inputs, hint: str, out: str | None = None, **attrs) -> str:
        return self.ctx.node(op_type, inputs, [out or self.ctx.fresh(hint)], **attrs)[0]

    def reshape(self, x: str, shape, hint: str = "reshaped") -> str:
        return self.op("Reshape", [x, self.ints(shape, "shape")], hint)

    def slice(self, x: str, axis: int, start: int, end: int, step: int = 1, hint: str = "sliced") -> str:
        return self.op("Slice", [x, self.ints([start], "starts"), self.ints([end], "ends"), self.ints([axis], "axes"),
                                 self.ints([step], "steps")], hint)

    def pad(self, x: str, rank: int, axis: int, before: int, after: int, hint: str = "padded") -> str:
        pads = [0] * (2 * rank)
        pads[axis], pads[rank + axis] = before, after
        return self.op("Pad", [x, self.ints(pads, "pads")], hint)


def chunk_rows(rows: int, width: int) -> int:
    """Rows per chunk of the export: about 2W (a chunk's product covers T + 2W columns, so the
    work is within 1 + 2W/T of the band's), at least 32, and even chunks over `rows`."""
    target = max(2 * width, 32)
    count = -(-rows // target) if rows > target else 1
    return -(-rows // count)


def _undilate(e: _Export, x: str, t: TensorType, d: int) -> tuple[str, int]:
    """x [Z, M, C] as [Z·D, S, C] with S = ceil(M / D): row q·D + r of x is row q of
    sequence z·D + r (zero rows pad M to S·D). A band of dilation D over x is a band of
    dilation 1 over these sequences."""
    z, m, c = t.shape
    s = -(-m // d)
    if d == 1:
        return x, s
    if s * d != m:
        x = e.pad(x, 3, 1, 0, s * d - m)
    x = e.op("Transpose", [e.reshape(x, [z, s, d, c])], "interleaved", perm=(0, 2, 1, 3))
    return e.reshape(x, [z * d, s, c], "undilated"), s


def _redilate(e: _Export, x: str, z: int, d: int, s: int, m: int, c: int, out: str) -> None:
    """The inverse of `_undilate` for a result [Z·D, S, C]: rows back in order, cut to M, as `out`."""
    if d > 1:
        x = e.op("Transpose", [e.reshape(x, [z, d, s, c])], "reinterleaved", perm=(0, 2, 1, 3))
        x = e.reshape(x, [z, s * d, c])
    if s * d == m:
        e.op("Identity", [x], "", out=out)
    else:
        e.op("Slice", [x, e.ints([0], "starts"), e.ints([m], "ends"), e.ints([1], "axes")], "", out=out)


def _export_band(ctx, node, band_of: str, equation: str, first: str, width: int | None = None) -> None:
    """Standard ONNX for a band product, in memory within a small factor of its inputs and
    output (no [Z, M, 2W+1, C] gather of the band: Longformer's took 1.6 GB at the CPU sizes).

    1. Dilation D: rows ≡ r (mod D) meet only rows ≡ r, so the rows are regrouped into D·Z
       sequences of S = ⌈M/D⌉ rows (Transpose/Reshape), each a band of dilation 1.
    2. The rows are cut into chunks of T (`chunk_rows`); chunk c meets rows [cT − W, cT + T + W)
       of the band's input: one Gather of those row windows, L = T + 2W rows each (zero-padded).
    3. g2bmm: one batched MatMul of each chunk with its window, [T, L], of which the band is the
       skewed diagonal full[t, t + j] (j ≤ 2W): pad each chunk's flattened product by T and
       read it back as [T, L + 1] rows, whose first 2W + 1 columns are the band.
       gbmm: the inverse skew puts p's band on those diagonals of a zero [T, L] (pad p's rows
       to L + 1, flatten, cut T·L, reshape), and one batched MatMul with the window applies it.
    4. The chunks back to rows, the sequences back to the rows' order (step 1 inverted)."""
    e = _Export(ctx)
    w = node.attrs["width"] if width is None else width
    d = node.attrs["dilation"]
    ta, tb = ctx.type(first), ctx.type(band_of)
    z, m, _ = tb.shape
    a, s = _undilate(e, first, ta, d)
    b, _ = _undilate(e, band_of, tb, d)
    zz = z * d
    t = chunk_rows(s, w)
    n = -(-s // t)
    length = t + 2 * w
    if n * t != s:  # whole chunks: zero rows at the end
        a = e.pad(a, 3, 1, 0, n * t - s)
    b = e.pad(b, 3, 1, w, n * t - s + w)                                   # [ZD, nT + 2W, C]
    index = (np.arange(n)[:, None] * t + np.arange(length)[None, :]).astype(np.int64)
    windows = e.op("Gather", [b, ctx.constant(index, "windows")], "windows", axis=1)  # [ZD, n, L, C]
    chunks = e.reshape(a, [zz, n, t, ta.shape[2]], "chunks")               # [ZD, n, T, K or 2W+1]
    if equation == "zmk,zmjk->zmj":                                        # g2bmm
        full = e.op("MatMul", [chunks, e.op("Transpose", [windows], "windows_t", perm=(0, 1, 3, 2))], "full")
        flat = e.pad(e.reshape(full, [zz, n, t * length]), 3, 2, 0, t, "skew")
        band = e.slice(e.reshape(flat, [zz, n, t, length + 1]), 3, 0, 2 * w + 1, hint="band")
        out_c = 2 * w + 1
        result = e.reshape(band, [zz, n * t, out_c])
    else:                                                                  # gbmm
        spread = e.pad(chunks, 4, 3, 0, length - 2 * w, "spread")          # [ZD, n, T, L + 1]
        flat = e.slice(e.reshape(spread, [zz, n, t * (length + 1)]), 2, 0, t * length, hint="unskew")
        full = e.reshape(flat, [zz, n, t, length], "full")                 # full[t, t + j] = p[t, j]
        out_c = tb.shape[2]
        result = e.reshape(e.op("MatMul", [full, windows], "applied"), [zz, n * t, out_c])
    _redilate(e, result, z, d, n * t, m, out_c, node.outputs[0])
