"""Fused ops: fused_conv and fused_matmul as the library call, then one epilogue kernel that
adds the bias and the residual and applies the activation (in the registry's order of
rounding: ((y + bias) + residual), then act).

fused_matmul runs as one cuBLASLt call where an epilogue computes it (`_lt_epilogue`: on a device
with `gemm_epilogues`, a bias over the output's last axis, packed; activation none or relu; a
residual laid out as the output, read as the GEMM's C with beta 1): act(a @ b + residual + bias)
with the sum in fp32 inside the GEMM (one rounding to the output's type, where the separate
kernel rounds the product first). Otherwise (sigmoid, tanh, a broadcast residual, a bias over
another axis) the GEMM, then the epilogue kernel.
"""

from __future__ import annotations

from einsat.gpu.kernels import cublaslt
from einsat.gpu.kernels.elementwise import Operand, Step, elementwise_kernel
from einsat.gpu.lower.common import implements, is_contiguous, operand, reshape, run_kernel
from einsat.gpu.lower.conv import conv
from einsat.gpu.lower.linear import matmul, plan_product, product_views, rows_are_last_axis


def epilogue(dev, y, addends: list, activation: str, out_t):
    """act(((y + a0) + a1) ...) in one kernel; each addend is (array, Operand) or None."""
    ops, arrays = [operand(y)], [y]
    for a in addends:
        if a is not None:
            arrays.append(a[0])
            ops.append(a[1])
    n = len(ops)
    steps, prev = [], 0
    for k in range(1, n):
        steps.append(Step("add", (prev, k), out_t.dtype))
        prev = n + len(steps) - 1
    if activation != "none":
        steps.append(Step(activation, (prev,), out_t.dtype))
    if not steps:
        return y
    return run_kernel(dev, elementwise_kernel(out_t.shape, ops, steps), arrays, out_t.shape, out_t.dtype)


def _channel_bias(bias, rank: int):
    item = bias.dtype.itemsize
    shape = (bias.shape[0],) + (1,) * (rank - 2)
    strides = (bias.strides[0] // item,) + (0,) * (rank - 2)
    return bias, Operand(bias.dtype, shape, strides)


@implements("fused_conv")
def fused_conv(dev, node, args, out_types):
    out_t = out_types[0]
    bias = args[2] if len(args) > 2 else None
    res = args[3] if len(args) > 3 else None
    y = conv(dev, node, list(args[:2]), out_types)[0]  # conv reads only the geometry attributes
    addends = [_channel_bias(bias, len(out_t.shape)) if bias is not None else None,
               (res, operand(res)) if res is not None else None]
    return [epilogue(dev, y, addends, node.attrs["activation"], out_t)]


def _packed_bias(bias, n: int):
    """`bias` as a packed [n] vector over the output's last axis, or None when it is not one."""
    if bias is None:
        return None
    if any(d != 1 for d in bias.shape[:-1]) or bias.ndim == 0 or bias.shape[-1] != n:
        return None
    if n > 1 and bias.strides[-1] != bias.dtype.itemsize:
        return None
    return bias


def _lt_epilogue(dev, node, args, out_t):
    """fused_matmul as one cuBLASLt GEMM with its epilogue, or None where none computes it."""
    bias = args[2] if len(args) > 2 else None
    res = args[3] if len(args) > 3 else None
    act = node.attrs["activation"]
    a, b = args[0], args[1]
    if not getattr(dev, "gemm_epilogues", False) or not cublaslt.supported(out_t.dtype) or \
            cublaslt.epilogue_of(bias is not None, act) is None or a.ndim < 2 or b.ndim < 2 or \
            int(a.shape[-1]) == 0 or 0 in out_t.shape:
        return None
    n = int(out_t.shape[-1])
    vec = _packed_bias(bias, n)
    if bias is not None and vec is None:
        return None
    if res is not None and (tuple(res.shape) != tuple(out_t.shape) or not is_contiguous(res)):
        return None  # C shares D's layout descriptor: a broadcast or strided residual cannot be C
    av, bv, batch = product_views(dev, a, b, out_t)
    out = dev.empty(out_t.shape, out_t.dtype)
    ov = reshape(dev, out, batch + (av.shape[-2], n))
    rv = reshape(dev, res, batch + (av.shape[-2], n)) if res is not None else None
    av, bv, plan = plan_product(dev, av, bv, ov)
    if plan is None:
        return None
    if not rows_are_last_axis(plan, ov):  # cuBLAS's rows are not the bias's axis: the GEMM, then the kernel
        for call in plan:
            dev.gemm(call, av, bv, ov, 1.0, 0.0)
        return epilogue(dev, out, _addends(args), act, out_t)
    vec = reshape(dev, vec, (n,)) if vec is not None else None
    epi = cublaslt.GemmEpilogue(act, vec, rv)
    try:
        for call in plan:
            dev.gemm(call, av, bv, ov, 1.0, 1.0 if rv is not None else 0.0, epilogue=epi)
    except cublaslt.EpilogueUnsupported:  # (a later call of the plan, say): all of them again, without
        for call in plan:
            dev.gemm(call, av, bv, ov, 1.0, 0.0)
        return epilogue(dev, out, _addends(args), act, out_t)
    return out


def _addends(args) -> list:
    return [(a, operand(a)) if a is not None else None for a in args[2:4]]


@implements("fused_matmul", gemm=True)
def fused_matmul(dev, node, args, out_types):
    out_t = out_types[0]
    fused = _lt_epilogue(dev, node, args, out_t)
    if fused is not None:
        return [fused]
    y = matmul(dev, node, list(args[:2]), out_types)[0]
    return [epilogue(dev, y, _addends(args), node.attrs["activation"], out_t)]
