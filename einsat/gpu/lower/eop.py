"""eOperators as generated kernels (`kernels.eop`)."""

from __future__ import annotations

from einsat.gpu.kernels.eop import eop_kernel
from einsat.gpu.lower.common import implements, operand, run_kernel


@implements("eop")
def eop(dev, node, args, out_types):
    out = out_types[0]
    k = eop_kernel(node.attrs["expr"], tuple(operand(a) for a in args), out.dtype)
    return [run_kernel(dev, k, list(args), out.shape, out.dtype)]
