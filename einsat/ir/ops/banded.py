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
copy of the band). ONNX has no band product: export expands each into Pad, Range (the band's row
indices), Gather and Einsum, which onnxruntime runs; the gathered band is materialized there, so
that route is for moderate sizes.
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


def _export_band(ctx, node, band_of: str, equation: str, first: str, width: int | None = None) -> None:
    """Standard ONNX for a band product: pad the rows of `band_of`, gather rows i + D·j for
    j < 2W+1 (indices built by Range, so the file stays small) and contract with Einsum."""
    w = node.attrs["width"] if width is None else width
    d = node.attrs["dilation"]
    m = ctx.type(band_of).shape[1]
    pad = d * w
    i64 = np.int64
    padded = ctx.fresh("padded")
    ctx.node("Pad", [band_of, ctx.constant(np.array([0, pad, 0, 0, pad, 0], i64), "pads")], [padded])
    rows = ctx.fresh("rows")
    ctx.node("Range", [ctx.constant(np.array(0, i64), "zero"), ctx.constant(np.array(m, i64), "m"),
                       ctx.constant(np.array(1, i64), "one")], [rows])
    offsets = ctx.fresh("offsets")
    ctx.node("Range", [ctx.constant(np.array(0, i64), "zero"),
                       ctx.constant(np.array(d * (2 * w + 1), i64), "span"),
                       ctx.constant(np.array(d, i64), "dilation")], [offsets])
    col = ctx.fresh("rows_col")
    ctx.node("Unsqueeze", [rows, ctx.constant(np.array([1], i64), "axis1")], [col])
    index = ctx.fresh("band_index")
    ctx.node("Add", [col, offsets], [index])                              # [M, 2W+1]
    band = ctx.fresh("band")
    ctx.node("Gather", [padded, index], [band], axis=1)                   # [Z, M, 2W+1, C]
    ctx.node("Einsum", [first, band], list(node.outputs), equation=equation)
