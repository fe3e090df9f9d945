"""Field semantics of the contractions: matmul, batchmatmul, gemm, g2bmm, gbmm (conv: `field.conv`).

Every contraction is out[v] = Σ_r a[row(v), r] · b[col(v), r] for rows of one input and columns
of the other. `contract` computes it at the requested positions only: when few distinct rows and
columns are involved it multiplies them as a block through exact float64 BLAS (`matmul_mod`),
otherwise it forms the pairs and reduces them in chunks.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field.base import Rule, broadcast_flat, field_rule, node_shapes, ravel, unravel

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
        (xa, xb), _ = node_shapes(node, ctx)
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
            ins, (ys,) = node_shapes(node, ctx)
            need.append(broadcast_flat(out_flat[0], ys, ins[2]))
        return need

    def plan(self, node, ctx, flat):
        (xa, *_), (ys,) = node_shapes(node, ctx)
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
            shapes, (ys,) = node_shapes(node, ctx)
            c = ins[2].read(broadcast_flat(out_flat[0], ys, shapes[2]))
            y = F.add(y, F.mul(c, F.embed(node.attrs["beta"])))
        return [y]


class G2BMM(Contraction):
    """out[z, i, j] = Σ_k a[z, i, k] · b[z, i + D·(j − W), k]."""

    def plan(self, node, ctx, flat):
        (xa, _), (ys,) = node_shapes(node, ctx)
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
        (xp, xv), (ys,) = node_shapes(node, ctx)
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


field_rule(Op.MATMUL, Op.BATCHMATMUL)(MatMul())  # conv: conv.py
field_rule(Op.GEMM)(Gemm())
field_rule(Op.G2BMM)(G2BMM())
field_rule(Op.GBMM)(GBMM())
