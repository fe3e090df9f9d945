"""EinNet's intra-expression derivation rules (§4.1, Table 1), as functions on expressions.

A derivation state is a root expression whose scopes are the tensors it will instantiate. Each
rule rewrites one scope `s` of the root and returns the new root (None where it does not apply);
the value of the root never changes (each rule has a property test):

- `split_summation(root, s, outer)`: L Σ_{outer, inner} f = L Σ_{outer} {L_{outer, x} Σ_{inner} f};
- `substitute(root, s, x, t)`: traversal x replaced by t = ±x + (other traversals), a bijection
  for fixed others; the new range is t's bounding box (substitution with relaxing: the extra
  points are never read). Readers of s read the new scope at t; the root gets a wrapper scope;
- `split_loop` / `split_sum(root, s, x, k)`: x = k·q + p, 0 <= p < k (a stride or dilation
  residue, or a kernel split): a summation may be relaxed to a multiple of k only where the body
  is 0 (`support.relaxable`);
- `merge_loops` / `merge_sums`: the inverse, two iterators as one (m = x1·|x2| + x2);
- `inline(root, parent, child)`: traversal merging, a scope substituted into its reader (with
  its summations when the reader is just a read of it);
- `normalize(root, shapes)`: boundary tightening everywhere, simplified subscripts, one-point
  summations substituted, identity wrappers removed, canonical names (a state's fingerprint).
"""

from __future__ import annotations

from itertools import count
from typing import Callable, Sequence

from einsat.ir.expr.index import Index, var
from einsat.ir.expr.nodes import (
    Expr,
    Iter,
    Read,
    all_scopes,
    map_indices,
    map_reads,
    reads,
    replace_reads_of,
    scopes,
    subst,
)
from einsat.ir.expr.printer import canonical
from einsat.rewrites.derive.support import relaxable, support, tighten

Shapes = Sequence[Sequence[int]]


def fresh(e: Expr, base: str = "v") -> Callable[[], str]:
    """A supply of iterator names unused in scope `e`."""
    taken = {it.name for it in e.loops + e.sums}
    names = (f"{base}{k}" for k in count())
    return lambda: next(n for n in names if n not in taken)


def replace(root: Expr, s: Expr, new: Expr) -> Expr:
    """`root` with scope `s` replaced by `new` (the same traversal)."""
    return new if s == root else replace_reads_of(root, s, lambda r: Read(new, r.idx))


def retraverse(root: Expr, s: Expr, new: Expr, reindex: Callable[[tuple[Index, ...]], tuple[Index, ...]]) -> Expr:
    """`root` with scope `s` replaced by `new`, whose element reindex(τ) is s's element τ; the
    root itself becomes a wrapper scope reading `new`."""
    if s == root:
        return Expr(s.loops, (), Read(new, reindex(tuple(var(it.name) for it in s.loops))))
    return replace_reads_of(root, s, lambda r: Read(new, reindex(r.idx)))


def readers(root: Expr, s: Expr) -> list[tuple[Expr, Read]]:
    """(scope, read) for every read of `s` in the tree."""
    return [(p, r) for p in all_scopes(root) for r in reads(p.body) if r.src == s]


# -- the rules ----------------------------------------------------------------------------------

def split_summation(root: Expr, s: Expr, outer: Sequence[str]) -> Expr | None:
    outer_its = tuple(it for it in s.sums if it.name in outer)
    inner_its = tuple(it for it in s.sums if it.name not in outer)
    if not outer_its or not inner_its:
        return None
    inner = Expr(outer_its + s.loops, inner_its, s.body, s.reduce)
    reader = Read(inner, tuple(var(it.name) for it in outer_its + s.loops))
    return replace(root, s, Expr(s.loops, outer_its, reader, s.reduce))


