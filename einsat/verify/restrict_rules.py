"""Region restriction rules: which input regions an output region of an op reads, and the op
(with adjusted attributes) that computes just that region from them.

A rule takes (node, output index, region, graph) and returns (op, [(input, region)], attrs), or
(None, [(input, region)], None) when the region is simply a region of an input, or `Pieces` when
the region is assembled from regions of the input (a reshape: each piece is a box of the input
reshaped, the pieces are concatenated), or None when it has no restriction (the op is then
computed whole and sliced).

Regions may be strided (`Region.steps`): the ops in `STRIDED` restrict to them directly (a conv
to every other output row is a conv of twice the stride); for the others the emitter restricts
to the plain box around the region and slices with the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

import numpy as np

from einsat.ir.groups import RESHAPES
from einsat.ir.registry import REGISTRY, Op
from einsat.verify.regions import Region
from einsat.verify.splits import reshape_groups

MAX_PIECES = 64  # a region needing more pieces to pass a reshape is computed whole

# -- the rules of the ops, each registered beside its function (as gpu's `@implements`) -----------

RESTRICT: dict[Op, Callable] = {}
STRIDED: set[Op] = set()  # the ops whose rules take strided regions
# op -> why an op the verifier evaluates has no restriction rule (it is computed whole, then sliced)
NO_RESTRICT_RULE: dict[Op, str] = {}
WHOLE = "the whole value is computed, then sliced (exact; a rule would compute less)"


def restrict_rule(*ops: Op, strided: bool = False) -> Callable:
    """Register the decorated function as the restriction rule of `ops`; `strided`: it takes
    strided regions."""
    def register(fn):
        for op in ops:
            if op in RESTRICT:
                raise RuntimeError(f"{op.value} has two restriction rules")
            RESTRICT[op] = fn
            if strided:
                STRIDED.add(op)
        return fn
    return register


def no_restrict_rule(reason: str, *ops: Op) -> None:
    """Register why `ops` have no restriction rule."""
    for op in ops:
        NO_RESTRICT_RULE[op] = reason


def _shape(g, name):
    return g.types[name].shape


def _broadcast(region: Region, in_shape) -> Region:
    """The region of a broadcast input that an output region reads."""
    off = len(region.starts) - len(in_shape)
    st = [0 if n == 1 else region.starts[off + d] for d, n in enumerate(in_shape)]
    en = [1 if n == 1 else region.ends[off + d] for d, n in enumerate(in_shape)]
    ks = [1 if n == 1 else region.steps[off + d] for d, n in enumerate(in_shape)]
    return Region(st, en, ks)


def elementwise(node, k, region, g):
    ins = [(i, _broadcast(region, _shape(g, i)) if i else None) for i in node.inputs]
    return node.op, ins, dict(node.attrs)


@restrict_rule(Op.TRANSPOSE, strided=True)
def transpose(node, k, region, g):
    perm = node.attrs["perm"]
    st, en, ks = [0] * len(perm), [0] * len(perm), [1] * len(perm)
    for i, p in enumerate(perm):
        st[p], en[p], ks[p] = region.starts[i], region.ends[i], region.steps[i]
    return node.op, [(node.inputs[0], Region(st, en, ks))], dict(node.attrs)


def _window(lo_out, hi_out, stride, pad, span, n):
    """Input rows [a, b) read by output rows [lo_out, hi_out), and the padding (begin, end) left."""
    lo = lo_out * stride - pad
    hi = (hi_out - 1) * stride - pad + span
    a, b = max(lo, 0), min(hi, n)
    return a, b, a - lo, hi - b


@restrict_rule(Op.CONV, strided=True)
def conv(node, k, region, g):
    """Output rows a, a + s, ... of a conv of stride t are the rows of a conv of stride s·t over
    the input window from row a·t − padding on; strided images and filters read strided inputs."""
    x, w = node.inputs[0], node.inputs[1]
    xs, ws = _shape(g, x), _shape(g, w)
    a = node.attrs
    groups, f = a["groups"], ws[0]
    fg, cg = f // groups, xs[1] // groups
    (n0, f0, *_), (n1, f1, *_), (nk, fk, *ks) = region.starts, region.ends, region.steps
    if groups > 1 and (f0 % fg or f1 % fg or fk != 1):
        return None
    g0, g1 = f0 // fg, -(-f1 // fg)
    xst, xen, xks, pb, pe, stride, dilation = [n0, g0 * cg], [n1, g1 * cg], [nk, 1], [], [], [], []
    for i, (lo_out, count) in enumerate(zip(region.starts[2:], region.shape[2:])):
        axis = _axis(lo_out, count, ks[i], a["stride"][i], a["padding"][i], a["dilation"][i], ws[2 + i], xs[2 + i])
        if axis is None:
            return None
        for out, v in zip((xst, xen, xks, pb, pe, stride, dilation), axis):
            out.append(v)
    wreg = Region((f0,) + (0,) * (len(ws) - 1), (f1,) + tuple(ws[1:]), (fk,) + (1,) * (len(ws) - 1))
    ins = [(x, Region(xst, xen, xks)), (w, wreg)]
    if len(node.inputs) > 2 and node.inputs[2]:
        ins.append((node.inputs[2], Region((f0,), (f1,), (fk,))))
    attrs = dict(a, padding=tuple(pb + pe), groups=g1 - g0, stride=tuple(stride), dilation=tuple(dilation))
    return node.op, ins, attrs


def _axis(lo_out, count, step, stride, pad, dil, kernel, n):
    """One spatial axis of a restricted conv: (input start, end, step, pad begin, pad end, stride,
    dilation). Outputs lo_out + step·j read rows base + (step·stride)·j + dil·t (base = lo_out·stride
    − pad): a conv of stride step·stride over the window from `base`; when that stride (or, for
    one output, any) is a multiple of the dilation, every tap reads rows ≡ base (mod dil): a
    regular conv (dilation 1) over those rows only."""
    outer = step * stride
    if dil > 1 and (count == 1 or outer % dil == 0):
        base = lo_out * stride - pad
        phase = base % dil
        size = -(-(n - phase) // dil)
        lo, hi, b, e = _window(0, count, max(outer // dil, 1), (phase - base) // dil, kernel, size)
        return (phase + dil * lo, phase + dil * (hi - 1) + 1, dil, b, e, max(outer // dil, 1), 1) if hi > lo else None
    lo, hi, b, e = _window(0, count, outer, pad - lo_out * stride, dil * (kernel - 1) + 1, n)
    return (lo, hi, 1, b, e, outer, dil) if hi > lo else None


@restrict_rule(Op.AVGPOOL)
def avgpool(node, k, region, g):
    x = node.inputs[0]
    xs, a = _shape(g, x), node.attrs
    nsp = len(xs) - 2
    st, en, pb, pe = list(region.starts[:2]), list(region.ends[:2]), [], []
    for i in range(nsp):
        lo, hi, b, e = _window(region.starts[2 + i], region.ends[2 + i], a["stride"][i], a["padding"][i],
                               a["kernel"][i], xs[2 + i])
        if hi <= lo or e > a["padding"][nsp + i] or max(b, e) >= a["kernel"][i]:
            return None  # a ceil-mode window past the padding: keep the whole op
        st.append(lo)
        en.append(hi)
        pb.append(b)
        pe.append(e)
    return node.op, [(x, Region(st, en))], dict(a, padding=tuple(pb + pe), ceil_mode=0)


@restrict_rule(Op.MATMUL, Op.BATCHMATMUL, strided=True)
def matmul(node, k, region, g):
    a, b = node.inputs
    xa, xb = _shape(g, a), _shape(g, b)
    if len(xa) < 2 or len(xb) < 2:
        return None
    batch = Region(region.starts[:-2], region.ends[:-2], region.steps[:-2])
    ra = _broadcast(batch, xa[:-2]) if len(xa) > 2 else Region((), ())
    rb = _broadcast(batch, xb[:-2]) if len(xb) > 2 else Region((), ())
    (i0, j0), (i1, j1), (ik, jk) = region.starts[-2:], region.ends[-2:], region.steps[-2:]
    ra = Region(ra.starts + (i0, 0), ra.ends + (i1, xa[-1]), ra.steps + (ik, 1))
    rb = Region(rb.starts + (0, j0), rb.ends + (xb[-2], j1), rb.steps + (1, jk))
    return node.op, [(a, ra), (b, rb)], dict(node.attrs)


@restrict_rule(Op.GEMM)
def gemm(node, k, region, g):
    a, b = node.inputs[0], node.inputs[1]
    (i0, j0), (i1, j1) = region.starts, region.ends
    xa, xb = _shape(g, a), _shape(g, b)
    ra = Region((0, i0), (xa[0], i1)) if node.attrs["trans_a"] else Region((i0, 0), (i1, xa[1]))
    rb = Region((j0, 0), (j1, xb[1])) if node.attrs["trans_b"] else Region((0, j0), (xb[0], j1))
    ins = [(a, ra), (b, rb)]
    if len(node.inputs) > 2 and node.inputs[2]:
        ins.append((node.inputs[2], _broadcast(region, _shape(g, node.inputs[2]))))
    return node.op, ins, dict(node.attrs)


@restrict_rule(Op.CONCAT)
def concat(node, k, region, g):
    axis = node.attrs["axis"]
    r0, r1 = region.starts[axis], region.ends[axis]
    pieces, off = [], 0
    for i in node.inputs:
        n = _shape(g, i)[axis]
        lo, hi = max(r0, off), min(r1, off + n)
        if hi > lo:
            st = region.starts[:axis] + (lo - off,) + region.starts[axis + 1:]
            en = region.ends[:axis] + (hi - off,) + region.ends[axis + 1:]
            pieces.append((i, Region(st, en)))
        off += n
    if len(pieces) == 1:
        return None, pieces, None
    return node.op, pieces, dict(node.attrs)


@restrict_rule(Op.SPLIT)
def split(node, k, region, g):
    axis = node.attrs["axis"]
    off = sum(node.attrs["sizes"][:k])
    st = region.starts[:axis] + (region.starts[axis] + off,) + region.starts[axis + 1:]
    en = region.ends[:axis] + (region.ends[axis] + off,) + region.ends[axis + 1:]
    return None, [(node.inputs[0], Region(st, en))], None


@restrict_rule(Op.SLICE)
def slice_(node, k, region, g):
    a = node.attrs
    if any(s < 0 for s in a["steps"]):
        return None
    st = [s + r * step for s, r, step in zip(a["starts"], region.starts, a["steps"])]
    en = [s + (r - 1) * step + 1 for s, r, step in zip(a["starts"], region.ends, a["steps"])]
    if all(step == 1 for step in a["steps"]):
        return None, [(node.inputs[0], Region(st, en))], None
    n = [e - s for s, e in zip(st, en)]
    return node.op, [(node.inputs[0], Region(st, en))], {"starts": (0,) * len(n), "ends": tuple(n),
                                                         "steps": a["steps"]}


@restrict_rule(Op.PAD)
def pad(node, k, region, g):
    a = node.attrs
    if a["mode"] != "constant":
        return None
    xs = _shape(g, node.inputs[0])
    r = len(xs)
    st, en, pb, pe = [], [], [], []
    for d in range(r):
        lo, hi = region.starts[d] - a["pads"][d], region.ends[d] - a["pads"][d]
        s, e = max(lo, 0), min(hi, xs[d])
        if e <= s:
            return None
        st.append(s)
        en.append(e)
        pb.append(s - lo)
        pe.append(hi - e)
    return node.op, [(node.inputs[0], Region(st, en))], dict(a, pads=tuple(pb + pe))


@restrict_rule(Op.BATCHNORM, strided=True)
def batchnorm(node, k, region, g):
    c = Region((region.starts[1],), (region.ends[1],), (region.steps[1],))
    return node.op, [(node.inputs[0], region)] + [(i, c) for i in node.inputs[1:]], dict(node.attrs)


@dataclass(frozen=True)
class Pieces:
    """A region of a reshape's output as pieces: a leaf (`axis` None) is the box `source` of the
    input reshaped to `shape`; otherwise `parts` are concatenated along `axis`."""

    axis: int | None
    parts: tuple["Pieces", ...] = ()
    source: Region | None = None
    shape: tuple[int, ...] = ()


@restrict_rule(*(op for op in RESHAPES if not REGISTRY[op].aliases), strided=True)
def reshape(node, k, region, g):
    """A row-major reshape: the region cut into the fewest boxes (splitting the outermost
    offending dimension into single positions, recursively) that are each a box of the input."""
    xs, ys = _shape(g, node.inputs[0]), _shape(g, node.outputs[0])
    groups = reshape_groups(xs, ys)
    count = [0]

    def cut(r: Region) -> Pieces | None:
        source, bad = _source_box(xs, ys, groups, r)
        if source is not None:
            count[0] += 1
            return Pieces(None, source=source, shape=r.shape) if count[0] <= MAX_PIECES else None
        d = next(d for d in bad if r.shape[d] > 1)
        parts = []
        for i in range(r.starts[d], r.ends[d], r.steps[d]):
            piece = cut(Region(r.starts[:d] + (i,) + r.starts[d + 1:], r.ends[:d] + (i + 1,) + r.ends[d + 1:],
                               r.steps))
            if piece is None:
                return None
            parts.append(piece)
        return Pieces(d, tuple(parts))

    return cut(region)


def _source_box(xs, ys, groups, r: Region) -> tuple[Region | None, list[int]]:
    """The input box (strided, maybe) holding exactly the elements of output box `r`, or None
    and the output dims of the groups where it is none."""
    st, en, ks, bad = [0] * len(xs), [1] * len(xs), [1] * len(xs), []
    for gi, gj in groups:
        axes = [np.arange(r.starts[d], r.ends[d], r.steps[d]) for d in gj]
        flat = np.ravel_multi_index(np.meshgrid(*axes, indexing="ij"), [ys[d] for d in gj]).reshape(-1)
        coords = [np.unique(c) for c in np.unravel_index(flat, [xs[d] for d in gi])]
        steps = [int(c[1] - c[0]) if len(c) > 1 else 1 for c in coords]
        even = all(len(c) < 2 or bool(np.all(np.diff(c) == k)) for c, k in zip(coords, steps))
        if not even or prod(len(c) for c in coords) != len(flat):
            bad += gj
            continue
        for d, c, k in zip(gi, coords, steps):
            st[d], en[d], ks[d] = int(c[0]), int(c[-1]) + 1, k
    return (Region(st, en, ks), []) if not bad else (None, bad)


@restrict_rule(*(op for op in RESHAPES if REGISTRY[op].aliases), strided=True)
def identity(node, k, region, g):
    return None, [(node.inputs[0], region)], None


# element-wise ops read the same region of each input (broadcast)
restrict_rule(*(op for op, d in REGISTRY.items() if d.elementwise and op not in RESTRICT), strided=True)(elementwise)

no_restrict_rule(f"a constant: {WHOLE}", Op.CONSTANT)
no_restrict_rule(f"a reduction reads whole axes; no rule yet: {WHOLE}", Op.REDUCE_SUM, Op.REDUCE_MEAN,
                 Op.GLOBAL_AVGPOOL)
no_restrict_rule(f"no rule yet: {WHOLE}", Op.EXPAND, Op.GATHER, Op.ACCESS, Op.CONV_TRANSPOSE, Op.G2BMM, Op.GBMM,
                 Op.EOP, Op.CORRECT)
