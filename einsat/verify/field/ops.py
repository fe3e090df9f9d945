"""Field semantics of the layout ops, as pull/compute rules (see `field.base.Rule`).

`Move`: each output position copies one position of one input or a constant fill (transpose,
reshape, slice, pad, concat, split, expand, correct, gather, access, ...). Element-wise ops,
batchnorm and windows are in `field.windows.py`, the contractions in `field.contract.py` (conv in
`field.conv.py`); `field.table.RULES` collects them all.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.groups import RESHAPES
from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field.base import Rule, broadcast_flat, digit_map, field_rule, node_shapes, ravel, unravel

# -- moves ---------------------------------------------------------------------------------------

class Move(Rule):
    """out[v] = input[which(v)][src(v)], or `fill` where which(v) = -1 (which None: all input 0).

    `pull` keeps each output's (which, src) in the context for `compute` to use once."""

    def source(self, node, ctx, k: int, flat: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        raise NotImplementedError

    def fill(self, node) -> int:
        return 0

    def pull(self, node, ctx, out_flat):
        need = [[] for _ in node.inputs]
        for k, f in enumerate(out_flat):
            if f is not None:
                which, src = ctx.cache[(node.name, "move", k, len(f))] = self.source(node, ctx, k, f)
                for i in range(len(node.inputs)):
                    need[i].append(src if which is None and i == 0 else
                                   src[:0] if which is None else src[which == i])
        return [np.concatenate(n) if n else None for n in need]

    def compute(self, node, ctx, out_flat, ins):
        outs = []
        for k, f in enumerate(out_flat):
            if f is None:
                outs.append(None)
                continue
            which, src = ctx.cache.pop((node.name, "move", k, len(f)), None) or self.source(node, ctx, k, f)
            if which is None:  # all from input 0; the same positions in the same order: its values
                same = len(src) == len(ins[0].flat) and np.array_equal(src, ins[0].flat)
                outs.append(ins[0].vals if same else ins[0].read(src))
                continue
            vals = np.full((ctx.env.tests, len(f)), self.fill(node), dtype=np.int64)
            for i, known in enumerate(ins):
                m = which == i
                if m.any():
                    vals[:, m] = known.read(src[m])
            outs.append(vals)
        return outs


def _one(flat, src):
    return None, src


@field_rule(*RESHAPES)
class Same(Move):
    """Row-major reshapes and renames read the same flat position."""

    def source(self, node, ctx, k, flat):
        return _one(flat, flat)


@field_rule(Op.TRANSPOSE)
class Transpose(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        strides = np.cumprod((1,) + xs[:0:-1])[::-1]
        return _one(flat, digit_map(flat, ys, [int(strides[p]) for p in node.attrs["perm"]]))


@field_rule(Op.EXPAND)
class Expand(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        return _one(flat, broadcast_flat(flat, ys, xs))


@field_rule(Op.SLICE)
class Slice(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        c = unravel(flat, ys)
        a = node.attrs
        inc = np.stack([s + ci * st for ci, s, st in zip(c, a["starts"], a["steps"])]) if ys else c
        return _one(flat, ravel(inc, xs))


@field_rule(Op.PAD, affine="a constant fill: affine when the fill is not 0")
class Pad(Move):
    def fill(self, node):
        return int(F.embed_constant(node.attrs["value"]))

    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        c = unravel(flat, ys)
        pads, mode, r = node.attrs["pads"], node.attrs["mode"], len(xs)
        inc = []
        for d in range(r):
            q, n = c[d] - pads[d], xs[d]
            if mode == "reflect" and n > 1:
                period = 2 * (n - 1)
                q = np.abs(np.mod(q, period))
                q = np.where(q >= n, period - q, q)
            elif mode in ("edge", "reflect"):
                q = np.clip(q, 0, n - 1)
            inc.append(q)
        src = ravel(np.stack(inc), xs) if r else np.zeros(len(flat), np.int64)
        return np.where(src >= 0, 0, -1), src


@field_rule(Op.CONCAT)
class Concat(Move):
    def source(self, node, ctx, k, flat):
        xs, (ys,) = node_shapes(node, ctx)
        axis = node.attrs["axis"]
        c = unravel(flat, ys)
        offsets = np.cumsum([0] + [s[axis] for s in xs])
        which = np.searchsorted(offsets[1:], c[axis], side="right")
        src = np.zeros(len(flat), np.int64)
        for i, s in enumerate(xs):
            m = which == i
            ci = c[:, m].copy()
            ci[axis] -= offsets[i]
            src[m] = ravel(ci, s)
        return which, src


@field_rule(Op.SPLIT)
class Split(Move):
    def source(self, node, ctx, k, flat):
        (xs,), ys = node_shapes(node, ctx)
        axis = node.attrs["axis"]
        c = unravel(flat, ys[k])
        c[axis] += sum(node.attrs["sizes"][:k])
        return _one(flat, ravel(c, xs))


@field_rule(Op.CORRECT, affine="the mutant's value or the fix's, by a static region")
class Correct(Move):
    def source(self, node, ctx, k, flat):
        (_, fs), (ys,) = node_shapes(node, ctx)
        r = node.attrs["region"]
        starts, ends = np.array(r[:len(ys)])[:, None], np.array(r[len(ys):])[:, None]
        c = unravel(flat, ys)
        inside = np.all((c >= starts) & (c < ends), axis=0) if ys else np.ones(len(flat), bool)
        src = np.where(inside, ravel(c - starts, fs), flat)
        return inside.astype(np.int64), src


@field_rule(Op.GATHER, Op.ACCESS)
class Generic(Move):
    """Any other single-data layout op: run its NumPy semantics on the input's flat indices (the
    remaining inputs, e.g. gather's indices, must be constants). Costs one pass over the tensor."""

    def source(self, node, ctx, k, flat):
        (xs, *_), _ = node_shapes(node, ctx)
        args = [np.arange(prod(xs), dtype=np.int64).reshape(xs)]
        args += [ctx.constant(i) for i in node.inputs[1:]]
        full = node.definition.numpy(args, node.attrs)[k]
        return _one(flat, np.asarray(full).reshape(-1)[flat])

    def pull(self, node, ctx, out_flat):
        return super().pull(node, ctx, out_flat)[:1] + [None] * (len(node.inputs) - 1)

    def degree(self, node, degs, env):
        return degs[0]


@field_rule(Op.CONSTANT, affine="a constant: degree 0")
class Constant(Move):
    def pull(self, node, ctx, out_flat):
        return []

    def compute(self, node, ctx, out_flat, ins):
        value = F.embed_constant(node.attrs["value"]).reshape(-1)
        return [np.broadcast_to(value[out_flat[0]], (ctx.env.tests, len(out_flat[0])))]

    def degree(self, node, degs, env):
        return 0