def substitute(root: Expr, s: Expr, x: str, t: Index) -> Expr | None:
    a = t.coef(x)
    loops = {it.name for it in s.loops}
    if a not in (1, -1) or not t.is_affine() or not t.iterators() <= loops or len(t.iterators()) < 2:
        return None
    name = fresh(s, "t")()
    lo, hi = t.bounds({it.name: (it.lo, it.hi) for it in s.loops})
    rest = t - var(x) * a
    body = subst(s.body, {x: (var(name) - rest) * a})
    pos = next(k for k, it in enumerate(s.loops) if it.name == x)
    new = Expr(s.loops[:pos] + (Iter(name, lo, hi + 1),) + s.loops[pos + 1:], s.sums, body, s.reduce)

    def reindex(tau):
        mapping = {it.name: i for it, i in zip(s.loops, tau)}
        return tau[:pos] + (t.subst(mapping),) + tau[pos + 1:]
    return retraverse(root, s, new, reindex)


def _split_range(it: Iter, k: int) -> tuple[Iter, Iter, Iter]:
    """(q, p, covered): x = k·q + p over q's range, p in [0, k); `covered` the x range reached."""
    qlo, qhi = it.lo // k, (it.hi - 1) // k + 1
    return Iter("q", qlo, qhi), Iter("p", 0, k), Iter(it.name, k * qlo, k * qhi)


def split_loop(root: Expr, s: Expr, x: str, k: int) -> Expr | None:
    pos = next((j for j, it in enumerate(s.loops) if it.name == x), None)
    if pos is None or k < 2 or s.loops[pos].size <= k:
        return None
    q, p, _ = _split_range(s.loops[pos], k)
    new_name = fresh(s, "q")
    qn, pn = new_name(), new_name()
    body = subst(s.body, {x: var(qn) * k + var(pn)})
    loops = s.loops[:pos] + (Iter(qn, q.lo, q.hi), Iter(pn, p.lo, p.hi)) + s.loops[pos + 1:]
    new = Expr(loops, s.sums, body, s.reduce)
    return retraverse(root, s, new, lambda tau: tau[:pos] + (tau[pos].floordiv(k), tau[pos].mod(k)) + tau[pos + 1:])


def split_sum(root: Expr, s: Expr, x: str, k: int, shapes: Shapes) -> Expr | None:
    pos = next((j for j, it in enumerate(s.sums) if it.name == x), None)
    if pos is None or k < 2 or s.sums[pos].size <= k:
        return None
    it = s.sums[pos]
    q, p, covered = _split_range(it, k)
    if (covered.lo, covered.hi) != (it.lo, it.hi) and not relaxable(s, it, covered.lo, covered.hi, shapes):
        return None
    new_name = fresh(s, "q")
    qn, pn = new_name(), new_name()
    body = subst(s.body, {x: var(qn) * k + var(pn)})
    sums = s.sums[:pos] + (Iter(qn, q.lo, q.hi), Iter(pn, p.lo, p.hi)) + s.sums[pos + 1:]
    return replace(root, s, Expr(s.loops, sums, body, s.reduce))


def merge_loops(root: Expr, s: Expr, pos: int) -> Expr | None:
    """Traversals `pos` and `pos + 1` as one (every reader must read the inner one in range)."""
    if pos + 1 >= len(s.loops):
        return None
    x1, x2 = s.loops[pos], s.loops[pos + 1]
    for p, r in ([] if s == root else readers(root, s)):
        lo, hi = r.idx[pos + 1].bounds(p.ranges())
        if lo < x2.lo or hi >= x2.hi:
            return None
    m = fresh(s, "m")()
    body = subst(s.body, {x1.name: var(m).floordiv(x2.size) + x1.lo, x2.name: var(m).mod(x2.size) + x2.lo})
    new = Expr(s.loops[:pos] + (Iter(m, 0, x1.size * x2.size),) + s.loops[pos + 2:], s.sums, body, s.reduce)
    return retraverse(root, s, new, lambda tau: tau[:pos] + ((tau[pos] - x1.lo) * x2.size + tau[pos + 1] - x2.lo,)
                      + tau[pos + 2:])


