"""Scaled dot-product attention as one op: softmax(Q·Kᵀ·scale + mask) · V, causal or not.

    attention(q, k, v, mask?; scale, causal)

q is [..., Sq, D], k [..., Sk, D], v [..., Sk, Dv]; their batch dims (everything before the last
two) broadcast together, as matmul's do, so grouped-query attention is K/V heads of size 1
broadcast over the query heads. The optional additive `mask` broadcasts to the scores
[..., Sq, Sk] (a padding mask of 0 and -inf, say). `scale` multiplies the scores (1/sqrt(D) when
not given); `causal` = 1 lets query i see keys j <= i only (the top-left aligned triangle, as
PyTorch's `is_causal` and ONNX's Attention define it). The result is [..., Sq, Dv].

This is what cuDNN's fused attention (flash attention) runs as one kernel: the [Sq, Sk] scores
are never written to memory, so in fp16/bf16 the op's bytes are its inputs and output only (in
fp32, which cuDNN's engines do not take, the bytes count the scores of the unfused lowering). Rewrites
(`einsat.rewrites.algebra.attention`) make it from the matmul-scale-mask-softmax-matmul chain of
an imported model, and the extraction chooses it where the cost model says it pays. The NumPy
reference computes the chain in the order ONNX export writes it (MatMul, Mul, Add, Softmax,
MatMul), with a softmax that subtracts the row max; a row whose every score is -inf (fully
masked) is NaN, as the chain's Softmax makes it.

Export writes ONNX `Attention` (opset 23) where the opset cap allows and the layout is one ONNX
takes: q, k, v of rank 4 [B, H, S, D] with K/V heads H or 1 (ONNX's grouped K/V heads,
`kv_num_heads` read from the shapes), or of rank 5 [B, A, G, S, D] with K/V [B, A, 1, S, D] (grouped
query attention as einsat broadcasts it: reshaped to heads A·G over A K/V heads, and back), the
batch dims not broadcast, and a mask ONNX takes: its last two dims [Sq, Sk] (onnxruntime
broadcasts only the leading ones; a mask over the keys only, [..., 1, Sk], is expanded to them).
`causal` is `is_causal`, the scale `scale`. The mask's condition is exactness: ONNX Attention (its
spec's errata, and onnxruntime 1.31) makes a row whose every bias is float-min or -inf 0, where the
chain makes a row of -inf NaN and a row of float-min biases (Hugging Face's padding mask) the mean
of v. So a constant mask is written as is where every row leaves a key unbiased (a 0) that the
causal triangle, if any, keeps; a mask computed at run time (which may mask a row fully: a padded
batch entry, a left-padded prompt's first rows) only where the rows it masks fully can be
corrected cheaply: an fp32 padding mask over the keys ([..., 1, Sk]) without the triangle, written
with `write_corrected`'s correction (PET's idea: a fast operator exact on most of the output, and a
small kernel for the rest). Elsewhere, and below opset 23, the chain. einsat imports no ONNX op as
attention.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, one_of, register, same_dtype
from einsat.ir.types import TensorType, is_float

_BIT = one_of(0, 1)


def attention_shapes(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...],
                     mask: tuple[int, ...] | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(scores shape, output shape), or ShapeError naming what does not fit."""
    if len(q) < 2 or len(k) < 2 or len(v) < 2:
        raise ShapeError(f"attention needs q, k, v of rank >= 2, got {list(q)}, {list(k)}, {list(v)}")
    if q[-1] != k[-1]:
        raise ShapeError(f"q {list(q)} and k {list(k)} differ in the head dim ({q[-1]} vs {k[-1]})")
    if k[-2] != v[-2]:
        raise ShapeError(f"k {list(k)} and v {list(v)} differ in the key count ({k[-2]} vs {v[-2]})")
    batch = broadcast_shapes(q[:-2], k[:-2], v[:-2])
    scores = batch + (q[-2], k[-2])
    if mask is not None:
        try:
            fits = broadcast_shapes(scores, mask) == scores
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"the mask {list(mask)} does not broadcast to the scores {list(scores)}")
    return scores, batch + (q[-2], v[-1])


