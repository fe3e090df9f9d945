"""Scaled dot-product attention, unfused: scores = scale · q @ kᵀ on cuBLAS (the scale as the
GEMM's alpha, kᵀ a strided view), the mask added by one element-wise kernel, the row softmax
kernel, then probs @ v on cuBLAS. The [Sq, Sk] scores are written once and read twice: this is
the fallback where no fused attention engine runs the op (cuDNN's SDPA keeps them on chip).
A causal attention's triangle is read by the softmax kernel from the indices (`causal_rows`):
no mask tensor is built."""

from __future__ import annotations

from einsat.gpu.kernels.reduce import softmax_kernel
from einsat.gpu.lower.common import implements, operand, reshape, run_kernel
from einsat.gpu.lower.fused import epilogue
from einsat.gpu.lower.linear import batched_product
from einsat.ir.types import TensorType


@implements("attention")
def attention(dev, node, args, out_types):
    q, k, v = args[0], args[1], args[2]
    mask = args[3] if len(args) > 3 else None
    out_t = out_types[0]
    batch = tuple(out_t.shape[:-2])
    sq, sk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    xp = dev.xp
    qv = xp.broadcast_to(q, batch + (sq, d))
    kt = xp.swapaxes(xp.broadcast_to(k, batch + (sk, d)), -1, -2)
    vv = xp.broadcast_to(v, batch + (sk, dv))
    scores_t = TensorType(batch + (sq, sk), out_t.dtype)
    scores = dev.empty(scores_t.shape, out_t.dtype)
    batched_product(dev, qv, kt, scores, alpha=float(node.attrs["scale"]))
    if mask is not None:
        mv = xp.broadcast_to(mask, scores_t.shape)
        scores = epilogue(dev, scores, [(mv, operand(mv))], "none", scores_t)
    causal = sq if node.attrs["causal"] else 0
    probs = run_kernel(dev, softmax_kernel(operand(scores), len(scores_t.shape) - 1, causal_rows=causal),
                       [scores], scores_t.shape, out_t.dtype)
    out = dev.empty(out_t.shape, out_t.dtype)
    batched_product(dev, probs, vv, reshape(dev, out, batch + (sq, dv)))
    return [out]