def merge_sums(root: Expr, s: Expr, a: str, b: str) -> Expr | None:
    x1, x2 = s.iterator(a), s.iterator(b)
    if a == b or x1 not in s.sums or x2 not in s.sums:
        return None
    m = fresh(s, "m")()
    body = subst(s.body, {a: var(m).floordiv(x2.size) + x1.lo, b: var(m).mod(x2.size) + x2.lo})
    sums = tuple(it for it in s.sums if it.name not in (a, b)) + (Iter(m, 0, x1.size * x2.size),)
    return replace(root, s, Expr(s.loops, sums, body, s.reduce))


def inline(root: Expr, parent: Expr, child: Expr, shapes: Shapes) -> Expr | None:
    """Traversal merging: `child` substituted into `parent` at its reads."""
    if child not in scopes(parent):
        return None
    sites = [r for r in reads(parent.body) if r.src == child]
    ranges = parent.ranges()
    child_ranges = child.ranges()
    for r in sites:
        for i, it in zip(r.idx, child.loops):
            lo, hi = i.bounds(ranges)
            slo, shi = support(child.body, it.name, child_ranges, shapes)
            if not (it.lo <= lo and hi < it.hi) and not (it.lo <= slo and shi <= it.hi):
                return None
    if not child.sums:
        def put(r: Read):
            if r.src != child:
                return r
            return subst(child.body, {it.name: i for it, i in zip(child.loops, r.idx)})
        return replace(root, parent, parent.with_body(map_reads(parent.body, put)))
    if not (isinstance(parent.body, Read) and parent.body.src == child and parent.reduce == child.reduce == "sum"):
        return None
    name = fresh(parent, "u")
    renamed = {it.name: name() for it in child.sums}
    mapping = {it.name: i for it, i in zip(child.loops, parent.body.idx)}
    mapping.update({k: var(v) for k, v in renamed.items()})
    sums = parent.sums + tuple(Iter(renamed[it.name], it.lo, it.hi) for it in child.sums)
    return replace(root, parent, Expr(parent.loops, sums, subst(child.body, mapping), "sum"))


# -- normal form --------------------------------------------------------------------------------

_NORMAL: dict = {}  # (scope, is root, shapes) -> its normal form, shared by all searches
_NORMAL_LIMIT = 1 << 16


def normalize(root: Expr, shapes: Shapes) -> Expr:
    """The state's normal form (see the module docstring); equal states normalize equally."""
    key_shapes = tuple(tuple(s) for s in shapes)
    if len(_NORMAL) > _NORMAL_LIMIT:
        _NORMAL.clear()

    def visit(s: Expr, is_root: bool) -> Expr:
        key = (s, is_root, key_shapes)
        if key in _NORMAL:
            return _NORMAL[key]
        body = map_reads(s.body, lambda r: Read(visit(r.src, False), r.idx) if isinstance(r.src, Expr) else r)
        e = Expr(s.loops, s.sums, body, s.reduce)
        point = {it.name: Index(const=it.lo) for it in e.sums if it.size == 1}
        if point:
            e = Expr(e.loops, tuple(it for it in e.sums if it.size != 1), subst(e.body, point), e.reduce)
        ranges = e.ranges()
        e = e.with_body(map_indices(e.body, lambda i: i.simplify(ranges)))
        e = tighten(e, shapes, loops=not is_root)
        e = _unwrap(e)
        _NORMAL[key] = e
        return e

    return canonical(visit(root, True))[0]


def _unwrap(e: Expr) -> Expr:
    """A scope that only reads another at its own point, over the same ranges, is that scope."""
    b = e.body
    if e.sums or not isinstance(b, Read) or not isinstance(b.src, Expr):
        return e
    own = tuple(var(it.name) for it in e.loops)
    same = tuple((it.lo, it.hi) for it in b.src.loops) == tuple((it.lo, it.hi) for it in e.loops)
    return b.src if b.idx == own and same else e
