"""What an expression costs and which laws it obeys: FLOPs from its ranges, its arithmetic
intensity (EinNet §5: below `MEMORY_BOUND` an expression is an eOperator, above it a candidate
for a vendor kernel), multi-linearity (PET §3).
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from einsat.ir.expr.nodes import Call, Const, Expr, Guard, Read, inputs_used, products, reads, scopes, walk

MEMORY_BOUND = 4.0  # FLOPs per element moved: EinNet's threshold between eOperators and kernels


def point_flops(e: Expr) -> int:
    """FLOPs at one grid point: one per arithmetic op and guard in the body, plus one for the
    reduction when there are summations."""
    ops = sum(1 for t in walk(e.body) if isinstance(t, (Call, Guard)))
    return ops + (1 if e.sums else 0)


def own_flops(e: Expr) -> int:
    """The FLOPs of `e`'s own grid (its scopes not included)."""
    return prod(e.shape) * e.sum_points() * point_flops(e)


def flops(e: Expr) -> int:
    """Every grid point of `e` and of each scope it reads (each scope computed once)."""
    return own_flops(e) + sum(flops(s) for s in scopes(e))


def intensity(e: Expr, shapes: Sequence[Sequence[int]]) -> float:
    """FLOPs per element moved, each input and scope read once and the output written once
    (scopes excluded: one instantiated scope at a time)."""
    used = {r.src for r in reads(e.body) if isinstance(r.src, int)}
    moved = sum(prod(shapes[k]) for k in used) + sum(prod(s.shape) for s in scopes(e)) + prod(e.shape)
    return own_flops(e) / max(moved, 1)


def is_memory_bound(e: Expr, shapes: Sequence[Sequence[int]]) -> bool:
    return intensity(e, shapes) < MEMORY_BOUND


def is_multilinear(e: Expr) -> bool:
    """Linear in each input separately (or jointly, as add): a sum of products in which every
    product reads something and no input twice; scopes likewise; sum reductions only."""
    if e.reduce != "sum":
        return False
    terms = products(e.body)
    if terms is None:
        return False
    for factors in terms:
        seen: set[int] = set()
        read_any = False
        for f in factors:
            if isinstance(f, Const) or (isinstance(f, Guard) and isinstance(f.value, Const)):
                continue
            if not isinstance(f, Read):
                return False
            read_any = True
            srcs = {f.src} if isinstance(f.src, int) else set(inputs_used(f.src))
            if isinstance(f.src, Expr) and not is_multilinear(f.src):
                return False
            if seen & srcs:
                return False
            seen |= srcs
        if not read_any:
            return False
    return True
