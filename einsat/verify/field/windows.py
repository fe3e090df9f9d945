"""Field semantics of the element-wise, normalization and window ops, as pull/compute rules.

  - `Elementwise`: one position of each input, broadcast, combined by a field function (add,
    sub, mul, neg; div by a constant);
  - `BatchNorm`: the affine map x·A[c] + B[c];
  - `Window`: a sum of R input positions times a per-position coefficient (avgpool with its
    window counts, global_avgpool, reduce_sum, reduce_mean).
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field import NotMultilinearError
from einsat.verify.field.base import Rule, broadcast_flat, field_rule, node_shapes, ravel, unravel

# -- element-wise --------------------------------------------------------------------------------

class Elementwise(Rule):
    def __init__(self, fn, multiplies: bool = False):
        self.fn, self.multiplies = fn, multiplies

    def degree(self, node, degs, env):
        return sum(degs) if self.multiplies else max(degs)

    def pull(self, node, ctx, out_flat):
        ins, (ys,) = node_shapes(node, ctx)
        return [broadcast_flat(out_flat[0], ys, s) for s in ins]

    def compute(self, node, ctx, out_flat, ins):
        shapes, (ys,) = node_shapes(node, ctx)
        args = [k.read(broadcast_flat(out_flat[0], ys, s)) for k, s in zip(ins, shapes)]
        return [self.fn(*args)]


@field_rule(Op.DIV, affine="division by a weight-only divisor")
class Divide(Elementwise):
    """a / b with b a constant (degree 0): a times the inverse of b."""

    def __init__(self):
        super().__init__(lambda a, b: F.mul(a, F.inverse(b)))

    def degree(self, node, degs, env):
        if degs[1]:
            raise NotMultilinearError(f"node {node.name!r} (div) divides by a variable")
        return degs[0]


@field_rule(Op.BATCHNORM, affine="x·A[c] + B[c], A and B from the weight-only parameters")
class BatchNorm(Rule):
    """y = x·A[c] + B[c] with A = scale/sqrt(var+eps), B = bias − mean·A: exact (embedded float64)
    or, with the env's `batchnorm_key`, random per distinct channel parameters."""

    def degree(self, node, degs, env):
        return degs[0] + (0 if env.batchnorm_key is None else 1)

    def pull(self, node, ctx, out_flat):
        return [out_flat[0], None, None, None, None]

    def coefficients(self, node, ctx, channels):
        params = np.stack([ctx.constant(i).astype(np.float64) for i in node.inputs[1:]])
        if ctx.env.batchnorm_key is not None:
            keys = channel_keys(params, node.attrs["epsilon"])[channels]
            a = np.stack([F.random_at(F.mix_key(ctx.env.batchnorm_key, 0, t), keys) for t in range(ctx.env.tests)])
            b = np.stack([F.random_at(F.mix_key(ctx.env.batchnorm_key, 1, t), keys) for t in range(ctx.env.tests)])
            return a, b
        scale, bias, mean, var = params
        a = scale / np.sqrt(var + node.attrs["epsilon"])
        return F.embed(a)[channels], F.embed(bias - mean * a)[channels]

    def compute(self, node, ctx, out_flat, ins):
        (xs, *_), _ = node_shapes(node, ctx)
        channels = unravel(out_flat[0], xs)[1]
        a, b = self.coefficients(node, ctx, channels)
        return [F.add(F.mul(ins[0].read(out_flat[0]), a), b)]


def channel_keys(params: np.ndarray, eps: float) -> np.ndarray:
    """One key per channel from its (scale, bias, mean, var, eps) values."""
    cols = np.vstack([params, np.full((1, params.shape[1]), eps)]).T
    return F.hash_rows(cols.astype(np.float64))


# -- windows -------------------------------------------------------------------------------------

class Window(Rule):
    """out[v] = coef(v) · Σ_r x[idx(v, r)] (idx -1 reads zero)."""

    def window(self, node, ctx, flat) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def pull(self, node, ctx, out_flat):
        return [self.window(node, ctx, out_flat[0])[0]]

    def compute(self, node, ctx, out_flat, ins):
        idx, coef = self.window(node, ctx, out_flat[0])
        total = F.sum_mod(ins[0].read(idx), axis=-1)
        return [total if coef is None else F.mul(total, coef)]


def tap_positions(o: np.ndarray, stride: int, pad: int, dilation: int, kernel: int) -> np.ndarray:
    """Input coordinate of each (output coordinate, tap): o·stride − pad + tap·dilation, (K, kernel)."""
    return o[:, None] * stride - pad + np.arange(kernel)[None, :] * dilation


@field_rule(Op.AVGPOOL)
class AvgPool(Window):
    def window(self, node, ctx, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        a = node.attrs
        nsp = len(xs) - 2
        c = unravel(flat, ys)
        coords, counts = [], np.ones(len(flat), np.int64)
        for i in range(nsp):
            q = tap_positions(c[2 + i], a["stride"][i], a["padding"][i], 1, a["kernel"][i])
            lo, hi = (-a["padding"][i], xs[2 + i] + a["padding"][nsp + i]) if a["count_include_pad"] \
                else (0, xs[2 + i])
            counts *= ((q >= lo) & (q < hi)).sum(axis=1)
            coords.append(q)
        grids = np.meshgrid(*[np.arange(k) for k in a["kernel"]], indexing="ij")
        full = [np.broadcast_to(c[0][:, None], (len(flat), prod(a["kernel"]))),
                np.broadcast_to(c[1][:, None], (len(flat), prod(a["kernel"])))]
        full += [q[:, g.reshape(-1)] for q, g in zip(coords, grids)]
        return ravel(np.stack(full), xs), F.inverse(counts)


class Reduce(Window):
    def __init__(self, mean: bool):
        self.mean = mean

    def axes(self, node, xs):
        return node.attrs["axes"], node.attrs["keepdims"]

    def window(self, node, ctx, flat):
        (xs,), (ys,) = node_shapes(node, ctx)
        axes, keep = self.axes(node, xs)
        c = unravel(flat, ys)
        kept = [d for d in range(len(xs)) if d not in axes]
        if keep:
            c = c[kept]
        sizes = [xs[d] for d in axes]
        grids = [g.reshape(-1) for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]
        r = prod(sizes)
        full = [None] * len(xs)
        for j, d in enumerate(kept):
            full[d] = np.broadcast_to(c[j][:, None], (len(flat), r))
        for g, d in zip(grids, axes):
            full[d] = np.broadcast_to(g[None, :], (len(flat), r))
        idx = ravel(np.stack(full), xs) if xs else np.zeros((len(flat), 1), np.int64)
        coef = np.full(len(flat), int(F.inverse(np.int64(max(r, 1)))), np.int64) if self.mean else None
        return idx, coef


@field_rule(Op.GLOBAL_AVGPOOL)
class GlobalAvgPool(Reduce):
    def __init__(self):
        super().__init__(mean=True)

    def axes(self, node, xs):
        return tuple(range(2, len(xs))), 1


field_rule(Op.ADD)(Elementwise(F.add))
field_rule(Op.SUB)(Elementwise(F.sub))
field_rule(Op.MUL)(Elementwise(F.mul, True))
field_rule(Op.NEG)(Elementwise(lambda a: F.sub(0, a)))
field_rule(Op.REDUCE_SUM)(Reduce(False))
field_rule(Op.REDUCE_MEAN)(Reduce(True))
