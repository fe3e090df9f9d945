"""Split-point rules of the ops, one function per op family (see `boxes.py` for the contract).

Every rule takes (node, input splits, input shapes, output shapes, context) and returns the
output splits as one set of points per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from einsat.ir.groups import RESHAPES
from einsat.ir.registry import Op
from einsat.verify.splits import (
    axis_splits,
    box_ids,
    broadcast_splits,
    every,
    reshape_splits,
    uniform_splits,
    union,
)


@dataclass
class RuleContext:
    graph: object
    env: object = None


# -- the rules of the ops, each registered beside its function (as gpu's `@implements`) -----------

SPLIT_RULES: dict[Op, Callable] = {}
# op -> why it has no split rule (`boxes` then splits its outputs at every element)
NO_SPLIT_RULE: dict[Op, str] = {}


def split_rule(*ops: Op, single: bool = True) -> Callable:
    """Register the decorated function as the split rule of `ops`; `single`: it returns the splits
    of the op's one output (not a list, one per output)."""
    def register(fn):
        rule = (lambda node, ins, xs, ys, ctx: [fn(node, ins, xs, ys, ctx)]) if single else fn
        for op in ops:
            if op in SPLIT_RULES:
                raise RuntimeError(f"{op.value} has two split rules")
            SPLIT_RULES[op] = rule
        return fn
    return register


def no_split_rule(op: Op, reason: str) -> None:
    """Register why `op` has no split rule (its outputs are split at every element)."""
    NO_SPLIT_RULE[op] = reason


@split_rule(Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG)
def elementwise(node, ins, xs, ys, ctx):
    return union(*[broadcast_splits(s, x, ys[0]) for s, x in zip(ins, xs) if s is not None])


@split_rule(Op.BATCHNORM)
def batchnorm(node, ins, xs, ys, ctx):
    """x·A[c] + B[c]. Exact coefficients change where any of the four parameters does; random
    ones (one per distinct parameter tuple) are uniform when all tuples are equal or all differ,
    and split at every channel otherwise."""
    from einsat.verify.field.evaluate import fold_constant
    out = [set(s) for s in ins[0]]
    if ctx.env is None or ctx.env.batchnorm_key is None:
        for s in ins[1:]:
            out[1] |= set(s[0])
        return out
    params = np.stack([fold_constant(ctx.graph, i).astype(np.float64) for i in node.inputs[1:]])
    distinct = len(np.unique(params.T, axis=0))
    if distinct not in (1, params.shape[1]):
        out[1] |= set(range(1, params.shape[1]))
    return out


@split_rule(*RESHAPES)
def same(node, ins, xs, ys, ctx):
    return [set(s) for s in reshape_splits(xs[0], ys[0], ins[0])]


@split_rule(Op.TRANSPOSE)
def transpose(node, ins, xs, ys, ctx):
    return [set(ins[0][p]) for p in node.attrs["perm"]]


@split_rule(Op.EXPAND)
def expand(node, ins, xs, ys, ctx):
    return broadcast_splits(ins[0], xs[0], ys[0])


@split_rule(Op.SLICE)
def slice_(node, ins, xs, ys, ctx):
    a = node.attrs
    out = []
    for d, (n, m) in enumerate(zip(xs[0], ys[0])):
        idx = a["starts"][d] + np.arange(m) * a["steps"][d]
        out.append(axis_splits(idx, box_ids(idx, ins[0][d], n)))
    return out


@split_rule(Op.PAD)
def pad(node, ins, xs, ys, ctx):
    pads, mode = node.attrs["pads"], node.attrs["mode"]
    out = []
    for d, (n, m) in enumerate(zip(xs[0], ys[0])):
        q = np.arange(m) - pads[d]
        if mode == "reflect" and n > 1:
            period = 2 * (n - 1)
            q = np.abs(np.mod(q, period))
            q = np.where(q >= n, period - q, q)
        elif mode != "constant":
            q = np.clip(q, 0, n - 1)
        out.append(axis_splits(q, box_ids(q, ins[0][d], n)) | {pads[d], pads[d] + n})
    return out


@split_rule(Op.CONCAT)
def concat(node, ins, xs, ys, ctx):
    axis = node.attrs["axis"]
    out = union(*[[set(s) for s in sp] for sp in ins])
    out[axis] = set()
    off = 0
    for sp, x in zip(ins, xs):
        out[axis] |= {off + s for s in sp[axis]} | {off}
        off += x[axis]
    return out


@split_rule(Op.SPLIT, single=False)
def split(node, ins, xs, ys, ctx):
    axis = node.attrs["axis"]
    outs, off = [], 0
    for y in ys:
        o = [set(s) for s in ins[0]]
        o[axis] = {s - off for s in ins[0][axis] if off < s < off + y[axis]}
        outs.append(o)
        off += y[axis]
    return outs


@split_rule(Op.CORRECT)
def correct(node, ins, xs, ys, ctx):
    r, rank = node.attrs["region"], len(ys[0])
    out = [set(s) for s in ins[0]]
    for d in range(rank):
        out[d] |= {r[d], r[rank + d]} | {r[d] + s for s in ins[1][d]}
    return out


@split_rule(Op.CONSTANT)
def constant(node, ins, xs, ys, ctx):
    return [set(s) for s in uniform_splits(node.attrs["value"])]


