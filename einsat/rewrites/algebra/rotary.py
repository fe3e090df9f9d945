"""Rotary position embedding written out as HF's chain, recognized as one `rotary` op.

    x · C + rotate_half(x) · S  =  rotary(x, C[.., :D/2], S[.., :D/2])      (interleaved 0)
    rotate_half(x) = concat(-x[.., D/2:], x[.., :D/2]) along the last axis

A generator (`rotary_generator`), because the equality needs a fact no local rule sees: the caches
C and S [B', 1, S, D] repeat their first half in their second (HF computes them as
`cos(concat(f, f)) · scaling`, unsqueezed over the heads), and only then does the chain rotate
each pair (x1, x2) by one angle, as the op does. For each class holding a sum (either order) of
`x · C` and `R · S` (each product either order), with x [B, H, S, D] of the class's type and R
the rotate-half of the same x (`Concat(Neg(Slice(x, D/2:D)), Slice(x, 0:D/2))` on the last
axis, the slices' other axes whole), it checks that C and S are halves-duplicated
(`_duplicated`):

- `Concat(a, a)` along the last axis (one class twice, or classes equal through casts);
- an element-wise op whose every input is duplicated or has last dim 1 (a scalar, a per-row
  value): cos, sin, the scaling product, casts;
- `Unsqueeze`, reshape-free views that keep the last axis: the cache's unsqueeze over the heads;
- a constant weight whose halves are equal, value by value (the caches after folding at fixed
  shapes);

and unions the class with `rotary(x, half(C), half(S))`, half(C) = `Slice(c, [.., 0:D/2])` of the
cache's rank-3 class c (the unsqueeze's input; else a Reshape of C to [B', S, D]). The caches'
batch B' must be B or 1 (the op's broadcast), their sequence S.

The halves are new terms: Slices of classes the program computes, folded where the caches are
constants. Only the rotate-half form is read (HF's Llama, Qwen2, Mistral; the interleaved form,
GPT-J's and the op's `interleaved=1`, is written by no bundled export).
"""

from __future__ import annotations

import numpy as np

from einsat.egraph.data import EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.ir.registry import REGISTRY, Op
from einsat.ir.types import is_float
from einsat.rewrites.algebra.reading import Reader

MAX_DEPTH = 8  # element-wise ops between a cache and its concat(f, f)


def _whole_but_last(n, t, start, stop) -> bool:
    """The slice e-node takes every index of each axis but the last, and start:stop of the last."""
    a = n.attrs
    rank = t.rank
    if tuple(a["axes"]) != tuple(range(rank)) or any(s != 1 for s in a["steps"]):
        return False
    return (all(s == 0 for s in a["starts"][:-1]) and tuple(a["ends"][:-1]) == tuple(t.shape[:-1])
            and a["starts"][-1] == start and a["ends"][-1] == stop)


def _slices_of(r: Reader, cid, start, stop):
    """x for each Slice(x, [.., start:stop]) (the other axes whole) in the class."""
    for c in r.same(cid):
        for n in r.nodes(c, Op.SLICE):
            x = n.children[0]
            tx = r.type(x)
            if tx is not None and _whole_but_last(n, tx, start, stop):
                yield x


def _rotate_halves(r: Reader, cid):
    """x for each rotate_half(x) = Concat(Neg(x[.., h:]), x[.., :h]) along the last axis in the class."""
    t = r.type(cid)
    if t is None or t.rank == 0 or not isinstance(t.shape[-1], int) or t.shape[-1] % 2:
        return
    d = t.shape[-1]
    h = d // 2
    for c in r.same(cid):
        for n in r.nodes(c, Op.CONCAT):
            if n.attrs["axis"] != t.rank - 1 or len(n.children) != 2:
                continue
            neg, lo = n.children
            lows = set(_slices_of(r, lo, 0, h))
            for c2 in r.same(neg):
                for m in r.nodes(c2, Op.NEG):
                    for x in _slices_of(r, m.children[0], h, d):
                        if any(r.equal(x, y) for y in lows):
                            yield x