def causal_mask(sq: int, sk: int, dtype) -> np.ndarray:
    """[sq, sk]: 0 where key j <= query i, -inf above the diagonal."""
    return np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, 0.0).astype(dtype)


def attention_numpy(q, k, v, mask, scale: float, causal: bool) -> np.ndarray:
    dt = q.dtype
    s = np.matmul(q, np.swapaxes(k, -1, -2)).astype(dt, copy=False)
    s = (s * np.asarray(scale, dt)).astype(dt, copy=False)
    if mask is not None:
        s = (s + mask).astype(dt, copy=False)
    if causal:
        s = s + causal_mask(s.shape[-2], s.shape[-1], dt)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = (e / e.sum(axis=-1, keepdims=True)).astype(dt, copy=False)
    return np.matmul(p, v).astype(dt, copy=False)


@register
class Attention(OpDef):
    """softmax(q @ kᵀ · scale + mask) @ v (+ a causal triangle): fused scaled dot-product attention."""

    op = Op.ATTENTION
    tensor_core = "gemm"
    arity = (3, 4)
    attrs = {"scale": Attr("float", None, doc="the scores' factor; 1/sqrt(D) when not given"),
             "causal": Attr("int", 0, _BIT, doc="1: query i sees keys j <= i only")}

    def normalize(self, attrs, types):
        if attrs["scale"] is None and types and types[0] is not None and types[0].rank >= 1:
            attrs = {**attrs, "scale": float(np.float32(1.0 / np.sqrt(max(types[0].shape[-1], 1))))}
        return attrs

    def infer(self, types, attrs):
        q, k, v = types[0], types[1], types[2]
        mask = types[3] if len(types) > 3 else None
        _, out = attention_shapes(q.shape, k.shape, v.shape, mask.shape if mask is not None else None)
        dt = same_dtype(types)
        if not is_float(dt):
            raise ShapeError(f"attention needs float inputs, got {dt.name}")
        return [TensorType(out, dt)]

    def numpy(self, args, attrs):
        mask = args[3] if len(args) > 3 else None
        return [attention_numpy(args[0], args[1], args[2], mask, attrs["scale"], bool(attrs["causal"]))]

    def flops(self, ins, outs, attrs):
        """Both GEMMs (2·Sq·Sk·D and 2·Sq·Sk·Dv a batch), then per score: the scale, the mask when
        given, and the softmax's 5 (max, subtract, exp, sum, divide)."""
        q, k, v = ins[0], ins[1], ins[2]
        mask = ins[3] if len(ins) > 3 else None
        scores, _ = attention_shapes(q.shape, k.shape, v.shape)
        n = int(np.prod(scores))
        return 2 * n * q.shape[-1] + 2 * n * v.shape[-1] + n * (6 + (mask is not None) + bool(attrs["causal"]))

    def bytes(self, ins, outs, attrs):
        """Inputs and output only, where a fused engine keeps the scores on chip (cuDNN's SDPA:
        fp16 and bf16). It has no fp32 engine: there einsat's GPU lowering runs unfused, and the
        scores [.., Sq, Sk] cross memory 4 times (written by the first GEMM, read and written by
        the softmax, read by the second GEMM), 6 with a mask (its kernel reads and writes them)."""
        q, k, v = ins[0], ins[1], ins[2]
        mask = ins[3] if len(ins) > 3 else None
        moved = super().bytes(ins, outs, attrs)
        if q.dtype.itemsize <= 2:
            return moved
        scores, _ = attention_shapes(q.shape, k.shape, v.shape)
        return moved + (4 + 2 * (mask is not None)) * int(np.prod(scores)) * q.dtype.itemsize

    def to_onnx(self, ctx, node):
        """ONNX Attention where the cap (23) and the layout allow (`onnx_attention_layout`), else
        the chain: MatMul(q, Transpose(k)), Mul(scale), Add(mask), Add(causal triangle), Softmax,
        MatMul. A mask over the keys only ([..., 1, Sk]) is expanded to the queries for ONNX; one
        computed at run time gets the correction of its fully masked rows (`write_corrected`)."""
        shapes = [ctx.type(i).shape if i else None for i in node.inputs]
        mask = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
        causal = bool(node.attrs["causal"])
        if ctx.opset < 23 or onnx_attention_layout(*shapes[:3]) is None:
            write_chain(ctx, node)
            return
        if mask is None:
            write_onnx_attention(ctx, node)
            return
        full = queries_mask_shape(shapes[0], shapes[3])  # the mask as ONNX takes it: [..., Sq, Sk]
        if full is None or onnx_attention_layout(*shapes[:3], full) is None:
            write_chain(ctx, node)
            return
        weight = ctx.graph.weights.get(mask)
        if weight is not None:
            wide = np.broadcast_to(np.asarray(weight), full)
            if not every_row_attends(wide, causal):
                write_chain(ctx, node)
            elif tuple(full) == tuple(shapes[3]):
                write_onnx_attention(ctx, node)
            else:
                write_onnx_attention(ctx, node, ctx.constant(np.ascontiguousarray(wide), "attention_mask_rows"))
        elif correctable(shapes[0], shapes[3], ctx.type(mask).dtype, causal):
            write_corrected(ctx, node, full)
        else:
            write_chain(ctx, node)


