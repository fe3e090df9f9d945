"""Field semantics of the element-wise, layout and window ops, as pull/compute rules.

A rule maps requested output positions to the input positions they read (`pull`) and computes
the outputs there (`compute`). Three shapes cover most ops:
  - `Move`: each output position copies one position of one input, or a constant fill
    (transpose, reshape, slice, pad, concat, split, expand, correct, gather, access, ...);
  - `Elementwise`: one position of each input, broadcast, combined by a field function;
  - `Window`: a sum of R input positions times a per-position coefficient (pooling, reductions).
The contractions (matmul, conv, ...) are in `fieldcontract.py`.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field import NotMultilinearError


def unravel(flat: np.ndarray, shape) -> np.ndarray:
    """(K,) flat indices -> (rank, K) coordinates."""
    if not shape:
        return np.zeros((0, len(flat)), np.int64)
    return np.stack(np.unravel_index(flat, shape)).astype(np.int64)


def ravel(coords: np.ndarray, shape) -> np.ndarray:
    """(rank, ...) coordinates -> flat indices; any coordinate out of range gives -1."""
    coords = np.asarray(coords, dtype=np.int64)
    if not shape:
        return np.zeros(coords.shape[1:], np.int64)
    flat = np.ravel_multi_index(tuple(coords), shape, mode="clip").astype(np.int64)
    bad = np.zeros(coords.shape[1:], dtype=bool)
    for c, d in zip(coords, shape):
        bad |= (c < 0) | (c >= d)
    if bad.any():
        flat[bad] = -1
    return flat


def broadcast_flat(out_flat: np.ndarray, out_shape, in_shape) -> np.ndarray:
    """The flat index of the input element that NumPy broadcasting reads for each output element."""
    c = unravel(out_flat, out_shape)[len(out_shape) - len(in_shape):]
    c = np.stack([ci if d != 1 else np.zeros_like(ci) for ci, d in zip(c, in_shape)]) if len(in_shape) else c
    return ravel(c, in_shape)


class Rule:
    def degree(self, node, degs, env) -> int:
        return max(degs, default=0)

    def pull(self, node, ctx, out_flat):
        raise NotImplementedError

    def compute(self, node, ctx, out_flat, ins):
        raise NotImplementedError


# -- moves ---------------------------------------------------------------------------------------

class Move(Rule):
    """out[v] = input[which(v)][src(v)], or `fill` where which(v) = -1."""

    def source(self, node, ctx, k: int, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def fill(self, node) -> int:
        return 0

    def pull(self, node, ctx, out_flat):
        need = [[] for _ in node.inputs]
        for k, f in enumerate(out_flat):
            if f is not None:
                which, src = self.source(node, ctx, k, f)
                for i in range(len(node.inputs)):
                    need[i].append(src[which == i])
        return [np.concatenate(n) if n else None for n in need]

    def compute(self, node, ctx, out_flat, ins):
        outs = []
        for k, f in enumerate(out_flat):
            if f is None:
                outs.append(None)
                continue
            which, src = self.source(node, ctx, k, f)
            vals = np.full((ctx.env.tests, len(f)), self.fill(node), dtype=np.int64)
            for i, known in enumerate(ins):
                m = which == i
                if m.any():
                    vals[:, m] = known.read(src[m])
            outs.append(vals)
        return outs


def _shapes(node, ctx):
    g = ctx.graph
    return [g.types[i].shape if i else None for i in node.inputs], [g.types[o].shape for o in node.outputs]


def _one(flat, src):
    return np.zeros(len(flat), np.int64), src


class Same(Move):
    """Row-major reshapes and renames read the same flat position."""

    def source(self, node, ctx, k, flat):
        return _one(flat, flat)


class Transpose(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = _shapes(node, ctx)
        c = unravel(flat, ys)
        inc = np.empty_like(c)
        inc[list(node.attrs["perm"])] = c
        return _one(flat, ravel(inc, xs))


class Expand(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = _shapes(node, ctx)
        return _one(flat, broadcast_flat(flat, ys, xs))


class Slice(Move):
    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = _shapes(node, ctx)
        c = unravel(flat, ys)
        a = node.attrs
        inc = np.stack([s + ci * st for ci, s, st in zip(c, a["starts"], a["steps"])]) if ys else c
        return _one(flat, ravel(inc, xs))


class Pad(Move):
    def fill(self, node):
        return int(F.embed(node.attrs["value"]))

    def source(self, node, ctx, k, flat):
        (xs,), (ys,) = _shapes(node, ctx)
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


class Concat(Move):
    def source(self, node, ctx, k, flat):
        xs, (ys,) = _shapes(node, ctx)
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


class Split(Move):
    def source(self, node, ctx, k, flat):
        (xs,), ys = _shapes(node, ctx)
        axis = node.attrs["axis"]
        c = unravel(flat, ys[k])
        c[axis] += sum(node.attrs["sizes"][:k])
        return _one(flat, ravel(c, xs))


class Correct(Move):
    def source(self, node, ctx, k, flat):
        (ms, fs), (ys,) = _shapes(node, ctx)
        r = node.attrs["region"]
        starts, ends = np.array(r[:len(ys)])[:, None], np.array(r[len(ys):])[:, None]
        c = unravel(flat, ys)
        inside = np.all((c >= starts) & (c < ends), axis=0) if ys else np.ones(len(flat), bool)
        src = np.where(inside, ravel(c - starts, fs), flat)
        return inside.astype(np.int64), src


class Generic(Move):
    """Any other single-data layout op: run its NumPy semantics on the input's flat indices (the
    remaining inputs, e.g. gather's indices, must be constants). Costs one pass over the tensor."""

    def source(self, node, ctx, k, flat):
        (xs, *rest), _ = _shapes(node, ctx)
        args = [np.arange(prod(xs), dtype=np.int64).reshape(xs)]
        args += [ctx.constant(i) for i in node.inputs[1:]]
        full = node.definition.numpy(args, node.attrs)[k]
        return _one(flat, np.asarray(full).reshape(-1)[flat])

    def pull(self, node, ctx, out_flat):
        return super().pull(node, ctx, out_flat)[:1] + [None] * (len(node.inputs) - 1)

    def degree(self, node, degs, env):
        return degs[0]


