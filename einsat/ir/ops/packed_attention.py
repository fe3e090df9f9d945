"""Self-attention from one input with packed Q, K, V projections: onnxruntime's contrib `Attention`
(domain com.microsoft).

    packed_attention(x, w, b?, mask?; num_heads, scale, causal)
        qkv = x @ w (+ b)                     x [B, S, Hin], w [Hin, 3·H], b [3·H]
        q, k, v = split(qkv, 3, last axis), each reshaped [B, S, N, D] and transposed [B, N, S, D]
        y = attention(q, k, v, mask; scale, causal), transposed and reshaped back to [B, S, H]

N = `num_heads`, D = H / N. The optional additive `mask` broadcasts to the scores [B, N, S, S]
(onnxruntime's `attention_bias`). The projections run as one GEMM and the attention as one kernel
threaded over the heads: what onnxruntime's transformers optimizer writes for BERT, measured
faster than the chain on onnxruntime CPU (docs/export.md, "onnxruntime's packed Attention").

Semantics are the chain's to the last row: on onnxruntime 1.31 a row whose every bias is
float-min is the mean of v and one of -inf is NaN, as the chain's Softmax makes them (checked by
running it: tests/ir/test_ops_packed_attention.py), so any additive mask is written as is.

Export (`to_onnx`): the com.microsoft op where the export allows contrib ops (`ctx.contrib`: the
file is written for onnxruntime, cost "cpu") and the inputs are float32 (symbolic batch and
sequence dims too); the bias is
always written (zeros when absent: onnxruntime 1.31 crashes on an Attention without one) and a
mask whose last two dims are not [S, S] is expanded to them (onnxruntime broadcasts only the
leading two). Elsewhere the chain: MatMul (Add), Split, Reshape and Transpose per projection,
then einsat's `attention` export (ONNX Attention at opset 23, else its chain), Transpose and
Reshape back. Import (`from_onnx`): the com.microsoft op with a bias, no mask_index, no past,
equal Q/K/V sizes.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import Node
from einsat.ir.ops.attention import attention_numpy, attention_shapes
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, one_of, opdef, positive, register, same_dtype
from einsat.ir.types import TensorType, is_float

CONTRIB = "com.microsoft"
HEADS_PERM = (0, 2, 1, 3)  # [B, S, N, D] <-> [B, N, S, D]


def packed_shapes(x, w, b, mask, heads: int):
    """(q's shape [B, N, S, D], the output's [B, S, H]), or ShapeError naming what does not fit."""
    if len(x) != 3:
        raise ShapeError(f"packed_attention needs x of rank 3 [B, S, Hin], got {list(x)}")
    if len(w) != 2 or w[0] != x[2] or w[1] % 3:
        raise ShapeError(f"packed_attention needs w [Hin, 3·H] with Hin = {x[2]}, got {list(w)}")
    h = w[1] // 3
    if h % heads:
        raise ShapeError(f"packed_attention: hidden size {h} is not a multiple of num_heads {heads}")
    if b is not None and tuple(b) != (w[1],):
        raise ShapeError(f"packed_attention's bias must be [{w[1]}], got {list(b)}")
    q = (x[0], heads, x[1], h // heads)
    attention_shapes(q, q, q, None if mask is None else tuple(mask))
    return q, (x[0], x[1], h)


def split_heads(qkv: np.ndarray, heads: int):
    """q, k, v [B, N, S, D] of the packed projections [B, S, 3·H]."""
    bsz, s, h3 = qkv.shape
    h = h3 // 3
    return [qkv[..., i * h:(i + 1) * h].reshape(bsz, s, heads, h // heads).transpose(HEADS_PERM) for i in range(3)]


def packed_attention_numpy(x, w, b, mask, heads: int, scale: float, causal: bool) -> np.ndarray:
    dt = x.dtype
    qkv = np.matmul(x, w).astype(dt, copy=False)
    if b is not None:
        qkv = (qkv + b).astype(dt, copy=False)
    q, k, v = split_heads(qkv, heads)
    y = attention_numpy(q, k, v, mask, scale, causal)
    return np.ascontiguousarray(y.transpose(HEADS_PERM)).reshape(x.shape[0], x.shape[1], -1)


def _present(seq, k):
    """The k-th input when present (absent: None or '')."""
    if len(seq) <= k or seq[k] is None or (isinstance(seq[k], str) and not seq[k]):
        return None
    return seq[k]


@register
class PackedAttention(OpDef):
    """attention of x's packed projections x @ w (+ b) split into Q, K, V heads (onnxruntime's
    com.microsoft Attention: inputs input, weights, bias?, mask?)."""

    op = Op.PACKED_ATTENTION
    tensor_core = "gemm"
    packed_inputs = (1, 2)  # the weight and the bias: onnxruntime pre-packs them when initializers
    arity = (2, 4)
    attrs = {"num_heads": Attr("int", 1, positive, doc="N: the heads Q, K and V are split into"),
             "scale": Attr("float", None, doc="the scores' factor; 1/sqrt(D) when not given"),
             "causal": Attr("int", 0, one_of(0, 1), doc="1: query i sees keys j <= i only")}
    onnx_type = "Attention"
    onnx_domain = CONTRIB

    def normalize(self, attrs, types):
        if attrs["scale"] is None and len(types) > 1 and types[1] is not None and types[1].rank == 2:
            d = max(types[1].shape[1] // 3 // max(attrs["num_heads"], 1), 1)
            attrs = {**attrs, "scale": float(np.float32(1.0 / np.sqrt(d)))}
        return attrs

    def infer(self, types, attrs):
        x, w = types[0], types[1]
        b, mask = _present(types, 2), _present(types, 3)
        _, out = packed_shapes(x.shape, w.shape, None if b is None else b.shape,
                               None if mask is None else mask.shape, attrs["num_heads"])
        dt = same_dtype([t for t in types if t is not None])
        if not is_float(dt):
            raise ShapeError(f"packed_attention needs float inputs, got {dt.name}")
        return [TensorType(out, dt)]

    def numpy(self, args, attrs):
        return [packed_attention_numpy(args[0], args[1], _present(args, 2), _present(args, 3), attrs["num_heads"],
                                       attrs["scale"], bool(attrs["causal"]))]

    def flops(self, ins, outs, attrs):
        """The packed projection's GEMM (2·B·S·Hin·3H), its bias, and the attention's flops."""
        x, w = ins[0], ins[1]
        mask = _present(ins, 3)
        q, _ = packed_shapes(x.shape, w.shape, None, None if mask is None else mask.shape, attrs["num_heads"])
        n = q[0] * q[1] * q[2] * q[2]  # the scores
        proj = 2 * x.size * w.shape[1] + (x.shape[0] * x.shape[1] * w.shape[1] if _present(ins, 2) else 0)
        return proj + 4 * n * q[3] + n * (6 + (mask is not None) + bool(attrs["causal"]))

    def bytes(self, ins, outs, attrs):
        """Inputs and output, the packed projections [B, S, 3·H] written and read once, and the
        scores [B, N, S, S] crossing memory 4 times (onnxruntime's CPU kernel writes them: the
        first GEMM, the softmax's read and write, the second GEMM)."""
        x, w = ins[0], ins[1]
        q, _ = packed_shapes(x.shape, w.shape, None, None, attrs["num_heads"])
        item = x.dtype.itemsize
        return super().bytes(ins, outs, attrs) + 2 * x.shape[0] * x.shape[1] * w.shape[1] * item \
            + 4 * q[0] * q[1] * q[2] * q[2] * item

    # -- ONNX -------------------------------------------------------------------------------------
    def _contrib_form(self, ctx, node) -> bool:
        """onnxruntime's kernel takes this application: contrib ops allowed, float32 (its CPU
        kernel's type); symbolic batch and sequence dims too (the mask's shape then computed)."""
        if not getattr(ctx, "contrib", False):
            return False
        return all(np.dtype(ctx.type(i).dtype) == np.float32 for i in node.inputs if i)

    def to_onnx(self, ctx, node):
        """The contrib op (see `_contrib_form`), else the chain (the module docstring)."""
        if not self._contrib_form(ctx, node):
            self._write_chain(ctx, node)
            return
        x, w = node.inputs[0], node.inputs[1]
        b, mask = _present(node.inputs, 2), _present(node.inputs, 3)
        bsz, s, _ = ctx.type(x).shape
        h3 = ctx.type(w).shape[1]
        if b is None:  # onnxruntime 1.31 crashes without a bias
            b = ctx.constant(np.zeros(h3, np.float32), "attention_zero_bias")
        bias = ""
        if mask is not None:
            ms = tuple(ctx.type(mask).shape)
            ms4 = (1,) * (4 - len(ms)) + ms
            want = ms4[:2] + (s, s)
            bias = mask
            if ms4 != ms:
                bias = ctx.node("Reshape", [mask, ctx.dims(ms4, "attention_bias_shape")],
                                [ctx.fresh("attention_bias4")])[0]
            if ms4 != want:
                bias = ctx.node("Expand", [bias, ctx.dims(want, "attention_bias_rows")],
                                [ctx.fresh("attention_bias_rows")])[0]
        ctx.node("Attention", [x, w, b, "", "", bias], list(node.outputs), domain=CONTRIB,
                 num_heads=int(node.attrs["num_heads"]), scale=float(node.attrs["scale"]),
                 unidirectional=int(node.attrs["causal"]) or None)

    def _write_chain(self, ctx, node):
        x, w = node.inputs[0], node.inputs[1]
        b, mask = _present(node.inputs, 2), _present(node.inputs, 3)
        tx = ctx.type(x)
        bsz, s, _ = tx.shape
        h3 = ctx.type(w).shape[1]
        heads = int(node.attrs["num_heads"])
        h, dt = h3 // 3, tx.dtype
        d = h // heads
        qkv = ctx.node("MatMul", [x, w], [ctx.fresh("attention_qkv")])[0]
        if b is not None:
            qkv = ctx.node("Add", [qkv, b], [ctx.fresh("attention_qkv_biased")])[0]
        parts = [ctx.fresh(f"attention_{p}_flat") for p in "qkv"]
        sizes = ctx.constant(np.asarray([h, h, h], np.int64), "attention_split")
        if ctx.opset >= 13:
            ctx.node("Split", [qkv, sizes], parts, axis=2)
        else:
            ctx.node("Split", [qkv], parts, axis=2, split=[h, h, h])
        shape = ctx.dims((bsz, s, heads, d), "attention_heads_shape")
        heads_t = TensorType((bsz, heads, s, d), dt)
        names = []
        for p, flat in zip("qkv", parts):
            r = ctx.node("Reshape", [flat, shape], [ctx.fresh(f"attention_{p}_split")])[0]
            t = ctx.node("Transpose", [r], [ctx.fresh(f"attention_{p}")], perm=list(HEADS_PERM))[0]
            ctx.declare(t, heads_t)
            names.append(t)
        out = ctx.fresh("attention_heads_out")
        ctx.declare(out, heads_t)
        inner = Node(Op.ATTENTION, tuple(names) + ((mask,) if mask is not None else ()), (out,),
                     {"scale": node.attrs["scale"], "causal": node.attrs["causal"]}, name=out)
        opdef(Op.ATTENTION).to_onnx(ctx, inner)
        back = ctx.node("Transpose", [out], [ctx.fresh("attention_out_t")], perm=list(HEADS_PERM))[0]
        ctx.node("Reshape", [back, ctx.dims((bsz, s, h), "attention_out_shape")], list(node.outputs))

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        ins = list(onode.input) + [""] * (6 - len(onode.input))
        if ins[3] or ins[4] or any(ins[6:]) or len(onode.output) > 1 and any(onode.output[1:]):
            raise ctx.not_representable("Attention with mask_index, past or present has no einsat op")
        if a.get("qkv_hidden_sizes") or a.get("do_rotary") or a.get("mask_filter_value") is not None \
                or a.get("past_present_share_buffer"):
            raise ctx.not_representable("Attention with qkv_hidden_sizes, rotary or mask_filter_value has no einsat op")
        w = ctx.type(onode.input[1])
        heads = int(a["num_heads"])
        scale = a.get("scale") or None
        if scale is None and w is not None and w.rank == 2:
            scale = float(np.float32(1.0 / np.sqrt(max(w.shape[1] // 3 // heads, 1))))
        inputs = [ins[0], ins[1], ins[2], ins[5]]
        while inputs and not inputs[-1]:
            inputs.pop()
        return inputs, {"num_heads": heads, "scale": scale, "causal": int(a.get("unidirectional", 0))}