def _ints(*dims) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in dims)


def onnx_attention_layout(q, k, v, mask=None) -> str | None:
    """'4d' or '5d' where ONNX Attention (as onnxruntime runs it) computes einsat's attention on
    these shapes (see the module docstring), else None (the chain is written)."""
    if not _ints(*q, *k, *v, *(mask or ())):
        return None
    if mask is not None and (len(mask) < 2 or tuple(mask[-2:]) != (q[-2], k[-2])):
        return None
    if len(q) == len(k) == len(v) == 4:
        if not k[0] == v[0] == q[0] or k[1] != v[1] or k[1] not in (q[1], 1):
            return None
        return "4d" if mask is None or len(mask) <= 4 else None
    if len(q) == len(k) == len(v) == 5:
        if not k[0] == v[0] == q[0] or k[1:3] != v[1:3] or tuple(k[1:3]) not in ((q[1], q[2]), (q[1], 1), (1, 1)):
            return None
        return "5d" if mask is None or len(mask) <= 2 else None
    return None


def queries_mask_shape(q, mask) -> tuple[int, ...] | None:
    """The mask's shape with its query axis at Sq, as ONNX Attention takes it (onnxruntime
    broadcasts only the leading dims): the mask's own where it is [..., Sq, Sk], [..., 1, Sk]
    expanded, None for a mask of rank < 2."""
    if mask is None or len(mask) < 2 or not _ints(*q, *mask):
        return None
    if mask[-2] == q[-2]:
        return tuple(mask)
    return tuple(mask[:-2]) + (q[-2], mask[-1]) if mask[-2] == 1 else None


def correctable(q, mask, dtype, causal: bool) -> bool:
    """Whether a mask computed at run time can be written as ONNX Attention with `write_corrected`'s
    correction: fp32, over the keys only ([..., 1, Sk], a padding mask: every query row of a batch
    is masked alike, so the correction is one row), not causal (under the triangle a fully masked
    row's chain value depends on its query)."""
    return (not causal and np.dtype(dtype) == np.float32 and mask is not None and len(mask) >= 2
            and mask[-2] == 1 and q[-2] != 1)


def every_row_attends(mask, causal: bool) -> bool:
    """Whether a constant additive mask [..., Sq, Sk] (None: not a constant) leaves every query row
    a key of bias 0, among keys j <= i when `causal`: no row is fully masked, where ONNX Attention
    and the chain differ."""
    if mask is None:
        return False
    zero = np.asarray(mask) == 0
    if causal:
        zero = zero & (np.arange(zero.shape[-1])[None, :] <= np.arange(zero.shape[-2])[:, None])
    return bool(zero.any(axis=-1).all())


