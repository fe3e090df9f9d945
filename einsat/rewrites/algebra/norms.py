"""Normalizations written out as chains, recognized as one op: `rmsnorm` and `layernorm`.

    x · (1 / sqrt(mean(x²) + eps)) · w  =  rmsnorm(x, w; axis, eps)
    (x - mean(x)) / sqrt(mean((x - mean(x))²) + eps) · w + b  =  layernorm(x, w, b; axis, eps)

Generators (`rmsnorm_generator`, `layernorm_generator`), because the exported forms need facts
egglog rules cannot read: the epsilon and the 2 of `Pow(x, 2)` are scalar *weights*. Each reads,
in the e-graph, for every class holding a product `n · w` (either order) with w broadcasting to
the normalized dims:

- RMSNorm (Llama, Qwen2, Mistral; PyTorch's dynamo and TorchScript exports): n = `x · r`
  (either order) or `x / s`, with r = `1 / s` (a Reciprocal imports as that) or `Pow(v, -0.5)`,
  s = `sqrt(v)`, v = `m + eps` (either order, eps a scalar weight >= 0), m = `ReduceMean(x²)` over
  the trailing dims from `axis` (keepdims), x² = `Pow(x, 2)` or `x · x`; casts of a value to its
  own dtype (the legacy exports' `Cast(x, float32)`) are seen through. A half program's pair of
  casts (x widened to float32 for the statistics, n rounded back before the weight) is read too:
  `w · cast(n)` with n the float32 chain of `cast(x)` is `rmsnorm(x, w)` in x's dtype, whose
  statistics are float32 (the op's semantics);
- layernorm: n = `d / s` or `d · (1 / s)`, d = `x - ReduceMean(x)`, s = `sqrt(ReduceMean(d²) +
  eps)` over the same trailing dims, and an optional `+ b` (either order) after the weight.

The epsilon is a float32 attribute: in a float64 program the rewrite fires only where it is
exactly a float32, so both sides stay equal to the last bit of it. Layernorm's chains are read in
float32 and float64 only (a half chain rounds its statistics, the op does not). No bundled
export writes a layernorm chain (the dynamo exports write LayerNormalization), so that form is
checked on built programs only.
"""

from __future__ import annotations

from einsat.egraph.data import EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.ir.registry import Op
from einsat.ir.types import is_float
from einsat.rewrites.algebra.reading import Reader, broadcasts_within, float32_attr, trailing_axis


def _mean(r: Reader, m):
    """(x, axis) for each ReduceMean(x) over trailing dims, keepdims, in the class."""
    for c in r.same(m):
        for n in r.nodes(c, Op.REDUCE_MEAN):
            t = r.type(n.children[0])
            if t is None or not n.attrs["keepdims"]:
                continue
            axis = trailing_axis(n.attrs["axes"], t.rank)
            if axis is not None:
                yield n.children[0], axis


def _squares(r: Reader, sq):
    """x for each x² in the class: Pow(x, 2) or x · x."""
    t = r.type(sq)
    for c in r.same(sq):
        for n in r.nodes(c, Op.POW):
            if r.near(n.children[1], 2.0, t.dtype):
                yield n.children[0]
        for n in r.nodes(c, Op.MUL):
            if r.equal(*n.children):
                yield n.children[0]


def _plus_eps(r: Reader, v):
    """(m, eps) for each m + eps (eps a scalar weight >= 0) in the class."""
    for m, e in r.sums(v):
        eps = r.scalar(e)
        if eps is not None and eps >= 0 and r.type(m) is not None and r.type(m).shape == r.type(v).shape:
            yield m, eps


def _roots(r: Reader, s):
    """v for each sqrt(v) in the class."""
    for c in r.same(s):
        for n in r.nodes(c, Op.SQRT):
            yield n.children[0]


def _inverses(r: Reader, cid):
    """(s, None) for each 1 / s in the class, (None, v) for each Pow(v, -0.5)."""
    t = r.type(cid)
    for c in r.same(cid):
        for n in r.nodes(c, Op.DIV):
            if r.near(n.children[0], 1.0, t.dtype):
                yield n.children[1], None
        for n in r.nodes(c, Op.POW):
            if r.near(n.children[1], -0.5, t.dtype):
                yield None, n.children[0]


def _quotients(r: Reader, n):
    """(a, s, v) for each a / s or a · (1 / s) (s = sqrt(v)) or a · Pow(v, -0.5) in the class; s or
    v None when the class names the other (kept for the round: both norms ask)."""
    return r.cached(("quotients", n), lambda: tuple(_find_quotients(r, n)))


def _find_quotients(r: Reader, n):
    for c in r.same(n):
        for d in r.nodes(c, Op.DIV):
            yield d.children[0], d.children[1], None
    for a, inv in r.products(n):
        for s, v in _inverses(r, inv):
            yield a, s, v


def _variances(r: Reader, s, v):
    """(v, m) for the sqrt's argument v = m + eps: (m, eps) pairs."""
    args = [v] if v is not None else list(_roots(r, s))
    for arg in args:
        yield from _plus_eps(r, arg)


