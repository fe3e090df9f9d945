"""Field semantics of the contractions: matmul, batchmatmul, gemm, conv, conv_transpose, g2bmm, gbmm.

Every contraction is out[v] = Σ_r a[row(v), r] · b[col(v), r] for rows of one input and columns
of the other. `contract` computes it at the requested positions only: when few distinct rows and
columns are involved it multiplies them as a block through exact float64 BLAS (`matmul_mod`),
otherwise it forms the pairs and reduces them in chunks. A conv's rows are its input windows
(im2col, only for the pixels asked for) and its columns the weight's filters, one group at a time.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.fieldops import Rule, _shapes, broadcast_flat, ravel, unravel

PAIR_CHUNK = 1 << 22  # elements gathered at once on the pairwise path
BLOCK_WASTE = 16      # a BLAS block may compute this many products per wanted one and still win


def contract(a, a_idx, ra, b, b_idx, rb, tests: int) -> np.ndarray:
    """out[k] = Σ_r a[a_idx[ra[k], r]] · b[b_idx[rb[k], r]] over the field, shape (tests, K)."""
    k, r = len(ra), a_idx.shape[1]
    out = np.zeros((tests, k), np.int64)
    if k == 0 or r == 0:
        return out
    if len(a_idx) * len(b_idx) <= max(BLOCK_WASTE * k, 1 << 16):
        av, bv = a.read(a_idx), b.read(b_idx)                # (tests, Ua, R), (tests, Ub, R)
        for t in range(tests):
            out[t] = F.matmul_mod(av[t], bv[t].T)[ra, rb]
        return out
    step = max(1, PAIR_CHUNK // r)
    for s in range(0, k, step):
        out[:, s:s + step] = F.dot_mod(a.read(a_idx[ra[s:s + step]]), b.read(b_idx[rb[s:s + step]]))
    return out


def _keys(keys: np.ndarray):
    """Unique keys and, for each entry, the index of its key."""
    uniq = F.unique(keys)
    return uniq, np.searchsorted(uniq, keys)


class Contraction(Rule):
    def degree(self, node, degs, env):
        extra = degs[2:] if len(degs) > 2 else []
        return max([degs[0] + degs[1]] + [d for d in extra])

    def plan(self, node, ctx, flat):
        """(a_idx, ra, b_idx, rb) for the requested flat output positions."""
        raise NotImplementedError

    def pull(self, node, ctx, out_flat):
        a_idx, ra, b_idx, rb = self.plan(node, ctx, out_flat[0])
        return [a_idx[F.unique(ra)].reshape(-1), b_idx[F.unique(rb)].reshape(-1)]

    def compute(self, node, ctx, out_flat, ins):
        a_idx, ra, b_idx, rb = self.plan(node, ctx, out_flat[0])
        return [contract(ins[0], a_idx, ra, ins[1], b_idx, rb, ctx.env.tests)]


def _promote(xa, xb):
    a2 = (1,) + xa if len(xa) == 1 else xa
    b2 = xb + (1,) if len(xb) == 1 else xb
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    return a2, b2, batch


class MatMul(Contraction):
    """np.matmul with batch broadcasting and 1-d promotion (also batchmatmul)."""

    def plan(self, node, ctx, flat):
        (xa, xb), _ = _shapes(node, ctx)
        a2, b2, batch = _promote(xa, xb)
        m, kd, n = a2[-2], a2[-1], b2[-1]
        c = unravel(flat, batch + (m, n))       # the 1-d squeezes keep flat indices
        bc, i, j = c[:len(batch)], c[-2], c[-1]
        ba = broadcast_flat(ravel(bc, batch), batch, a2[:-2]) if batch else np.zeros(len(flat), np.int64)
        bb = broadcast_flat(ravel(bc, batch), batch, b2[:-2]) if batch else np.zeros(len(flat), np.int64)
        ka, ra = _keys(ba * m + i)
        kb, rb = _keys(bb * n + j)
        r = np.arange(kd)
        a_idx = (ka[:, None] // m * m + ka[:, None] % m) * kd + r[None, :]
        b_idx = (kb[:, None] // n) * (kd * n) + r[None, :] * n + kb[:, None] % n
        return a_idx, ra, b_idx, rb


class Gemm(Contraction):
    """alpha · op(a) @ op(b) + beta · c."""

    def pull(self, node, ctx, out_flat):
        need = super().pull(node, ctx, out_flat)
        if len(node.inputs) > 2 and node.inputs[2]:
            ins, (ys,) = _shapes(node, ctx)
            need.append(broadcast_flat(out_flat[0], ys, ins[2]))
        return need

    def plan(self, node, ctx, flat):
        (xa, *_), (ys,) = _shapes(node, ctx)
        m, n = ys
        kd = xa[0] if node.attrs["trans_a"] else xa[1]
        i, j = unravel(flat, ys)
        ka, ra = _keys(i)
        kb, rb = _keys(j)
        r = np.arange(kd)[None, :]
        a_idx = r * m + ka[:, None] if node.attrs["trans_a"] else ka[:, None] * kd + r
        b_idx = kb[:, None] * kd + r if node.attrs["trans_b"] else r * n + kb[:, None]
        return a_idx, ra, b_idx, rb

    def compute(self, node, ctx, out_flat, ins):
        (y,) = super().compute(node, ctx, out_flat, ins)
        y = F.mul(y, F.embed(node.attrs["alpha"]))
        if len(ins) > 2 and ins[2] is not None:
            shapes, (ys,) = _shapes(node, ctx)
            c = ins[2].read(broadcast_flat(out_flat[0], ys, shapes[2]))
            y = F.add(y, F.mul(c, F.embed(node.attrs["beta"])))
        return [y]


class Conv(Contraction):
    """Grouped, strided, dilated, padded convolution; `transposed` for conv_transpose."""

    def __init__(self, transposed: bool = False):
        self.transposed = transposed

    def taps(self, o, i, xs_i, a, nsp, k):
        """Input coordinates (P, k) read by output coordinates o along spatial dim i; -1 outside."""
        t = np.arange(k)[None, :]
        s, p, d = a["stride"][i], a["padding"][i], a["dilation"][i]
        if not self.transposed:
            q = o[:, None] * s - p + t * d
            return np.where((q >= 0) & (q < xs_i), q, -1)
        num = o[:, None] + p - t * d
        q = num // s
        return np.where((num % s == 0) & (q >= 0) & (q < xs_i), q, -1)

    def geometry(self, node, ctx):
        (xs, ws, *_), (ys,) = _shapes(node, ctx)
        g = node.attrs["groups"]
        cg = xs[1] // g
        fg = ys[1] // g
        return xs, ws, ys, g, cg, fg

    def groups_plan(self, node, ctx, flat):
        """Per group: (a_idx, ra, b_idx, rb, positions) for the outputs of that group."""
        xs, ws, ys, g, cg, fg = self.geometry(node, ctx)
        a, nsp = node.attrs, len(xs) - 2
        kernel = ws[2:]
        c = unravel(flat, ys)
        grp = c[1] // fg
        pix = ravel(np.stack([c[0], grp] + list(c[2:])), (ys[0], g) + ys[2:])
        keys, rpix = _keys(pix)
        kc = unravel(keys, (ys[0], g) + ys[2:])
        taps = [self.taps(kc[2 + i], i, xs[2 + i], a, nsp, kernel[i]) for i in range(nsp)]
        tgrid = [t.reshape(-1) for t in np.meshgrid(*[np.arange(k) for k in kernel], indexing="ij")]
        tt = prod(kernel)
        # x's flat index for (pixel, channel in group, tap), [P, Cg·T]: batch and channel part plus
        # the spatial part, -1 where a tap falls in the padding
        spatial, valid, stride = np.zeros((len(keys), tt), np.int64), np.ones((len(keys), tt), bool), 1
        for i in reversed(range(nsp)):
            q = taps[i][:, tgrid[i]]
            spatial += q * stride
            valid &= q >= 0
            stride *= xs[2 + i]
        base = (kc[0] * xs[1] + kc[1] * cg) * stride
        x_idx = base[:, None, None] + (np.arange(cg) * stride)[None, :, None] + spatial[:, None, :]
        x_idx = np.where(valid[:, None, :], x_idx, -1).reshape(len(keys), cg * tt)
        plans = []
        ch = np.arange(cg)[None, :, None]
        tp = np.arange(tt)[None, None, :]
        for gi in F.unique(grp):
            sel = np.nonzero(grp == gi)[0]
            filters, rf = _keys(c[1][sel] - gi * fg)    # only the filters asked for
            fl = filters[:, None, None]
            if self.transposed:
                w_idx = ((gi * cg + ch) * fg + fl) * tt + tp
            else:
                w_idx = ((gi * fg + fl) * cg + ch) * tt + tp
            plans.append((x_idx, rpix[sel], w_idx.reshape(len(filters), cg * tt), rf, sel))
        return plans

    def cached_plan(self, node, ctx, flat):
        key = (node.name, "plan", len(flat))
        if key not in ctx.cache:
            ctx.cache[key] = self.groups_plan(node, ctx, flat)
        return ctx.cache[key]

    def pull(self, node, ctx, out_flat):
        plans = self.cached_plan(node, ctx, out_flat[0])
        xs_need = np.concatenate([p[0][F.unique(p[1])].reshape(-1) for p in plans]) if plans else None
        ws_need = np.concatenate([p[2].reshape(-1) for p in plans]) if plans else None
        need = [xs_need, ws_need]
        if len(node.inputs) > 2:
            need.append(unravel(out_flat[0], _shapes(node, ctx)[1][0])[1])
        return need

    def compute(self, node, ctx, out_flat, ins):
        y = np.zeros((ctx.env.tests, len(out_flat[0])), np.int64)
        for x_idx, ra, w_idx, rb, sel in self.cached_plan(node, ctx, out_flat[0]):
            y[:, sel] = contract(ins[0], x_idx, ra, ins[1], w_idx, rb, ctx.env.tests)
        if len(ins) > 2 and ins[2] is not None:
            y = F.add(y, ins[2].read(unravel(out_flat[0], _shapes(node, ctx)[1][0])[1]))
        return [y]


class G2BMM(Contraction):
    """out[z, i, j] = Σ_k a[z, i, k] · b[z, i + D·(j − W), k]."""

    def plan(self, node, ctx, flat):
        (xa, _), (ys,) = _shapes(node, ctx)
        z, i, j = unravel(flat, ys)
        _, m, kd = xa
        w, d = node.attrs["width"], node.attrs["dilation"]
        row = i + d * (j - w)
        ka, ra = _keys(z * m + i)
        kb, rb = _keys(np.where((row >= 0) & (row < m), z * (m + 1) + row, z * (m + 1) + m))
        r = np.arange(kd)[None, :]
        bz, brow = kb // (m + 1), kb % (m + 1)
        b_idx = np.where((brow < m)[:, None], (bz * m + brow)[:, None] * kd + r, -1)
        return ka[:, None] * kd + r, ra, b_idx, rb


class GBMM(Contraction):
    """out[z, i, n] = Σ_j p[z, i, j] · v[z, i + D·(j − W), n]."""

    def plan(self, node, ctx, flat):
        (xp, xv), (ys,) = _shapes(node, ctx)
        z, i, _ = unravel(flat, ys)
        _, m, jj = xp
        nn = xv[2]
        w, d = (jj - 1) // 2, node.attrs["dilation"]
        ka, ra = _keys(z * m + i)
        kb, rb = _keys(flat)
        bz, bi, bn = unravel(kb, ys)
        rows = bi[:, None] + d * (np.arange(jj)[None, :] - w)
        b_idx = np.where((rows >= 0) & (rows < m), (bz[:, None] * m + rows) * nn + bn[:, None], -1)
        return ka[:, None] * jj + np.arange(jj)[None, :], ra, b_idx, rb


CONTRACTIONS = {Op.MATMUL: MatMul(), Op.BATCHMATMUL: MatMul(), Op.GEMM: Gemm(), Op.CONV: Conv(),
                Op.CONV_TRANSPOSE: Conv(transposed=True)}
if hasattr(Op, "G2BMM"):
    CONTRACTIONS.update({Op.G2BMM: G2BMM(), Op.GBMM: GBMM()})
