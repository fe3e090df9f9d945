"""Field semantics of conv and conv_transpose at requested output positions.

out[n, f, o] = Σ_{c, t} x[n, g·Cg + c, o·s − p + t·d] · w[f, c, t] (g = f's group; a transposed
conv reads x at (o + p − t·d)/s where that divides). The requested positions are grouped by
their *base* (n, g): the batch image and channel group that they read. Each base is computed one
of two ways, chosen by the positions alone (so `pull` and `compute` agree):

  - sparse: the input windows of the requested pixels only (im2col), contracted with the
    requested filters (`contract`), as for any contraction;
  - dense (conv, non-negative padding): when the requested pixels cover a large part of the
    plane — the base's filters asked for, times the output plane, is at most BLOCK_WASTE times
    the positions asked for — the whole input plane of the base is read once, and every tap is
    one exact BLAS product of the filters' tap weights with the padded plane, shifted into
    place: Y[f, o] = Σ_t (W_t · Xpad)[f, o·s + t·d]. No window is gathered position by position.

Both give every requested position exactly (the field is exact); they differ only in cost. The
corrector asks for Theorem 1's positions of every box at once, and a program that reorders
pixels (PET's Figure 3: a dilated conv as a regular conv on a parity-reordered input) has one
box per pixel, so its conv is asked for a few filters at every pixel of a few images: the dense
path computes that with a handful of matrix products instead of millions of gathered reads.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field.base import field_rule, node_shapes, ravel, unravel
from einsat.verify.field.contract import BLOCK_WASTE, Contraction, _keys, contract


class Conv(Contraction):
    """Grouped, strided, dilated, padded convolution; `transposed` for conv_transpose."""

    def __init__(self, transposed: bool = False):
        self.transposed = transposed

    def taps(self, o, i, xs_i, a, k):
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
        (xs, ws, *_), (ys,) = node_shapes(node, ctx)
        g = node.attrs["groups"]
        return xs, ws, ys, g, xs[1] // g, ys[1] // g

    def weight_index(self, gi, filters, cg, fg, tt):
        """Flat weight positions (F', Cg·T) of group gi's filters (indices within the group)."""
        ch, tp, fl = np.arange(cg)[None, :, None], np.arange(tt)[None, None, :], filters[:, None, None]
        if self.transposed:
            w_idx = ((gi * cg + ch) * fg + fl) * tt + tp
        else:
            w_idx = ((gi * fg + fl) * cg + ch) * tt + tp
        return w_idx.reshape(len(filters), cg * tt)

    def sparse_plans(self, node, ctx, flat, sel_all):
        """Per group: (x_idx, ra, w_idx, rb, sel) for the positions flat[sel_all] (im2col)."""
        xs, ws, ys, g, cg, fg = self.geometry(node, ctx)
        a, nsp, kernel = node.attrs, len(xs) - 2, ws[2:]
        c = unravel(flat[sel_all], ys)
        grp = c[1] // fg
        keys, rpix = _keys(ravel(np.stack([c[0], grp] + list(c[2:])), (ys[0], g) + ys[2:]))
        kc = unravel(keys, (ys[0], g) + ys[2:])
        taps = [self.taps(kc[2 + i], i, xs[2 + i], a, kernel[i]) for i in range(nsp)]
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
        for gi in F.unique(grp):
            sel = np.nonzero(grp == gi)[0]
            filters, rf = _keys(c[1][sel] - gi * fg)    # only the filters asked for
            plans.append((x_idx, rpix[sel], self.weight_index(gi, filters, cg, fg, tt), rf, sel_all[sel]))
        return plans

    def dense_plans(self, node, ctx, flat):
        """(dense, sparse positions): dense holds (n, gi, filters, w_idx, rf, spatial out, sel) per
        base computed on its whole plane; the other positions go the sparse way."""
        _, ws, ys, g, cg, fg = self.geometry(node, ctx)
        everything = np.arange(len(flat))
        if self.transposed or min(node.attrs["padding"], default=0) < 0 or not len(flat):
            return [], everything
        plane, tt = prod(ys[2:]), prod(ws[2:])
        n, f, so = flat // (ys[1] * plane), flat // plane % ys[1], flat % plane
        bases, rb = _keys(n * g + f // fg)
        pairs = F.unique(rb * fg + f % fg)                 # (base, filter) pairs asked for
        nfilters = np.bincount(pairs // fg, minlength=len(bases))
        npos = np.bincount(rb, minlength=len(bases))
        dense_base = nfilters * plane <= BLOCK_WASTE * npos
        if not dense_base.any():
            return [], everything
        order = np.argsort(rb, kind="stable")
        starts = np.concatenate([[0], np.cumsum(npos)])
        out = []
        for j in np.nonzero(dense_base)[0]:
            sel = order[starts[j]:starts[j + 1]]
            gi = int(bases[j] % g)
            filters, rf = _keys(f[sel] % fg)
            out.append((int(bases[j] // g), gi, filters, self.weight_index(gi, filters, cg, fg, tt), rf,
                        so[sel], sel))
        return out, np.nonzero(~dense_base[rb])[0]

    def plans(self, node, ctx, flat):
        key = (node.name, "conv plans", len(flat))
        if key not in ctx.cache:
            dense, rest = self.dense_plans(node, ctx, flat)
            ctx.cache[key] = dense, self.sparse_plans(node, ctx, flat, rest) if len(rest) else []
        return ctx.cache[key]

    def plane_range(self, node, ctx, n, gi) -> tuple[int, int]:
        """The flat positions [start, stop) of x[n, gi·Cg : (gi+1)·Cg] (contiguous)."""
        xs, _, _, _, cg, _ = self.geometry(node, ctx)
        start = (n * xs[1] + gi * cg) * prod(xs[2:])
        return start, start + cg * prod(xs[2:])

    def pull(self, node, ctx, out_flat):
        dense, sparse = self.plans(node, ctx, out_flat[0])
        xs_need = [np.arange(*self.plane_range(node, ctx, n, gi), dtype=np.int64) for n, gi, *_ in dense]
        xs_need += [p[0][F.unique(p[1])].reshape(-1) for p in sparse]
        ws_need = [d[3].reshape(-1) for d in dense] + [p[2].reshape(-1) for p in sparse]
        need = [np.concatenate(xs_need), np.concatenate(ws_need)] if xs_need else [None, None]
        if len(node.inputs) > 2:
            need.append(unravel(out_flat[0], node_shapes(node, ctx)[1][0])[1])
        return need

    def dense_compute(self, node, ctx, x, w, n, gi, w_idx, rf, so):
        """Y[f', o] at the requested (rf, so) pairs, from base (n, gi)'s whole input plane."""
        xs, ws, ys, _, cg, _ = self.geometry(node, ctx)
        a, nsp, tests = node.attrs, len(xs) - 2, ctx.env.tests
        kernel, nf = ws[2:], w_idx.shape[0]
        pads = [(a["padding"][i], a["padding"][nsp + i]) for i in range(nsp)]
        xp = np.pad(x.read_range(*self.plane_range(node, ctx, n, gi)).reshape((tests, cg) + xs[2:]),
                    [(0, 0), (0, 0)] + pads)
        wt = w.read(w_idx).reshape(tests, nf, cg, prod(kernel)).transpose(0, 3, 1, 2)  # (tests, T, F', Cg)
        out = np.zeros((tests, len(so)), np.int64)
        for k in range(tests):
            z = F.matmul_mod(wt[k].reshape(-1, cg), xp[k].reshape(cg, -1)).reshape((-1, nf) + xp.shape[2:])
            y = np.zeros((nf,) + ys[2:], np.int64)
            for t, tap in enumerate(np.ndindex(*kernel)):
                window = tuple(slice(tap[i] * a["dilation"][i],
                                     tap[i] * a["dilation"][i] + a["stride"][i] * (ys[2 + i] - 1) + 1,
                                     a["stride"][i]) for i in range(nsp))
                y += z[(t, slice(None)) + window]       # T residues < 2^31 each: no overflow
            out[k] = np.mod(y.reshape(nf, -1)[rf, so], F.P)
        return out

    def compute(self, node, ctx, out_flat, ins):
        y = np.zeros((ctx.env.tests, len(out_flat[0])), np.int64)
        dense, sparse = self.plans(node, ctx, out_flat[0])
        for n, gi, _, w_idx, rf, so, sel in dense:
            y[:, sel] = self.dense_compute(node, ctx, ins[0], ins[1], n, gi, w_idx, rf, so)
        for x_idx, ra, w_idx, rb, sel in sparse:
            y[:, sel] = contract(ins[0], x_idx, ra, ins[1], w_idx, rb, ctx.env.tests)
        if len(ins) > 2 and ins[2] is not None:
            y = F.add(y, ins[2].read(unravel(out_flat[0], node_shapes(node, ctx)[1][0])[1]))
        return [y]


field_rule(Op.CONV)(Conv())
field_rule(Op.CONV_TRANSPOSE)(Conv(transposed=True))
