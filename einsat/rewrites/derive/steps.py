"""The derivations one step away from a state: every rule at every scope where it applies.

Candidates come from the expression itself, as EinNet infers them (§4.1): summation splitting
that moves a set of window taps (summations meeting a traversal iterator in a subscript, `r` of
`h + r`) to an outer scope, unless the inner scope would be memory-bound (no operator could
compute it); substitution of every subscript that combines
two or more traversal iterators (`h + r`, `o − 2·i`), replacing each iterator with coefficient
±1; splitting an iterator by the coefficient it meets in a subscript (`i + D·j`: the dilation D,
`2·o + r`: the stride), and a short summation by 2 and 3 (a kernel split, relaxed where the body
is 0, as EinNet's conv 5×5 → 3×3; with the weights known, only a weight's taps); traversal
merging of every scope into its reader. Merging
iterators is left to operator matching, which flattens iterator groups itself. Every new state
is normalized (`rules.normalize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Collection, Iterator, Sequence

from einsat.ir.expr.index import Index
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.nodes import Expr, all_scopes, reads, scopes, walk
from einsat.ir.expr.nodes import Guard as GuardNode
from einsat.rewrites.derive.rules import Shapes, inline, normalize, split_loop, split_sum, split_summation, substitute

SMALL_SUM = 10            # summations this short may be split by 2 and 3 (kernel taps)
SMALL_FACTORS = (2, 3)


@dataclass(frozen=True)
class Step:
    """One derivation: the rule, where it applied (readable), and the new normalized state."""

    rule: str
    where: str
    expr: Expr


def subscripts(s: Expr) -> list[Index]:
    out: list[Index] = []
    for t in walk(s.body):
        if isinstance(t, GuardNode):
            out.append(t.idx)
    for r in reads(s.body):
        out.extend(r.idx)
    return out


def traversal_part(i: Index, loops: set[str]) -> Index:
    """The terms of `i` over traversal iterators (plain terms only; no constant)."""
    return Index.of([(a, c) for a, c in i.terms if isinstance(a, str) and a in loops])


def split_factors(s: Expr, name: str) -> set[int]:
    """Factors to split iterator `name` by: the coefficients it meets (as coefficient ±1)."""
    out = set()
    for i in subscripts(s):
        if abs(i.coef(name)) == 1:
            out |= {abs(c) for a, c in i.terms if a != name and isinstance(a, str) and abs(c) >= 2}
    return out


RULES = ("split-summation", "substitute", "split-loop", "split-sum", "inline")


def steps(root: Expr, shapes: Shapes, rules: Collection[str] = RULES,
          where: Callable[[Expr], bool] | None = None, normal: bool = True,
          const: frozenset[int] | None = None) -> Iterator[Step]:
    """Every state one derivation away from `root` (normalized unless `normal` is False;
    duplicates included), by the given rules, at the scopes `where` accepts (default: all).
    With `const` (the inputs that are weights), short summations are split by 2 and 3 only where
    they index a weight dim alone (a kernel's taps)."""
    for s in all_scopes(root):
        if where is not None and not where(s):
            continue
        loops = {it.name for it in s.loops}
        taps = [it.name for it in s.sums if it.name in window_taps(s)]
        for k in range(1, len(taps) + 1) if "split-summation" in rules else ():
            for outer in combinations(taps, k):
                if _inner_is_memory_bound(s, outer, shapes):
                    continue
                yield from _step("split-summation", f"Σ{{{','.join(outer)}}} outside", shapes,
                                 split_summation(root, s, outer), normal)
        seen = set()
        for i in subscripts(s) if "substitute" in rules else ():
            t = traversal_part(i, loops)
            if len(t.iterators()) < 2:
                continue
            for x in sorted(t.iterators()):
                if abs(t.coef(x)) == 1 and (x, t) not in seen:
                    seen.add((x, t))
                    yield from _step("substitute", f"{x} -> {t!r}", shapes, substitute(root, s, x, t), normal)
        for it in s.loops if "split-loop" in rules else ():
            for k in sorted(split_factors(s, it.name)):
                yield from _step("split-loop", f"{it.name} by {k}", shapes, split_loop(root, s, it.name, k), normal)
        kernel = kernel_taps(s, const)
        for it in s.sums if "split-sum" in rules else ():
            small = it.size <= SMALL_SUM and (kernel is None or it.name in kernel)
            factors = split_factors(s, it.name) | (set(SMALL_FACTORS) if small else set())
            for k in sorted(factors):
                yield from _step("split-sum", f"{it.name} by {k}", shapes,
                                 split_sum(root, s, it.name, k, shapes), normal)
        for child in scopes(s) if "inline" in rules else ():
            yield from _step("inline", "a scope into its reader", shapes, inline(root, s, child, shapes), normal)


def window_taps(s: Expr) -> set[str]:
    """Summation iterators that meet a traversal iterator in a subscript (the taps of a window:
    `h + r`); only they move to an outer scope in a summation split."""
    loops = {it.name for it in s.loops}
    out = set()
    for i in subscripts(s):
        names = i.iterators()
        if names & loops:
            out |= names - loops
    return out


def kernel_taps(s: Expr, const: frozenset[int] | None) -> set[str] | None:
    """Summations that alone index a dim of a weight (None: no weights known)."""
    if const is None:
        return None
    return {i.terms[0][0] for r in reads(s.body) if isinstance(r.src, int) and r.src in const
            for i in r.idx if len(i.terms) == 1 and i.terms[0][1] == 1 and isinstance(i.terms[0][0], str)}


def _inner_is_memory_bound(s: Expr, outer: Sequence[str], shapes: Shapes) -> bool:
    """A summation split whose inner scope is memory-bound cannot give an operator: skipped."""
    inner_sums = tuple(it for it in s.sums if it.name not in outer)
    loops = tuple(it for it in s.sums if it.name in outer) + s.loops
    return is_memory_bound(Expr(loops, inner_sums, s.body, s.reduce), shapes)


def _step(rule: str, where: str, shapes: Shapes, new: Expr | None, normal: bool) -> Iterator[Step]:
    if new is not None:
        yield Step(rule, where, normalize(new, shapes) if normal else new)