def write_onnx_attention(ctx, node, mask: str | None = None, outputs=None) -> None:
    """One ONNX Attention node (rank 5: its heads reshaped to rank 4 around it), with `mask` in
    place of the node's own when given, writing `outputs` (the node's own when not given)."""
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    if mask is None:
        mask = node.inputs[3] if len(node.inputs) > 3 else ""
    outputs = list(node.outputs if outputs is None else outputs)
    tq = ctx.type(q)
    attrs = {"scale": float(node.attrs["scale"]), "is_causal": int(node.attrs["causal"]) or None}
    if tq.rank == 4:
        ctx.node("Attention", [q, k, v, mask], outputs, **attrs)
        return

    def heads(name, hint):  # [B, A, G, S, D] -> [B, A·G, S, D]
        b, a, g, s, d = ctx.type(name).shape
        return ctx.node("Reshape", [name, ctx.constant(np.asarray([b, a * g, s, d], np.int64), f"{hint}_shape")],
                        [ctx.fresh(f"attention_{hint}_heads")])[0]

    out = ctx.fresh("attention_heads_out")
    ctx.node("Attention", [heads(q, "q"), heads(k, "k"), heads(v, "v"), mask], [out], **attrs)
    shape = ctx.constant(np.asarray(ctx.type(node.outputs[0]).shape, np.int64), "attention_out_shape")
    ctx.node("Reshape", [out, shape], outputs)


def write_corrected(ctx, node, full: tuple[int, ...]) -> None:
    """ONNX Attention on a run-time padding mask [..., 1, Sk], made exact where a row is fully masked.

    onnxruntime's Attention writes 0 for a row whose every bias is float-min or -inf; the chain
    computes softmax(scores + mask) · V there, and with every bias at float-min (Hugging Face's
    padding) the scores vanish in the sum (|scale·s| is far below float-min's ulp, 2^103), so the row
    is softmax(mask) · V: the mean of V over the keys, NaN where every bias is -inf. A PET-style
    correction writes exactly that: `Where(max(mask) <= float-min, Softmax(mask) · V, Attention)`,
    the correction's matmul one row per batch (the mask is the same for every query)."""
    v, mask = node.inputs[2], node.inputs[3]
    rows = ctx.node("Expand", [mask, ctx.constant(np.asarray(full, np.int64), "attention_mask_rows_shape")],
                    [ctx.fresh("attention_mask_rows")])[0]
    fused = ctx.fresh("attention_fused")
    write_onnx_attention(ctx, node, rows, [fused])
    weights = ctx.node("Softmax", [mask], [ctx.fresh("attention_masked_weights")], axis=-1)[0]
    masked_rows = ctx.node("MatMul", [weights, v], [ctx.fresh("attention_masked_rows")])[0]
    top = ctx.node("ReduceMax", [mask, ctx.constant(np.asarray([-1], np.int64), "attention_keys_axis")],
                   [ctx.fresh("attention_mask_max")], keepdims=1)[0]
    lowest = ctx.constant(np.asarray(np.finfo(np.float32).min, np.float32), "attention_float_min")
    fully = ctx.node("LessOrEqual", [top, lowest], [ctx.fresh("attention_fully_masked")])[0]
    ctx.node("Where", [fully, masked_rows, fused], node.outputs)


def write_chain(ctx, node) -> None:
    """MatMul(q, Transpose(k)), Mul(scale), Add(mask), Add(causal triangle), Softmax, MatMul."""
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    mask = node.inputs[3] if len(node.inputs) > 3 else ""
    tq, tk = ctx.type(q), ctx.type(k)
    dt = tq.dtype
    perm = list(range(tk.rank - 2)) + [tk.rank - 1, tk.rank - 2]
    kt = ctx.fresh("attention_kt")
    ctx.node("Transpose", [k], [kt], perm=perm)
    s = ctx.fresh("attention_scores")
    ctx.node("MatMul", [q, kt], [s])
    scaled = ctx.fresh("attention_scaled")
    ctx.node("Mul", [s, ctx.constant(np.asarray(node.attrs["scale"], dt), "attention_scale")], [scaled])
    cur = scaled
    if mask:
        masked = ctx.fresh("attention_masked")
        ctx.node("Add", [cur, mask], [masked])
        cur = masked
    if node.attrs["causal"]:
        tri = ctx.constant(causal_mask(tq.shape[-2], tk.shape[-2], dt), "attention_causal")
        masked = ctx.fresh("attention_causal_masked")
        ctx.node("Add", [cur, tri], [masked])
        cur = masked
    p = ctx.fresh("attention_probs")
    ctx.node("Softmax", [cur], [p], axis=-1)
    ctx.node("MatMul", [p, v], node.outputs)
