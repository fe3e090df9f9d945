"""eOperators as generated kernels (`kernels.eop`): `eop`, and `eop_multi` (one kernel writing
every output)."""

from __future__ import annotations

from einsat.gpu.kernels.eop import eop_kernel
from einsat.gpu.lower.common import implements, operand


@implements("eop")
def eop(dev, node, args, out_types):
    return _run(dev, node.attrs["expr"], args, out_types)


@implements("eop_multi")
def eop_multi(dev, node, args, out_types):
    return _run(dev, node.attrs["exprs"], args, out_types)


def _run(dev, expr: str, args, out_types):
    """The eop's kernel, its storage type the outputs' (`eop_kernel`'s `dtype`)."""
    dtype = out_types[0].dtype
    k = eop_kernel(expr, tuple(operand(a) for a in args), dtype)
    outs = [dev.empty(t.shape, t.dtype) for t in out_types]
    dev.launch(k, list(args) + outs)
    return outs
