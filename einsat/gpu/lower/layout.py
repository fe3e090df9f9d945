"""Layout ops: strided views where NumPy would give a view, generated kernels otherwise.

transpose, slice, split, expand, squeeze, unsqueeze, flatten, identity and reshape cost no
kernel (reshape copies only when the input's layout cannot be viewed with the new shape);
pad, concat, gather, gather_elements, gather_nd, `correct` and `fused_correct` are one generated
kernel each;
constant uploads once.
"""

from __future__ import annotations

from einsat.gpu.kernels.layout import (
    concat_kernel,
    correct_kernel,
    fused_correct_kernel,
    gather_elements_kernel,
    gather_kernel,
    gather_nd_kernel,
    pad_kernel,
)
from einsat.gpu.lower.common import implements, operand, reshape, run_kernel


@implements("transpose")
def transpose(dev, node, args, out_types):
    return [args[0].transpose(tuple(node.attrs["perm"]))]


@implements("reshape", "flatten", "squeeze", "unsqueeze", "identity")
def reshape_like(dev, node, args, out_types):
    return [reshape(dev, args[0], out_types[0].shape)]


@implements("expand")
def expand(dev, node, args, out_types):
    return [dev.xp.broadcast_to(args[0], tuple(out_types[0].shape))]


def _slice(start: int, end: int, step: int) -> slice:
    """A Python slice walking exactly range(start, end, step) (end -1 means 'before 0')."""
    if step < 0 and end < 0:
        return slice(start, None, step)
    return slice(start, end, step)


@implements("slice")
def slice_(dev, node, args, out_types):
    x = args[0]
    at = node.attrs
    axes = at.get("axes") or tuple(range(x.ndim))
    steps = at.get("steps") or (1,) * len(axes)
    index = [slice(None)] * x.ndim
    for ax, s, e, t in zip(axes, at["starts"], at["ends"], steps):
        index[ax] = _slice(s, e, t)
    out = x[tuple(index)]
    if tuple(out.shape) != tuple(out_types[0].shape):
        raise AssertionError(f"slice view {out.shape} != inferred {out_types[0].shape}")
    return [out]


@implements("split")
def split(dev, node, args, out_types):
    x = args[0]
    axis = node.attrs["axis"]
    outs, start = [], 0
    for size in node.attrs["sizes"]:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, start + size)
        outs.append(x[tuple(index)])
        start += size
    return outs


@implements("pad")
def pad(dev, node, args, out_types):
    x = args[0]
    at = node.attrs
    if not any(at["pads"]):
        return [x]
    k = pad_kernel(operand(x), at["pads"], at.get("mode", "constant"), float(at.get("value", 0.0)))
    return [run_kernel(dev, k, [x], out_types[0].shape, out_types[0].dtype)]


@implements("concat")
def concat(dev, node, args, out_types):
    if len(args) == 1:
        return [args[0]]
    k = concat_kernel([operand(a) for a in args], node.attrs["axis"])
    return [run_kernel(dev, k, list(args), out_types[0].shape, out_types[0].dtype)]


@implements("gather")
def gather(dev, node, args, out_types):
    data, idx = args
    k = gather_kernel(operand(data), operand(idx), node.attrs.get("axis", 0))
    return [run_kernel(dev, k, [data, idx], out_types[0].shape, out_types[0].dtype)]


@implements("gather_elements")
def gather_elements(dev, node, args, out_types):
    data, idx = args
    k = gather_elements_kernel(operand(data), operand(idx), node.attrs["axis"])
    return [run_kernel(dev, k, [data, idx], out_types[0].shape, out_types[0].dtype)]


@implements("gather_nd")
def gather_nd(dev, node, args, out_types):
    data, idx = args
    k = gather_nd_kernel(operand(data), operand(idx), node.attrs["batch_dims"])
    return [run_kernel(dev, k, [data, idx], out_types[0].shape, out_types[0].dtype)]


@implements("correct")
def correct(dev, node, args, out_types):
    """out = mutant with out[region] = fix, in one pass (PET's correction)."""
    mutant, fix = args
    region = node.attrs["region"]
    r = mutant.ndim
    k = correct_kernel(operand(mutant), operand(fix), region[:r], region[r:])
    return [run_kernel(dev, k, [mutant, fix], out_types[0].shape, out_types[0].dtype)]


@implements("fused_correct")
def fused_correct(dev, node, args, out_types):
    """The correction written straight into the layout of the reshape/transpose chain after it."""
    mutant, fix = args
    at = node.attrs
    r = mutant.ndim
    k = fused_correct_kernel(operand(mutant), operand(fix), at["region"][:r], at["region"][r:], at["view"], at["perm"])
    return [run_kernel(dev, k, [mutant, fix], out_types[0].shape, out_types[0].dtype)]


@implements("constant")
def constant(dev, node, args, out_types):
    return [dev.constant(node.attrs["value"])]
