"""Reductions and normalizations as generated kernels: reduce_sum, reduce_mean, cumsum, softmax,
layernorm, rmsnorm (its expression's eop kernel), skip_layernorm and skip_rmsnorm (the sum, then the
norm's lowering), lrn, max/average pooling and global average pooling."""

from __future__ import annotations

from einsat.gpu.kernels.elementwise import Step, elementwise_kernel
from einsat.gpu.kernels.eop import eop_kernel
from einsat.gpu.kernels.reduce import (
    argmax_kernel,
    cumsum_kernel,
    layernorm_kernel,
    lrn_kernel,
    pool_kernel,
    reduce_kernel,
    softmax_kernel,
)
from einsat.gpu.lower.common import IMPLS, implements, operand, reshape, run_kernel
from einsat.ir.expr.printer import fingerprint
from einsat.ir.graph import Node
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType


def _reduce(dev, x, axes, kind, out_t):
    axes = tuple(axes) if axes else tuple(range(x.ndim))
    k = reduce_kernel(operand(x), axes, kind)
    kept = [d for i, d in enumerate(x.shape) if i not in axes]
    y = run_kernel(dev, k, [x], kept, out_t.dtype)
    return reshape(dev, y, out_t.shape)


@implements("reduce_sum")
def reduce_sum(dev, node, args, out_types):
    return [_reduce(dev, args[0], node.attrs.get("axes", ()), "sum", out_types[0])]


@implements("reduce_mean")
def reduce_mean(dev, node, args, out_types):
    return [_reduce(dev, args[0], node.attrs.get("axes", ()), "mean", out_types[0])]


@implements("reduce_max")
def reduce_max(dev, node, args, out_types):
    return [_reduce(dev, args[0], node.attrs.get("axes", ()), "max", out_types[0])]


@implements("lrn")
def lrn(dev, node, args, out_types):
    a = node.attrs
    k = lrn_kernel(operand(args[0]), a["size"], a["alpha"], a["beta"], a["bias"])
    return [run_kernel(dev, k, [args[0]], out_types[0].shape, out_types[0].dtype)]


@implements("cumsum")
def cumsum(dev, node, args, out_types):
    a = node.attrs
    k = cumsum_kernel(operand(args[0]), a["axis"], bool(a["exclusive"]), bool(a["reverse"]))
    return [run_kernel(dev, k, [args[0]], out_types[0].shape, out_types[0].dtype)]


@implements("global_avgpool")
def global_avgpool(dev, node, args, out_types):
    x = args[0]
    return [_reduce(dev, x, tuple(range(2, x.ndim)), "mean", out_types[0])]


@implements("softmax")
def softmax(dev, node, args, out_types):
    x = args[0]
    axis = node.attrs.get("axis", -1) % x.ndim
    return [run_kernel(dev, softmax_kernel(operand(x), axis), [x], x.shape, out_types[0].dtype)]


@implements("layernorm")
def layernorm(dev, node, args, out_types):
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = node.attrs.get("axis", -1) % x.ndim
    k = layernorm_kernel(operand(x), operand(scale), operand(bias) if bias is not None else None, axis,
                         float(node.attrs.get("epsilon", 1e-5)))
    ins = [x, scale] + ([bias] if bias is not None else [])
    return [run_kernel(dev, k, ins, x.shape, out_types[0].dtype)]


@implements("rmsnorm")
def rmsnorm(dev, node, args, out_types):
    """The eop route: the op's expression as an eOperator's row kernel (statistics in float)."""
    x, scale = args[0], args[1]
    e = opdef(Op.RMSNORM).expression([TensorType(x.shape, x.dtype), TensorType(scale.shape, scale.dtype)], node.attrs)
    k = eop_kernel(fingerprint(e), (operand(x), operand(scale)), out_types[0].dtype)
    return [run_kernel(dev, k, [x, scale], x.shape, out_types[0].dtype)]


@implements("skip_layernorm", "skip_rmsnorm")
def skip_norm(dev, node, args, out_types):
    """The sum x + skip (+ bias) in one element-wise kernel, then the norm's own lowering of it."""
    d = opdef(node.op)
    x, skip = args[0], args[1]
    bias = d._bias(args)
    sum_t = out_types[1]
    steps = [Step("add", (0, 1), sum_t.dtype)]
    ins = [x, skip]
    if bias is not None:
        steps.append(Step("add", (3, 2), sum_t.dtype))  # ref 3: the first step's result (after 3 inputs), 2: the bias
        ins.append(bias)
    k = elementwise_kernel(sum_t.shape, [operand(a) for a in ins], steps)
    s = run_kernel(dev, k, ins, sum_t.shape, sum_t.dtype)
    params = [p for p in d._norm_args(args) if p is not None]
    norm = Node(d.norm, ("s",) + tuple(f"p{k}" for k in range(len(params))), ("y",), dict(node.attrs), name="norm")
    (y,) = IMPLS[d.norm.value](dev, norm, [s, *params], out_types[:1])
    return [y, s]


def _pool(dev, node, args, out_types, kind):
    x = args[0]
    at = node.attrs
    nsp = x.ndim - 2
    kernel = tuple(at["kernel"])
    k = pool_kernel(operand(x), out_types[0].shape, kind, kernel, at.get("stride") or (1,) * nsp,
                    at.get("padding") or (0,) * 2 * nsp, at.get("dilation") or (1,) * nsp,
                    bool(at.get("count_include_pad", 0)))
    return [run_kernel(dev, k, [x], out_types[0].shape, out_types[0].dtype)]


@implements("maxpool")
def maxpool(dev, node, args, out_types):
    return _pool(dev, node, args, out_types, "max")


@implements("avgpool")
def avgpool(dev, node, args, out_types):
    return _pool(dev, node, args, out_types, "avg")


@implements("reduce_min")
def reduce_min(dev, node, args, out_types):
    return [_reduce(dev, args[0], node.attrs.get("axes", ()), "min", out_types[0])]


@implements("argmax")
def argmax(dev, node, args, out_types):
    x = args[0]
    axis = node.attrs["axis"]
    kept = [d for i, d in enumerate(x.shape) if i != axis]
    y = run_kernel(dev, argmax_kernel(operand(x), axis), [x], kept, out_types[0].dtype)
    return [reshape(dev, y, out_types[0].shape)]