def rms_normalized(r: Reader, n):
    """(x, axis, eps) for each x / sqrt(mean(x²) + eps) the class computes."""
    out = []
    for a, s, v in _quotients(r, n):
        for m, eps in _variances(r, s, v):
            for sq, axis in _mean(r, m):
                for x in _squares(r, sq):
                    if r.equal(a, x):
                        out.append((a, axis, eps))
    return out


def ln_normalized(r: Reader, n):
    """(x, axis, eps) for each (x - mean(x)) / sqrt(mean((x - mean(x))²) + eps) the class computes."""
    out = []
    for d, s, v in _quotients(r, n):
        centred = [(sub.children[0], axis) for c in r.same(d) for sub in r.nodes(c, Op.SUB)
                   for x, axis in _mean(r, sub.children[1]) if r.equal(x, sub.children[0])]
        if not centred:
            continue
        for m, eps in _variances(r, s, v):
            for sq, axis in _mean(r, m):
                for d2 in _squares(r, sq):
                    if r.equal(d2, d):
                        out.extend((x, axis, eps) for x, a in centred if a == axis)
    return out


def _half_rms(r: Reader, n, dtype):
    """(x, axis, eps) for cast(chain(cast(x, float32)), dtype) in a half program."""
    for c in r.same(n):
        for cast in r.nodes(c, Op.CAST):
            inner = cast.children[0]
            ti = r.type(inner)
            if ti is None or ti.dtype == dtype or ti.dtype.itemsize < 4:
                continue
            for x32, axis, eps in rms_normalized(r, inner):
                for c2 in r.same(x32):
                    for widen in r.nodes(c2, Op.CAST):
                        x = widen.children[0]
                        if r.type(x) is not None and r.type(x).dtype == dtype:
                            yield x, axis, eps


def _weighted(r: Reader, cid, normalized, half: bool):
    """(x, w, axis, eps) for each n · w in the class, n normalized."""
    t = r.type(cid)
    for n, w in r.products(cid):
        tw = r.type(w)
        if tw is None or tw.dtype != t.dtype:
            continue
        # a class is a factor of many products (commutativity, associativity): read it once a round
        found = list(r.cached((normalized.__name__, n), lambda: normalized(r, n)))
        if half and t.dtype.itemsize < 4:
            found += r.cached(("half", n, t.dtype.str), lambda: list(_half_rms(r, n, t.dtype)))
        for x, axis, eps in found:
            tx = r.type(x)
            if tx is not None and tx.shape == t.shape and tx.dtype == t.dtype \
                    and broadcasts_within(tw.shape, tx.shape[axis:]):
                yield x, w, axis, eps


def _known(r: Reader, cid, op: Op):
    return {(n.children, n.attrs["axis"], n.attrs["epsilon"]) for c in r.same(cid) for n in r.nodes(c, op)}


def rmsnorm_terms(session, data: EGraphData) -> int:
    r = Reader(data)
    unions = 0
    for cid in sorted(data.classes):
        t = r.type(cid)
        if t is None or t.rank == 0 or not is_float(t.dtype) or not r.nodes(cid, Op.MUL):
            continue
        have = _known(r, cid, Op.RMSNORM)
        for x, w, axis, eps in _weighted(r, cid, rms_normalized, half=True):
            e = float32_attr(eps, t.dtype)
            if e is None or ((x, w), axis, e) in have:
                continue
            session.union(cid, Term(Op.RMSNORM, (x, w), {"axis": axis, "epsilon": e}))
            have.add(((x, w), axis, e))
            unions += 1
    return unions


def layernorm_terms(session, data: EGraphData) -> int:
    r = Reader(data)
    unions = 0
    for cid in sorted(data.classes):
        t = r.type(cid)
        if t is None or t.rank == 0 or t.dtype.itemsize < 4 or not is_float(t.dtype):
            continue
        have = _known(r, cid, Op.LAYERNORM)
        forms = [(x, w, None, axis, eps) for x, w, axis, eps in _weighted(r, cid, ln_normalized, half=False)]
        for y, b in r.sums(cid):
            tb = r.type(b)
            if tb is None or tb.dtype != t.dtype or r.type(y) is None or r.type(y).shape != t.shape:
                continue
            forms += [(x, w, b, axis, eps) for x, w, axis, eps in _weighted(r, y, ln_normalized, half=False)
                      if broadcasts_within(tb.shape, t.shape[axis:])]
        for x, w, b, axis, eps in forms:
            e = float32_attr(eps, t.dtype)
            kids = (x, w) if b is None else (x, w, b)
            if e is None or (kids, axis, e) in have:
                continue
            session.union(cid, Term(Op.LAYERNORM, kids, {"axis": axis, "epsilon": e}))
            have.add((kids, axis, e))
            unions += 1
    return unions


def rmsnorm_generator() -> Generator:
    return Generator("rmsnorm", "x · (1 / sqrt(mean(x²) + eps)) · w = rmsnorm(x, w; axis, eps)  (eps and the 2 "
                     "scalar weights; x / sqrt(..), Pow(.., -0.5), x · x, casts to the own dtype, a half "
                     "program's cast pair)", rmsnorm_terms)


def layernorm_generator() -> Generator:
    return Generator("layernorm", "(x - mean(x)) / sqrt(mean((x - mean(x))²) + eps) · w + b = layernorm(x, w, b; "
                     "axis, eps)  (eps a scalar weight; the bias optional)", layernorm_terms)