class Constant(Move):
    def pull(self, node, ctx, out_flat):
        return []

    def compute(self, node, ctx, out_flat, ins):
        value = F.embed(node.attrs["value"]).reshape(-1)
        return [np.broadcast_to(value[out_flat[0]], (ctx.env.tests, len(out_flat[0])))]

    def degree(self, node, degs, env):
        return 0


# -- element-wise --------------------------------------------------------------------------------

class Elementwise(Rule):
    def __init__(self, fn, multiplies: bool = False):
        self.fn, self.multiplies = fn, multiplies

    def degree(self, node, degs, env):
        return sum(degs) if self.multiplies else max(degs)

    def pull(self, node, ctx, out_flat):
        ins, (ys,) = _shapes(node, ctx)
        return [broadcast_flat(out_flat[0], ys, s) for s in ins]

    def compute(self, node, ctx, out_flat, ins):
        shapes, (ys,) = _shapes(node, ctx)
        args = [k.read(broadcast_flat(out_flat[0], ys, s)) for k, s in zip(ins, shapes)]
        return [self.fn(*args)]


class Divide(Elementwise):
    """a / b with b a constant (degree 0): a times the inverse of b."""

    def __init__(self):
        super().__init__(lambda a, b: F.mul(a, F.inverse(b)))

    def degree(self, node, degs, env):
        if degs[1]:
            raise NotMultilinearError(f"node {node.name!r} (div) divides by a variable")
        return degs[0]


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
        (xs, *_), _ = _shapes(node, ctx)
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


class AvgPool(Window):
    def window(self, node, ctx, flat):
        (xs,), (ys,) = _shapes(node, ctx)
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
        (xs,), (ys,) = _shapes(node, ctx)
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


class GlobalAvgPool(Reduce):
    def __init__(self):
        super().__init__(mean=True)

    def axes(self, node, xs):
        return tuple(range(2, len(xs))), 1


def _rules():
    from einsat.verify.fieldcontract import CONTRACTIONS
    rules = {
        Op.ADD: Elementwise(F.add), Op.SUB: Elementwise(F.sub), Op.MUL: Elementwise(F.mul, True),
        Op.DIV: Divide(), Op.BATCHNORM: BatchNorm(),
        Op.TRANSPOSE: Transpose(), Op.EXPAND: Expand(), Op.SLICE: Slice(), Op.PAD: Pad(),
        Op.CONCAT: Concat(), Op.SPLIT: Split(), Op.CORRECT: Correct(), Op.CONSTANT: Constant(),
        Op.AVGPOOL: AvgPool(), Op.GLOBAL_AVGPOOL: GlobalAvgPool(),
        Op.REDUCE_SUM: Reduce(False), Op.REDUCE_MEAN: Reduce(True),
    }
    for name in ("RESHAPE", "FLATTEN", "SQUEEZE", "UNSQUEEZE", "IDENTITY"):
        rules[Op[name]] = Same()
    if hasattr(Op, "NEG"):
        rules[Op.NEG] = Elementwise(lambda a: F.sub(0, a))
    for name in ("GATHER", "ACCESS"):
        if hasattr(Op, name):
            rules[Op[name]] = Generic()
    rules.update(CONTRACTIONS)
    return rules


RULES = _rules()
