"""Fused ops: fused_conv and fused_matmul as the library call, then one epilogue kernel that
adds the bias and the residual and applies the activation (in the registry's order of
rounding: ((y + bias) + residual), then act)."""

from __future__ import annotations

from einsat.gpu.kernels.elementwise import Operand, Step, elementwise_kernel
from einsat.gpu.lower.common import implements, operand, run_kernel
from einsat.gpu.lower.conv import conv
from einsat.gpu.lower.linear import matmul


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


@implements("fused_matmul")
def fused_matmul(dev, node, args, out_types):
    out_t = out_types[0]
    y = matmul(dev, node, list(args[:2]), out_types)[0]
    addends = [(a, operand(a)) if a is not None else None for a in args[2:4]]
    return [epilogue(dev, y, addends, node.attrs["activation"], out_t)]
