"""Where an expression can be nonzero: the analysis behind boundary relaxing and tightening.

`support(body, it, ...)` is an interval of values of iterator `it` outside of which the body is
0 for every value of the other iterators in their ranges: a read is 0 when a subscript that is
affine in `it` leaves the tensor (EinNet §3's padding), a product when any factor is, a sum when
every term is, a function f with f(0) = 0 when its argument is. EinNet §4.1's boundary rules are
sound exactly within it: `tighten` shrinks ranges to it (the dropped terms are zeros), and
relaxing a summation is allowed while the new points stay outside it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from einsat.ir.expr.index import Index
from einsat.ir.expr.nodes import Body, Const, Expr, Guard, Iter, Read

INF = 1 << 60
FULL = (-INF, INF)
ZERO_PRESERVING = frozenset({"relu", "neg", "abs", "tanh", "sqrt", "erf", "floor", "gelu"})


def _intersect(a, b):
    return max(a[0], b[0]), min(a[1], b[1])


def _hull(a, b):
    if a[0] >= a[1]:
        return b
    if b[0] >= b[1]:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


def _affine_in(i: Index, it: str) -> int:
    """The coefficient of `it` when it appears in `i` as a plain term only (0 otherwise)."""
    nested = any(not isinstance(a, str) and it in a.arg.iterators() for a, _ in i.terms)
    return 0 if nested else i.coef(it)


def _ceil(x: int, c: int) -> int:
    return -((-x) // c)


def _constraint(i: Index, it: str, lo: int, hi: int, ranges) -> tuple[int, int]:
    """Values of `it` for which lo <= i < hi is possible (other iterators in their ranges)."""
    c = _affine_in(i, it)
    if c == 0:
        return FULL
    rlo, rhi = i.without(it).bounds(ranges)
    a, b = lo - rhi, hi - 1 - rlo          # c·it in [a, b]
    if c > 0:
        return _ceil(a, c), b // c + 1
    return _ceil(b, c), a // c + 1


def support(body: Body, it: str, ranges: Mapping[str, tuple[int, int]], shapes: Sequence[Sequence[int]]):
    """[lo, hi): outside it the body is 0 (see the module docstring)."""
    if isinstance(body, Const):
        return FULL if body.value != 0 else (0, 0)
    if isinstance(body, Read):
        if isinstance(body.src, int):
            dims, lows = shapes[body.src], (0,) * len(body.idx)
        else:
            dims, lows = body.src.shape, body.src.lows
        out = FULL
        for i, d, lo in zip(body.idx, dims, lows):
            out = _intersect(out, _constraint(i, it, lo, lo + d, ranges))
        return out
    if isinstance(body, Guard):
        return _intersect(support(body.value, it, ranges, shapes), _constraint(body.idx, it, body.lo, body.hi, ranges))
    parts = [support(a, it, ranges, shapes) for a in body.args]
    if body.fn == "mul":
        return _intersect(*parts)
    if body.fn in ("add", "sub", "maximum", "minimum"):
        return _hull(*parts) if body.fn in ("add", "sub") else FULL
    if body.fn in ZERO_PRESERVING:
        return parts[0]
    return FULL


def supports(body: Body, ranges: Mapping[str, tuple[int, int]], shapes: Sequence[Sequence[int]]) -> dict:
    """`support` of every iterator of `ranges` in one walk of the body."""
    if isinstance(body, Const):
        whole = FULL if body.value != 0 else (0, 0)
        return {it: whole for it in ranges}
    if isinstance(body, (Read, Guard)):
        if isinstance(body, Guard):
            out = supports(body.value, ranges, shapes)
            pairs = [(body.idx, body.lo, body.hi)]
        else:
            out = dict.fromkeys(ranges, FULL)
            if isinstance(body.src, int):
                dims, lows = shapes[body.src], (0,) * len(body.idx)
            else:
                dims, lows = body.src.shape, body.src.lows
            pairs = [(i, lo, lo + d) for i, d, lo in zip(body.idx, dims, lows)]
        for i, lo, hi in pairs:
            for a, _ in i.terms:
                if isinstance(a, str) and a in out:
                    out[a] = _intersect(out[a], _constraint(i, a, lo, hi, ranges))
        return out
    parts = [supports(a, ranges, shapes) for a in body.args]
    if body.fn == "mul":
        return {it: _intersect(parts[0][it], parts[1][it]) for it in ranges}
    if body.fn in ("add", "sub"):
        return {it: _hull(parts[0][it], parts[1][it]) for it in ranges}
    if body.fn in ZERO_PRESERVING:
        return parts[0]
    return dict.fromkeys(ranges, FULL)


def tighten(e: Expr, shapes: Sequence[Sequence[int]], loops: bool) -> Expr:
    """`e` with each summation range (and each traversal range, with `loops`: not for an output
    whose shape is fixed) shrunk to the body's support, repeated until nothing changes. Max
    reductions keep their summation ranges (a dropped 0 could have been the maximum)."""
    while True:
        sup = supports(e.body, e.ranges(), shapes)
        new_loops = tuple(_shrink(it, sup[it.name]) if loops else it for it in e.loops)
        new_sums = tuple(_shrink(it, sup[it.name]) if e.reduce == "sum" else it for it in e.sums)
        if new_loops == e.loops and new_sums == e.sums:
            return e
        e = Expr(new_loops, new_sums, e.body, e.reduce)


def _shrink(it: Iter, sup: tuple[int, int]) -> Iter:
    lo, hi = _intersect((it.lo, it.hi), sup)
    if hi <= lo:
        lo = hi = it.lo
    return Iter(it.name, lo, hi)


def relaxable(e: Expr, it: Iter, lo: int, hi: int, shapes: Sequence[Sequence[int]]) -> bool:
    """Whether summation `it` of `e` may range over [lo, hi) ⊇ its range without changing the
    value: the body is 0 at every added point."""
    if e.reduce != "sum" or lo > it.lo or hi < it.hi:
        return False
    slo, shi = _intersect(support(e.body, it.name, e.ranges(), shapes), (lo, hi))
    return shi <= slo or (it.lo <= slo and shi <= it.hi)
