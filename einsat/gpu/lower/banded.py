"""Band matrix products (g2bmm, gbmm) as generated kernels."""

from __future__ import annotations

from einsat.gpu.kernels.banded import g2bmm_kernel, gbmm_kernel
from einsat.gpu.lower.common import implements, operand, run_kernel


@implements("g2bmm")
def g2bmm(dev, node, args, out_types):
    a, b = args
    k = g2bmm_kernel(operand(a), operand(b), node.attrs["width"], node.attrs.get("dilation", 1))
    return [run_kernel(dev, k, [a, b], out_types[0].shape, out_types[0].dtype)]


@implements("gbmm")
def gbmm(dev, node, args, out_types):
    p, v = args
    k = gbmm_kernel(operand(p), operand(v), node.attrs.get("dilation", 1))
    return [run_kernel(dev, k, [p, v], out_types[0].shape, out_types[0].dtype)]
