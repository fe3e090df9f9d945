"""Element-wise ops as generated kernels over strided, broadcast inputs.

Every element-wise op of the registry is one `Step` of `kernels.elementwise`; batchnorm
(inference) is one step too, its per-channel parameters read through stride-0 broadcasting.
"""

from __future__ import annotations

from einsat.gpu.kernels.elementwise import EXPRESSIONS, Operand, Step, elementwise_kernel
from einsat.gpu.lower.common import implements, operand, run_kernel
from einsat.ir.registry import REGISTRY, Op


def _attrs(node) -> tuple:
    return tuple(sorted((k, v) for k, v in node.attrs.items() if isinstance(v, (int, float, str, bool))))


def pointwise(dev, node, args, out_types):
    """One kernel: out = op(*args) with NumPy broadcasting."""
    out = out_types[0]
    ops = [operand(a) for a in args]
    step = Step(node.op.value, tuple(range(len(ops))), out.dtype, _attrs(node))
    k = elementwise_kernel(out.shape, ops, [step])
    return [run_kernel(dev, k, list(args), out.shape, out.dtype)]


# every element-wise op of the registry with a C expression is one element-wise step (batchnorm,
# whose parameters broadcast over dim 1, has its own below; identity names its input)
_ELEMENTWISE = sorted(op.value for op in Op if op.value in EXPRESSIONS and REGISTRY[op].elementwise
                      and not REGISTRY[op].aliases)
implements(*_ELEMENTWISE)(pointwise)


@implements("batchnorm")
def batchnorm(dev, node, args, out_types):
    """y = (x - mean) / sqrt(var + eps) * scale + bias, parameters broadcast over dim 1."""
    x = args[0]
    out = out_types[0]
    rank = len(x.shape)
    ops = [operand(x)]
    for p in args[1:5]:
        item = p.dtype.itemsize
        shape = (p.shape[0],) + (1,) * (rank - 2)
        ops.append(Operand(p.dtype, shape, (p.strides[0] // item,) + (0,) * (rank - 2)))
    step = Step("batchnorm", (0, 1, 2, 3, 4), out.dtype, _attrs(node))
    k = elementwise_kernel(out.shape, ops, [step])
    return [run_kernel(dev, k, list(args[:5]), out.shape, out.dtype)]
