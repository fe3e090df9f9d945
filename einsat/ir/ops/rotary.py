"""Rotary position embedding (ONNX RotaryEmbedding, opset 23; Llama's, Qwen2's and Mistral's).

    rotary(x, cos, sin; interleaved)[b, h, s, :] for x [B, H, S, D], cos and sin [B', S, R/2]
    (B' = B or 1; R = 2 · cos.shape[-1] <= D, the rotated dims; the dims from R on pass through):
      rotate-half (interleaved 0): x1 = x[.., :R/2], x2 = x[.., R/2:R]
          out[.., :R/2] = x1 · c - x2 · s,   out[.., R/2:R] = x2 · c + x1 · s
      interleaved 1: x1 = x[.., 0:R:2], x2 = x[.., 1:R:2]
          out[.., 0:R:2] = x1 · c - x2 · s,  out[.., 1:R:2] = x2 · c + x1 · s
    with c = cos[b or 0, s], s = sin[b or 0, s], computed in x's dtype.

HF's `q · cos + rotate_half(q) · sin` with cos = cos(concat(f, f)) is the rotate-half form with the
cache cos(f) (`rewrites.algebra.rotary` recognizes it). cos and sin take ONNX's layout without
position ids ([batch, sequence, R/2]), so the export writes no view around the op.

Export (`to_onnx`): RotaryEmbedding where the opset cap has it (23) and onnxruntime's kernel takes
the shapes (checked on onnxruntime 1.31.1: x of rank 4, cos and sin of x's batch exactly, float32
or float16; `rotary_embedding_dim` R when R < D), else the minimal chain: Slice the halves (steps 2
when interleaved), Unsqueeze cos and sin over the heads, Mul/Sub/Add, Concat (interleaved: the
pairs stacked on a new last axis and flattened back, one Reshape). Import (`from_onnx`):
RotaryEmbedding of a rank-4 x without position ids.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.registry import Attr, Op, OpDef, ShapeError, one_of, register, same_dtype
from einsat.ir.types import TensorType, is_float


def _halves(x, r: int, interleaved: bool):
    if interleaved:
        return x[..., 0:r:2], x[..., 1:r:2]
    return x[..., :r // 2], x[..., r // 2:r]


@register
class Rotary(OpDef):
    """Rotary embedding of x [B, H, S, D] by cos and sin [B or 1, S, R/2] (module docstring)."""

    op = Op.ROTARY
    shape_of_first = True
    arity = (3, 3)
    onnx_type = "RotaryEmbedding"  # ONNX opset 23
    attrs = {"interleaved": Attr("int", 0, one_of(0, 1))}

    def infer(self, types, attrs):
        x, cos, sin = types
        if x.rank != 4 or not is_float(x.dtype):
            raise ShapeError(f"rotary needs a floating-point x of rank 4 [batch, heads, sequence, head dim], got {x}")
        if cos.shape != sin.shape or cos.rank != 3:
            raise ShapeError(f"rotary's cos {cos} and sin {sin} must be of one shape [batch, sequence, rotary dim / 2]")
        b, _, s, d = x.shape
        if cos.shape[0] not in (1, b) or cos.shape[1] != s:
            raise ShapeError(f"rotary's cos {cos} does not match x {x}: [batch or 1, sequence, rotary dim / 2] "
                             "expected")
        half = cos.shape[2]
        if not isinstance(half, int) or not isinstance(d, int):
            raise ShapeError(f"rotary needs a static head dim and rotary dim, got x {x} and cos {cos}")
        if not 1 <= 2 * half <= d:
            raise ShapeError(f"rotary's rotated dims 2 · {half} exceed the head dim {d} of x {x}")
        return [TensorType(x.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        x, cos, sin = args
        r = 2 * cos.shape[-1]
        c = cos[:, None].astype(x.dtype, copy=False)
        s = sin[:, None].astype(x.dtype, copy=False)
        x1, x2 = _halves(x, r, bool(attrs["interleaved"]))
        out = x.copy()
        o1, o2 = _halves(out, r, bool(attrs["interleaved"]))
        o1[...] = x1 * c - x2 * s
        o2[...] = x2 * c + x1 * s
        return [out]

    def flops(self, ins, outs, attrs):
        """3 per rotated element (two products and a sum)."""
        x, cos = ins[0], ins[1]
        return 3 * (outs[0].size // x.shape[-1]) * 2 * cos.shape[-1]

    # -- ONNX -------------------------------------------------------------------------------------
    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        ins = list(onode.input)
        if len(ins) > 3 and ins[3]:
            raise ctx.not_representable("RotaryEmbedding with position_ids (cos and sin as a position cache)")
        x, cos = ctx.type(ins[0]), ctx.type(ins[1])
        if x is None or x.rank != 4:
            raise ctx.not_representable("RotaryEmbedding of an x of rank other than 4 [batch, heads, sequence, head]")
        r = a.get("rotary_embedding_dim", 0)
        if r and cos is not None and isinstance(cos.shape[-1], int) and r != 2 * cos.shape[-1]:
            raise ctx.not_representable(f"RotaryEmbedding's rotary_embedding_dim {r} is not twice its cache's "
                                        f"last dim {cos.shape[-1]}")
        return ins[:3], {"interleaved": a.get("interleaved", 0)}

    def _standard_form(self, ctx, node) -> bool:
        x, cos = ctx.type(node.inputs[0]), ctx.type(node.inputs[1])
        return ctx.opset >= 23 and np.dtype(x.dtype) in (np.float32, np.float16) and cos.shape[0] == x.shape[0]

    def to_onnx(self, ctx, node):
        """RotaryEmbedding (see `_standard_form`), else the chain of the module docstring."""
        x, cos, sin = node.inputs
        (y,) = node.outputs
        inter = node.attrs["interleaved"]
        tx, tc = ctx.type(x), ctx.type(cos)
        r = 2 * tc.shape[2]
        if self._standard_form(ctx, node):
            ctx.node("RotaryEmbedding", [x, cos, sin], [y], interleaved=inter,
                     rotary_embedding_dim=r if r < tx.shape[3] else None)
            return
        i64 = np.int64
        axis = ctx.constant(np.array([1], i64), "heads_axis")
        (c,) = ctx.node("Unsqueeze", [cos, axis], [ctx.fresh("cos")])
        (s,) = ctx.node("Unsqueeze", [sin, axis], [ctx.fresh("sin")])
        last = ctx.constant(np.array([-1], i64), "last_axis")

        def sl(start, stop, step, hint):
            ins = [x, ctx.constant(np.array([start], i64), "start"), ctx.constant(np.array([stop], i64), "stop"),
                   last, ctx.constant(np.array([step], i64), "step") if step != 1 else ""]
            return ctx.node("Slice", ins, [ctx.fresh(hint)])[0]

        x1, x2 = (sl(0, r, 2, "x1"), sl(1, r, 2, "x2")) if inter else (sl(0, r // 2, 1, "x1"), sl(r // 2, r, 1, "x2"))
        (a,) = ctx.node("Mul", [x1, c], [ctx.fresh("x1_cos")])
        (b,) = ctx.node("Mul", [x2, s], [ctx.fresh("x2_sin")])
        (o1,) = ctx.node("Sub", [a, b], [ctx.fresh("out1")])
        (a,) = ctx.node("Mul", [x2, c], [ctx.fresh("x2_cos")])
        (b,) = ctx.node("Mul", [x1, s], [ctx.fresh("x1_sin")])
        (o2,) = ctx.node("Add", [a, b], [ctx.fresh("out2")])
        rest = [sl(r, tx.shape[3], 1, "rest")] if r < tx.shape[3] else []
        if not inter:
            ctx.node("Concat", [o1, o2, *rest], [y], axis=-1)
            return
        new = ctx.constant(np.array([-1], i64), "pair_axis")
        (u1,) = ctx.node("Unsqueeze", [o1, new], [ctx.fresh("out1_pair")])
        (u2,) = ctx.node("Unsqueeze", [o2, new], [ctx.fresh("out2_pair")])
        (p,) = ctx.node("Concat", [u1, u2], [ctx.fresh("pairs")], axis=-1)
        flat = [ctx.fresh("rotated")] if rest else [y]
        ctx.node("Reshape", [p, ctx.constant(np.array([0, 0, 0, -1], i64), "shape")], flat)
        if rest:
            ctx.node("Concat", [flat[0], *rest], [y], axis=-1)
