"""Scaled dot-product attention: cuDNN's fused SDPA where it takes the call
(`kernels.cudnn_sdpa`: fp16/bf16, [b, h, s, d] with K/V heads dividing Q heads, a [1|b, 1|h,
sq, sk] mask, causal or not), else unfused: scores = scale · q @ kᵀ on cuBLAS (the scale as the
GEMM's alpha, kᵀ a strided view), the mask added by one element-wise kernel, the row softmax
kernel, then probs @ v on cuBLAS. The [Sq, Sk] scores are written once and read twice: this is
the fallback where no fused attention engine runs the op (cuDNN's SDPA keeps them on chip).
A causal attention's triangle is read by the softmax kernel from the indices (`causal_rows`):
no mask tensor is built.

In half (fp16, bf16) the unfused path keeps the scores in fp32, as cuDNN's fused attention does
on chip and as the op's reference computes them: q and k are widened to fp32 (one copy each,
before any broadcast over heads), the scores, the mask's add and the softmax's statistics are
fp32, and the softmax writes the probabilities in half for the half product with v (fp32
accumulation). Scores rounded to half would be off by up to |s|·u before the exponential: at
|s| = 10 in bf16, 4% on a probability."""

from __future__ import annotations

import numpy as np

from einsat.gpu.kernels.codegen import is_half_dtype
from einsat.gpu.kernels.cudnn_sdpa import plan_sdpa
from einsat.gpu.kernels.elementwise import Step, elementwise_kernel
from einsat.gpu.kernels.reduce import softmax_kernel
from einsat.gpu.lower.common import implements, materialize, operand, reshape, run_kernel
from einsat.gpu.lower.fused import epilogue
from einsat.gpu.lower.linear import batched_product, matmul
from einsat.ir.types import TensorType


def _elems(a) -> tuple[int, ...]:
    return tuple(s // a.dtype.itemsize for s in a.strides)


def _cudnn_sdpa(dev, node, q, k, v, mask, out_t):
    """The output of cuDNN's fused attention, or None: the device has none (host emulation, no
    frontend), or the plan is one cuDNN's engines do not take (fp32, a broadcast batch, ...)."""
    ready = getattr(dev, "sdpa_ready", None)
    if ready is None:
        return None
    dense = tuple(int(np.prod(out_t.shape[i + 1:])) for i in range(len(out_t.shape)))  # the output's strides
    plan = plan_sdpa(out_t.dtype, (q.shape, _elems(q)), (k.shape, _elems(k)), (v.shape, _elems(v)),
                     (mask.shape, _elems(mask)) if mask is not None else None, (tuple(out_t.shape), dense),
                     node.attrs["scale"], node.attrs["causal"])
    if isinstance(plan, str) or not ready(plan):
        return None
    out = dev.empty(out_t.shape, out_t.dtype)
    dev.sdpa(plan, q, k, v, mask, out)
    return out


def _widened(dev, a, dtype):
    """`a` converted to `dtype` (a half to fp32: exact), contiguous, in one kernel."""
    k = elementwise_kernel(a.shape, [operand(a)], [Step("cast", (0,), np.dtype(dtype))])
    return run_kernel(dev, k, [a], a.shape, dtype)


@implements("attention")
def attention(dev, node, args, out_types):
    q, k, v = args[0], args[1], args[2]
    mask = args[3] if len(args) > 3 else None
    out_t = out_types[0]
    fused = _cudnn_sdpa(dev, node, q, k, v, mask, out_t)
    if fused is not None:
        return [fused]
    batch = tuple(out_t.shape[:-2])
    sq, sk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    xp = dev.xp
    score_dtype = np.dtype(np.float32) if is_half_dtype(out_t.dtype) else out_t.dtype
    if score_dtype != q.dtype:
        q = _widened(dev, q, score_dtype)
    if score_dtype != k.dtype:
        k = _widened(dev, k, score_dtype)
    qv = xp.broadcast_to(q, batch + (sq, d))
    kt = xp.swapaxes(xp.broadcast_to(k, batch + (sk, d)), -1, -2)
    vv = xp.broadcast_to(v, batch + (sk, dv))
    scores_t = TensorType(batch + (sq, sk), score_dtype)
    scores = dev.empty(scores_t.shape, score_dtype)
    batched_product(dev, qv, kt, scores, alpha=float(node.attrs["scale"]))
    if mask is not None:
        mv = xp.broadcast_to(mask, scores_t.shape)
        scores = epilogue(dev, scores, [(mv, operand(mv))], "none", scores_t)
    causal = sq if node.attrs["causal"] else 0
    probs = run_kernel(dev, softmax_kernel(operand(scores), len(scores_t.shape) - 1, causal_rows=causal,
                                           out_dtype=out_t.dtype), [scores], scores_t.shape, out_t.dtype)
    out = dev.empty(out_t.shape, out_t.dtype)
    batched_product(dev, probs, vv, reshape(dev, out, batch + (sq, dv)))
    return [out]


@implements("packed_attention")
def packed_attention(dev, node, args, out_types):
    """The packed projections x @ w on cuBLAS (the bias added by one element-wise kernel), Q, K and
    V as strided views of them [B, N, S, D], `attention` above, and its output transposed back to
    [B, S, H] (one copy)."""
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    mask = args[3] if len(args) > 3 else None
    out_t = out_types[0]
    bsz, s, h = out_t.shape
    heads = int(node.attrs["num_heads"])
    qkv_t = TensorType((bsz, s, 3 * h), out_t.dtype)
    (qkv,) = matmul(dev, node, [x, w], [qkv_t])
    if b is not None:
        qkv = epilogue(dev, qkv, [(b, operand(b))], "none", qkv_t)
    parts = [reshape(dev, qkv[..., i * h:(i + 1) * h], (bsz, s, heads, h // heads)).transpose(0, 2, 1, 3)
             for i in range(3)]
    heads_t = TensorType((bsz, heads, s, h // heads), out_t.dtype)
    (y,) = attention(dev, node, parts + ([mask] if mask is not None else []), [heads_t])
    return [reshape(dev, materialize(dev, y.transpose(0, 2, 1, 3)), out_t.shape)]