def _duplicated(r: Reader, cid, depth=0, seen=None) -> bool:
    """The class's last axis is two equal halves, by construction (module docstring)."""
    seen = set() if seen is None else seen
    if cid in seen or depth > MAX_DEPTH:
        return False
    seen.add(cid)
    t = r.type(cid)
    if t is None or t.rank == 0 or not isinstance(t.shape[-1], int) or t.shape[-1] % 2:
        return False
    for n in r.data.classes[cid].nodes:
        if n.leaf is not None and n.leaf[0] == "weight" and n.leaf[1] in r.data.weights:
            a = np.asarray(r.data.weights[n.leaf[1]])
            h = a.shape[-1] // 2 if a.ndim else 0
            if a.ndim and a.shape[-1] == t.shape[-1] and np.array_equal(a[..., :h], a[..., h:]):
                return True
            continue
        if n.op is None:
            continue
        if n.op is Op.CONCAT:
            if n.attrs["axis"] == t.rank - 1 and len(n.children) == 2 and r.equal(*n.children):
                return True
        elif n.op is Op.UNSQUEEZE:
            if t.rank - 1 not in n.attrs["axes"] and _duplicated(r, n.children[0], depth + 1, seen):
                return True
        elif REGISTRY[n.op].elementwise and n.children:
            ok = True
            for k in n.children:
                tk = r.type(k)
                if tk is None:
                    ok = False
                    break
                if tk.rank == 0 or tk.shape[-1] == 1:
                    continue
                if not _duplicated(r, k, depth + 1, seen):
                    ok = False
                    break
            if ok and any(r.type(k).rank and r.type(k).shape[-1] != 1 for k in n.children):
                return True
    return False


def _duplicated_once(r: Reader, cid) -> bool:
    """`_duplicated` from the class itself, read once a round (the same caches meet many sums)."""
    return r.cached(("duplicated", cid), lambda: _duplicated(r, cid))


def _half(r: Reader, cache, x_type):
    """The rank-3 half cache [B', S, D/2] of the class `cache` [B', 1, S, D], as a term; None when
    its shape does not fit x [B, H, S, D]."""
    t = r.type(cache)
    b, _, s, d = x_type.shape
    if t is None or t.rank != 4 or t.shape[1] != 1 or t.shape[0] not in (1, b) or t.shape[2] != s \
            or t.shape[3] != d:
        return None
    flat = None
    for c in sorted(r.same(cache)):
        for n in r.nodes(c, Op.UNSQUEEZE):
            if tuple(n.attrs["axes"]) == (1,):
                flat = n.children[0]
                break
        if flat is not None:
            break
    if flat is None:
        flat = Term(Op.RESHAPE, (cache,), {"shape": (t.shape[0], s, d)})
    return Term(Op.SLICE, (flat,), {"starts": (0, 0, 0), "ends": (t.shape[0], s, d // 2), "axes": (0, 1, 2),
                                    "steps": (1, 1, 1)})


def _forms(r: Reader, cid):
    """(x, C, S) for each x · C + rotate_half(x) · S in the class (caches not yet checked)."""
    t = r.type(cid)
    for a, b in r.sums(cid):
        for rot, sc in r.products(b):
            xs = r.cached(("rotate_half", rot), lambda: list(_rotate_halves(r, rot)))
            if not xs:
                continue
            for x, cc in r.products(a):
                tx = r.type(x)
                if tx is None or tx.shape != t.shape or tx.dtype != t.dtype:
                    continue
                if any(r.equal(x, y) for y in xs):
                    yield x, cc, sc


def rotary_terms(session, data: EGraphData) -> int:
    r = Reader(data)
    unions = 0
    for cid in sorted(data.classes):
        t = r.type(cid)
        if t is None or t.rank != 4 or not is_float(t.dtype) or not r.nodes(cid, Op.ADD):
            continue
        have = {n.children[0] for n in r.nodes(cid, Op.ROTARY)}
        for x, cc, sc in _forms(r, cid):
            if x in have:
                continue
            tc, ts = r.type(cc), r.type(sc)
            if tc is None or ts is None or tc.dtype != t.dtype or ts.dtype != t.dtype or tc.shape != ts.shape:
                continue
            if not (_duplicated_once(r, cc) and _duplicated_once(r, sc)):
                continue
            hc, hs = _half(r, cc, t), _half(r, sc, t)
            if hc is None or hs is None:
                continue
            session.union(cid, Term(Op.ROTARY, (x, hc, hs), {"interleaved": 0}))
            have.add(x)
            unions += 1
    return unions


def rotary_generator() -> Generator:
    return Generator("rotary", "x · C + rotate_half(x) · S = rotary(x, C[.., :D/2], S[.., :D/2])  (C and S halves-"
                     "duplicated by construction: concat(f, f) under element-wise ops and unsqueezes, or a "
                     "constant; rotate_half as Concat(Neg(Slice), Slice))", rotary_terms)
