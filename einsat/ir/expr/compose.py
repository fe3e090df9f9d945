"""Composing expressions: EinNet's traversal merging (§4.2) of a producer into its consumer.

    e = compose(outer, k, inner, inner_inputs)   # outer with its input k computed by inner

`compose` puts `inner` in as a scope wherever `outer` (or one of its scopes) reads input k, then `inline`s every
scope without summations that is read inside its range: the read becomes the scope's body at the
read's subscripts. What stays a scope is a reduction (a row's max, sum, mean or variance), which
a kernel computes once per row; an element-wise producer is recomputed where it is read (a
memory-bound map: recomputing costs arithmetic, materializing it costs a tensor's round trip).
"""

from __future__ import annotations

from einsat.ir.expr.index import var
from einsat.ir.expr.nodes import (
    Body,
    Const,
    Expr,
    Read,
    all_scopes,
    inputs_used,
    map_reads,
    reads,
    relabel_inputs,
    scopes,
    subst,
    walk,
)


def inline(e: Expr) -> Expr:
    """`e` with every summation-free scope read inside its range replaced by the scope's body
    (at any depth); reductions stay scopes, their own bodies inlined likewise."""
    memo: dict[Expr, Expr] = {}
    return _inline(e, memo)


def _inline(e: Expr, memo: dict[Expr, Expr]) -> Expr:
    if e in memo:
        return memo[e]
    ranges = e.ranges()

    def read(r: Read) -> Body:
        if isinstance(r.src, int):
            return r
        s = _inline(r.src, memo)
        if s.sums or not _inside(r, s, ranges):
            return Read(s, r.idx)
        mapping = {it.name: i for it, i in zip(s.loops, r.idx)}
        return subst(s.body, mapping)

    out = e.with_body(map_reads(e.body, read))
    memo[e] = out
    return out


def _inside(r: Read, s: Expr, ranges) -> bool:
    for i, it in zip(r.idx, s.loops):
        lo, hi = i.bounds(ranges)
        if lo < it.lo or hi >= it.hi:
            return False
    return True


def compose(outer: Expr, k: int, inner: Expr, inner_inputs: list[int]) -> Expr:
    """`outer` with its input k computed by `inner` (whose input j is outer's input
    `inner_inputs[j]`), element-wise producers inlined (`inline`)."""
    scope = relabel_inputs(inner, dict(enumerate(inner_inputs)))
    return inline(_put(outer, k, scope, {}))


def _put(e: Expr, k: int, scope: Expr, memo: dict[Expr, Expr]) -> Expr:
    """`e` reading `scope` wherever it (or one of its scopes) read input k."""
    if e in memo:
        return memo[e]

    def read(r: Read) -> Body:
        if isinstance(r.src, Expr):
            return Read(_put(r.src, k, scope, memo), r.idx)
        if r.src != k:
            return r
        return Read(scope, tuple(i + lo for i, lo in zip(r.idx, scope.lows)))

    out = e.with_body(map_reads(e.body, read))
    memo[e] = out
    return out


def constant_input(e: Expr, k: int, value: float) -> Expr:
    """`e` with every read of input k (at any depth) the constant `value` (a one-element input)."""
    memo: dict[Expr, Expr] = {}

    def walk_expr(x: Expr) -> Expr:
        if x not in memo:
            def read(r: Read) -> Body:
                if isinstance(r.src, Expr):
                    return Read(walk_expr(r.src), r.idx)
                return Const(value) if r.src == k else r
            memo[x] = x.with_body(map_reads(x.body, read))
        return memo[x]
    return walk_expr(e)


def compact(e: Expr, children: list) -> tuple[Expr, list]:
    """`e` reading only the inputs it uses, each distinct entry of `children` once (inputs that
    are one child read as one), renumbered in order, and those inputs' entries of `children`."""
    first: dict = {}
    e = relabel_inputs(e, {k: first.setdefault(c, k) for k, c in enumerate(children)})
    used = sorted(inputs_used(e))
    return relabel_inputs(e, {k: j for j, k in enumerate(used)}), [children[k] for k in used]


def size(e: Expr) -> int:
    """The number of terms of `e`'s body and of its scopes' (each scope once)."""
    seen: set[Expr] = set()

    def count(x: Expr) -> int:
        n = 0
        for t in walk(x.body):
            n += 1
            if isinstance(t, Read) and isinstance(t.src, Expr) and t.src not in seen:
                seen.add(t.src)
                n += count(t.src)
        return n
    return count(e)


def row_form(e: Expr) -> int | None:
    """r when `e` is a map over its leading r dims ("rows") whose scopes are all reductions
    over the rest of their input (a row's max, sum, mean, variance), each read at its row:
    subscripts the row iterators in order, then constants at size-1 dims; a scope's own scopes
    likewise at its loops. A kernel then computes each scope once per row (a block per row,
    `gpu.kernels.eop`). None otherwise (no scopes, an own summation, a scope read elsewhere)."""
    if e.sums or not scopes(e):
        return None
    rows: set[int] = set()
    for parent in all_scopes(e):
        if parent is not e and not parent.sums:
            return None
        for r in reads(parent.body):
            if not isinstance(r.src, Expr):
                continue
            n = _row_prefix(r, parent)
            if n is None:
                return None
            rows.add(n)
    if len(rows) != 1:
        return None
    (n,) = rows
    return n if n < len(e.loops) or all(it.size == 1 for it in e.loops[n:]) else None


def _row_prefix(r: Read, parent: Expr) -> int | None:
    """How many leading subscripts of the scope read `r` in `parent` are `parent`'s own loop
    iterators in order (the rest constants at the scope's size-1 dims), or None."""
    s = r.src
    n = 0
    while n < len(r.idx) and n < len(parent.loops) and r.idx[n] == var(parent.loops[n].name) \
            and s.loops[n].lo == parent.loops[n].lo and s.loops[n].hi == parent.loops[n].hi:
        n += 1
    for i, it in zip(r.idx[n:], s.loops[n:]):
        if i.terms or it.size != 1 or i.const != it.lo:
            return None
    return n
