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


@implements("rotary")
def rotary(dev, node, args, out_types):
    """Two element-wise kernels over strided views of x's halves (x1 · c - x2 · s, x2 · c + x1 · s,
    cos and sin viewed over the heads), then one concat kernel (interleaved: the pairs stacked on
    a new last axis, a view flattening them back) with the dims that pass through."""
    from einsat.gpu.kernels.layout import concat_kernel
    from einsat.gpu.lower.common import reshape

    x, cos, sin = args
    out = out_types[0]
    b, h, s, d = (int(v) for v in x.shape)
    half = int(cos.shape[-1])
    r = 2 * half
    c = reshape(dev, cos, (cos.shape[0], 1, s, half))
    sn = reshape(dev, sin, (sin.shape[0], 1, s, half))
    if node.attrs["interleaved"]:
        x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
    else:
        x1, x2 = x[..., :half], x[..., half:r]
    dt = out.dtype
    shape = (b, h, s, half)

    def combine(a, ca, bb, sb, op):
        ins = [a, ca, bb, sb]
        steps = [Step("mul", (0, 1), dt), Step("mul", (2, 3), dt), Step(op, (4, 5), dt)]
        return run_kernel(dev, elementwise_kernel(shape, [operand(v) for v in ins], steps), ins, shape, dt)

    o1 = combine(x1, c, x2, sn, "sub")
    o2 = combine(x2, c, x1, sn, "add")
    parts = [o1, o2]
    if node.attrs["interleaved"]:
        pairs = [reshape(dev, o, shape + (1,)) for o in parts]
        k = concat_kernel([operand(v) for v in pairs], 4)
        stacked = run_kernel(dev, k, pairs, shape + (2,), dt)
        parts = [reshape(dev, stacked, (b, h, s, r))]
    if r < d:
        parts.append(x[..., r:])
    if len(parts) == 1:
        return parts
    axis = 3
    k = concat_kernel([operand(v) for v in parts], axis)
    return [run_kernel(dev, k, parts, out.shape, dt)]