@split_rule(Op.MATMUL, Op.BATCHMATMUL, single=False)
def matmul(node, ins, xs, ys, ctx):
    (sa, sb), (xa, xb) = ins, xs
    a2, sa2 = ((1,) + xa, ((),) + sa) if len(xa) == 1 else (xa, sa)
    b2, sb2 = (xb + (1,), sb + ((),)) if len(xb) == 1 else (xb, sb)
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    full = union(broadcast_splits(sa2[:-2], a2[:-2], batch), broadcast_splits(sb2[:-2], b2[:-2], batch)) \
        if batch else []
    full = full + [set(sa2[-2]), set(sb2[-1])]
    drop = ([len(full) - 2] if len(xa) == 1 else []) + ([len(full) - 1] if len(xb) == 1 else [])
    return [[s for k, s in enumerate(full) if k not in drop]]


@split_rule(Op.GEMM, single=False)
def gemm(node, ins, xs, ys, ctx):
    i = set(ins[0][1] if node.attrs["trans_a"] else ins[0][0])
    j = set(ins[1][0] if node.attrs["trans_b"] else ins[1][1])
    out = [i, j]
    if len(ins) > 2 and ins[2] is not None:
        out = union(out, broadcast_splits(ins[2], xs[2], ys[0]))
    return [out]


def _taps(node, ins, xs, ys, transposed: bool, kernel, dilation, count_pad=None):
    """Spatial splits of a conv, conv_transpose or pool: one position map per tap."""
    a, nsp = node.attrs, len(xs[0]) - 2
    out = []
    for i in range(nsp):
        n, m = xs[0][2 + i], ys[0][2 + i]
        s, p = a["stride"][i], a["padding"][i]
        o, t = np.arange(m)[:, None], np.arange(kernel[i])[None, :]
        if transposed:
            num = o + p - t * dilation[i]
            q = np.where(num % s == 0, num // s, -(10 ** 9))
            ids = box_ids(q, ins[0][2 + i], n)
        else:
            q = o * s - p + t * dilation[i]
            lo, hi = (-p, n + a["padding"][nsp + i]) if count_pad else (None, None)
            ids = box_ids(q, ins[0][2 + i], n, lo, hi)
        out.append(axis_splits(q, ids))
    return out


@split_rule(Op.CONV, single=False)
def conv(node, ins, xs, ys, ctx, transposed=False):
    g = node.attrs["groups"]
    ws, f = xs[1], ys[0][1]
    fg = f // g
    if transposed:  # weight [C, F/g, *k]: its dim 1 is the output channel within a group
        fs = {gi * fg + s for gi in range(g) for s in ins[1][1]}
    else:
        fs = set(ins[1][0])
    fs |= {gi * fg for gi in range(1, g)}
    if len(ins) > 2 and ins[2] is not None:
        fs |= set(ins[2][0])
    spatial = _taps(node, ins, xs, ys, transposed, ws[2:], node.attrs["dilation"])
    return [[set(ins[0][0]), fs] + spatial]


@split_rule(Op.AVGPOOL, single=False)
def avgpool(node, ins, xs, ys, ctx):
    nsp = len(xs[0]) - 2
    spatial = _taps(node, ins, xs, ys, False, node.attrs["kernel"], (1,) * nsp, count_pad=True)
    return [[set(ins[0][0]), set(ins[0][1])] + spatial]


@split_rule(Op.REDUCE_SUM, Op.REDUCE_MEAN, single=False)
def reduce(node, ins, xs, ys, ctx, axes=None, keep=None):
    axes = node.attrs["axes"] if axes is None else axes
    keep = node.attrs["keepdims"] if keep is None else keep
    if keep:
        return [[set() if d in axes else set(s) for d, s in enumerate(ins[0])]]
    return [[set(s) for d, s in enumerate(ins[0]) if d not in axes]]


@split_rule(Op.GLOBAL_AVGPOOL, single=False)
def global_avgpool(node, ins, xs, ys, ctx):
    return reduce(node, ins, xs, ys, ctx, tuple(range(2, len(xs[0]))), 1)


@split_rule(Op.G2BMM)
def g2bmm(node, ins, xs, ys, ctx):
    (sa, sb), m = ins, xs[0][1]
    w, d = node.attrs["width"], node.attrs["dilation"]
    i = np.arange(m)[:, None]
    rows = i + d * (np.arange(2 * w + 1)[None, :] - w)
    isplits = axis_splits(rows, box_ids(rows, sb[1], m)) | set(sa[1])
    return [[set(sa[0]) | set(sb[0]), isplits, set(range(1, 2 * w + 1))]]


@split_rule(Op.GBMM)
def gbmm(node, ins, xs, ys, ctx):
    (sp, sv), m, jj = ins, xs[0][1], xs[0][2]
    d = node.attrs["dilation"]
    rows = np.arange(m)[:, None] + d * (np.arange(jj)[None, :] - (jj - 1) // 2)
    isplits = axis_splits(rows, box_ids(rows, sv[1], m)) | set(sp[1])
    return [[set(sp[0]) | set(sv[0]), isplits, set(sv[2])]]


@split_rule(Op.CONV_TRANSPOSE, single=False)
def conv_transpose(node, ins, xs, ys, ctx):
    return conv(node, ins, xs, ys, ctx, transposed=True)


@split_rule(Op.GATHER, Op.ACCESS, single=False)
def _generic(node, ins, xs, ys, ctx):
    return [[set(s) for s in every(y)] for y in ys]


no_split_rule(Op.EOP, "an expression reads its inputs through arbitrary affine maps: its outputs are split at "
              "every element, as any op's without a rule")
