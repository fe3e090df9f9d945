"""Matrix products on cuBLAS: matmul (NumPy broadcasting), batchmatmul, gemm; einsum as one
generated kernel.

Operands enter cuBLAS as the views they are (a transposed or broadcast input costs no copy);
only a matrix with no unit-stride axis is copied first. Each planned call runs by the algorithm
chosen for it (`dev.gemm`: cuBLAS's default or a cuBLASLt heuristic candidate, timed:
`kernels/cublaslt.py`), in fp32, TF32 (`dev.tf32`), fp16 or bf16 storage (fp32 accumulation),
or fp64. Dtypes cuBLAS lacks (integers) run a generated kernel.
"""

from __future__ import annotations

from einsat.gpu.kernels import cublas
from einsat.gpu.kernels.einsum import einsum_kernel
from einsat.gpu.kernels.elementwise import copy_kernel
from einsat.gpu.kernels.reduce import matmul_kernel
from einsat.gpu.lower.common import implements, materialize, operand, reshape, run_kernel
from einsat.ir.ops.einsum import einsum_labels, label_sizes


def _elems(a) -> tuple[int, ...]:
    return tuple(s // a.dtype.itemsize for s in a.strides)


def plan_product(dev, a, b, out):
    """(a, b, calls): the cuBLAS calls computing out = a @ b over views of equal batch dims, after
    copying an operand that cannot enter cuBLAS as it is (`cublas.plan_gemm`)."""
    plan = cublas.plan_gemm(a.shape, _elems(a), b.shape, _elems(b), out.shape, _elems(out))
    if plan is None:
        a = materialize(dev, a)
        plan = cublas.plan_gemm(a.shape, _elems(a), b.shape, _elems(b), out.shape, _elems(out))
    if plan is None:
        b = materialize(dev, b)
        plan = cublas.plan_gemm(a.shape, _elems(a), b.shape, _elems(b), out.shape, _elems(out))
    return a, b, plan


def rows_are_last_axis(plan, out) -> bool:
    """Whether every call computes the row-major out as column-major outᵀ (cuBLAS's rows = out's
    last axis): then a cuBLASLt bias, a vector over cuBLAS's rows, is a bias over out's last axis."""
    n = out.shape[-1]
    return all(call.first.source == "b" and call.m == n for call in plan)


def batched_product(dev, a, b, out, alpha: float = 1.0, beta: float = 0.0) -> None:
    """out[*batch] = alpha * a[*batch] @ b[*batch] + beta * out (views of equal batch dims)."""
    if out.size == 0:
        return
    if a.shape[-1] == 0:  # an empty contraction: out = beta * out
        if beta == 0.0:
            dev.fill(out, 0.0)
        elif beta != 1.0:
            raise NotImplementedError("beta * C with an empty contraction")
        return
    if not cublas.supported(out.dtype):
        if alpha != 1.0 or beta != 0.0:
            raise NotImplementedError(f"integer gemm with alpha/beta on {out.dtype}")
        k = matmul_kernel(operand(a), operand(b), out.shape)
        dev.launch(k, [a, b, out])
        return
    a, b, plan = plan_product(dev, a, b, out)
    for call in plan:
        dev.gemm(call, a, b, out, alpha, beta)


def product_views(dev, a, b, out_t):
    """(a, b, batch): matmul's operands as [*batch, m, k] and [*batch, k, n] views (NumPy's rules:
    1-D operands promoted, batch dims broadcast), and the batch dims of the output."""
    a2 = reshape(dev, a, (1,) + tuple(a.shape)) if a.ndim == 1 else a
    b2 = reshape(dev, b, tuple(b.shape) + (1,)) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    n = b2.shape[-1]
    if a.ndim > 1 and b.ndim > 1:
        batch = tuple(out_t.shape[:-2])
    elif a.ndim == 1 and b.ndim == 1:
        batch = ()
    else:  # one vector operand: its dim was squeezed out of the output
        batch = tuple(out_t.shape[:-1])
    return _broadcast(dev, a2, batch, m, k), _broadcast(dev, b2, batch, k, n), batch


def _broadcast(dev, x, batch, rows, cols):
    return dev.xp.broadcast_to(x, tuple(batch) + (rows, cols))


@implements("matmul", "batchmatmul", gemm=True)
def matmul(dev, node, args, out_types):
    """NumPy matmul: 1-D operands are promoted then squeezed, batch dims broadcast."""
    out_t = out_types[0]
    av, bv, batch = product_views(dev, args[0], args[1], out_t)
    out = dev.empty(out_t.shape, out_t.dtype)
    ov = reshape(dev, out, batch + (av.shape[-2], bv.shape[-1]))
    batched_product(dev, av, bv, ov)
    return [out]


def _lt_bias_gemm(dev, a, b, c, alpha: float, out_t):
    """gemm with a bias vector c ([N] or [1, N]) and beta 1 as one cuBLASLt call with the BIAS
    epilogue (no copy of c into the output first), where the device runs epilogues and an algorithm
    takes it: the output, or None (no GEMM issued; the caller runs the copy and the GEMM)."""
    from einsat.gpu.kernels import cublaslt
    n = int(out_t.shape[-1])
    if not getattr(dev, "gemm_epilogues", False) or not cublaslt.supported(out_t.dtype) or 0 in out_t.shape or \
            a.shape[-1] == 0 or c.ndim == 0 or any(d != 1 for d in c.shape[:-1]) or c.shape[-1] != n or \
            (n > 1 and c.strides[-1] != c.dtype.itemsize):
        return None
    out = dev.empty(out_t.shape, out_t.dtype)
    a, b, plan = plan_product(dev, a, b, out)
    if plan is None or not rows_are_last_axis(plan, out):
        return None
    epi = cublaslt.GemmEpilogue("none", reshape(dev, c, (n,)))
    try:
        for call in plan:
            dev.gemm(call, a, b, out, alpha, 0.0, epilogue=epi)
    except cublaslt.EpilogueUnsupported:
        return None
    return out


@implements("gemm", gemm=True)
def gemm(dev, node, args, out_types):
    """y = alpha * op(a) @ op(b) + beta * c, c broadcast to the output."""
    a, b = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    at = node.attrs
    if at.get("trans_a", 0):
        a = a.T
    if at.get("trans_b", 0):
        b = b.T
    out_t = out_types[0]
    beta = float(at.get("beta", 1.0))
    fused = _lt_bias_gemm(dev, a, b, c, float(at.get("alpha", 1.0)), out_t) if c is not None and beta == 1.0 \
        else None
    if fused is not None:
        return [fused]
    if c is not None and beta != 0.0:
        cv = dev.xp.broadcast_to(c, out_t.shape)
        out = run_kernel(dev, copy_kernel(operand(cv)), [cv], out_t.shape, out_t.dtype)
    else:
        out = dev.empty(out_t.shape, out_t.dtype)
        beta = 0.0
    batched_product(dev, a, b, out, float(at.get("alpha", 1.0)), beta)
    return [out]


@implements("einsum")
def einsum(dev, node, args, out_types):
    labels, out = einsum_labels(node.attrs["equation"], [a.ndim for a in args])
    sizes = tuple(sorted(label_sizes(labels, [a.shape for a in args]).items()))
    k = einsum_kernel(tuple(operand(a) for a in args), tuple(labels), out, sizes)
    return [run_kernel(dev, k, list(args), out_types[0].shape, out_types[0].dtype)]
