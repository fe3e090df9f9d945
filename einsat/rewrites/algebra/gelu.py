"""GELU written out, recognized as the `gelu` op, in both flavours.

    0.5 · x · (1 + erf(x / √2))                              =  gelu(x)
    0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))       =  gelu(x; approximate="tanh")

A generator (`gelu_generator`), because the constants are scalar *weights* in the exports and
the three factors come in any order and grouping: BERT's and ViT's `x · (0.5 · (1 + erf(x /
1.4142135)))`, GPT-2's NewGELU `(x · 0.5) · (1 + tanh(0.7978846 · (x + 0.044715 · x³)))`. For
each class it reads the products of three factors (`Reader.factorings`: products nested two
deep, either order) of which one is the scalar 0.5, one is x and one is `1 + erf(z)` or `1 +
tanh(u)` (either order), with

- z = `x · c` (either order, c = 1/√2) or `x / c` (c = √2);
- u = `c · v` (either order, c = √(2/π)), v = `x + k · x³` (either order, k = 0.044715 a scalar
  weight by either side), x³ = `Pow(x, 3)`, `x · (x · x)` or `(x · x) · x`.

Constants match to float32 rounding (a relative 1e-6; 1e-12 in a float64 program): an export
holds them as float32 weights, the op its exact values.
"""

from __future__ import annotations

import math

from einsat.egraph.data import EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.ir.registry import Op
from einsat.ir.types import is_float
from einsat.rewrites.algebra.reading import Reader

SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _erf_args(r: Reader, z, dt):
    """x for each x / √2 or x · (1/√2) in the class."""
    for c in r.same(z):
        for n in r.nodes(c, Op.DIV):
            if r.near(n.children[1], SQRT2, dt):
                yield n.children[0]
    for x, c in r.products(z):
        if r.near(c, 1.0 / SQRT2, dt):
            yield x


def _cubes(r: Reader, x3, dt):
    """x for each x³ in the class: Pow(x, 3), x · (x · x), (x · x) · x."""
    for c in r.same(x3):
        for n in r.nodes(c, Op.POW):
            if r.near(n.children[1], 3.0, dt):
                yield n.children[0]
    for f in r.factorings(x3):
        if len(f) == 3 and r.equal(f[0], f[1]) and r.equal(f[1], f[2]):
            yield f[0]


def _tanh_args(r: Reader, u, dt):
    """x for each √(2/π) · (x + 0.044715 · x³) in the class."""
    for v, c in r.products(u):
        if not r.near(c, TANH_SCALE, dt):
            continue
        for x, k in r.sums(v):
            for x3, c2 in r.products(k):
                if r.near(c2, CUBIC, dt) and any(r.equal(x, y) for y in _cubes(r, x3, dt)):
                    yield x


def _one_plus(r: Reader, p, dt):
    """(x, approximate) for each 1 + erf(x / √2) and 1 + tanh(√(2/π) · (x + 0.044715 · x³))."""
    for e, one in r.sums(p):
        if not r.near(one, 1.0, dt):
            continue
        for c in r.same(e):
            for n in r.nodes(c, Op.ERF):
                yield from ((x, "none") for x in _erf_args(r, n.children[0], dt))
            for n in r.nodes(c, Op.TANH):
                yield from ((x, "tanh") for x in _tanh_args(r, n.children[0], dt))


def gelu_forms(r: Reader, cid):
    """(x, approximate) for each GELU the class computes."""
    t = r.type(cid)
    out = []
    for f in r.factorings(cid):
        if len(f) != 3:
            continue
        for k, half in enumerate(f):
            if not r.near(half, 0.5, t.dtype):
                continue
            a, b = (f[j] for j in range(3) if j != k)
            for x, p in ((a, b), (b, a)):
                tx = r.type(x)
                if tx is None or tx.shape != t.shape or tx.dtype != t.dtype:
                    continue
                out.extend((x, approx) for y, approx in _one_plus(r, p, t.dtype) if r.equal(x, y))
    return out


def gelu_terms(session, data: EGraphData) -> int:
    r = Reader(data)
    unions = 0
    for cid in sorted(data.classes):
        t = r.type(cid)
        if t is None or not is_float(t.dtype) or not r.nodes(cid, Op.MUL):
            continue
        have = {(n.children[0], n.attrs["approximate"]) for c in r.same(cid) for n in r.nodes(c, Op.GELU)}
        for x, approx in gelu_forms(r, cid):
            if (x, approx) in have:
                continue
            session.union(cid, Term(Op.GELU, (x,), {"approximate": approx}))
            have.add((x, approx))
            unions += 1
    return unions


def gelu_generator() -> Generator:
    return Generator("gelu", "0.5 · x · (1 + erf(x / √2)) = gelu(x); 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · "
                     "x³))) = gelu(x; tanh)  (constants scalar weights; factors in any order and grouping)",
                     gelu_terms)
