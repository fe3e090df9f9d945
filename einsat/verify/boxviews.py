"""Digit views of box grids: strided boxes that reshapes and transposes create, kept exact.

Reordering pixels by parity (PET's Figure 3: [H] -> [H/2, 2] -> transpose -> [2, H/2] and back)
gives boxes such as "the even rows 2, 4, ..., 52": one box, but not an interval. Read as split
points of [H], such a partition is split at every row (one box per pixel: 3,136 boxes for a
56x56 plane, each tested at its own positions). A *view* keeps it exact instead.

A `Grid` sees each dimension of a tensor as the row-major product of *digits*: a dim of size
H viewed as (H/2, 2) has the coordinates (i, j), position 2i + j. The grid holds split points
per digit, and its boxes are the cells of the digit-shaped tensor (the tensor reshaped to its
digits). "The even rows 2..52" is the cell i ∈ [1, 27), j ∈ [0, 1). The contract of `boxes.py`
holds in digit coordinates: inside one cell, every element reads each input at positions that
move affinely with its digit coordinates u and stay inside one input box. It composes: a
position is linear in the digits (p = Σ u_k·stride_k), so a read affine in p is affine in u, and
an input cell is itself a box in its own digits.

Only the ops that merely relabel positions keep views: a reshape regroups the digits (a flat
index is the same in every grouping), a transpose permutes whole dims with their digits. Every
other op sees `Grid.plain()`: the view merged back into split points per dim, exactly what
merging dims did before views (`reshape_splits`: split at every block of the innermost digit and
at its splits), so those ops' rules are unchanged. Where a reshape's dims do not line up with
the digits, the view is merged into plain splits first (the old rule, sound).

Refining is always sound: a digit split into finer digits (`_digits` on its split points) or a
split added anywhere only cuts boxes into smaller boxes, each still inside one box. The
corrector brings both programs' output grids to one common view per dim (`common_view`, the
coarsest digits refining both; plain where there is none), tests each cell of the union of
their splits, and reports regions on `plain()` of that grid, whose cells each lie inside one
cell of the view.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from einsat.verify.splits import Splits, _digits, norm, reshape_splits


@dataclass(frozen=True)
class Grid:
    """Boxes of a tensor: dim d is the row-major product of digits `dims[d]`; `splits` holds the
    interior split points of every digit, digits in order."""

    dims: tuple[tuple[int, ...], ...]
    splits: Splits

    @staticmethod
    def of(shape, splits: Splits) -> Grid:
        """The plain grid: each dim one digit."""
        return Grid(tuple((int(d),) for d in shape), tuple(tuple(s) for s in splits))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(prod(ds) for ds in self.dims)

    @property
    def digits(self) -> tuple[int, ...]:
        return tuple(d for ds in self.dims for d in ds)

    def per_dim(self) -> list[Splits]:
        """The digits' splits, grouped by dim."""
        out, k = [], 0
        for ds in self.dims:
            out.append(self.splits[k:k + len(ds)])
            k += len(ds)
        return out

    def plain(self) -> Splits:
        """Split points per dim: each multi-digit dim merged (`reshape_splits`)."""
        return tuple(s[0] if len(ds) == 1 else reshape_splits(ds, (prod(ds),), s)[0]
                     for ds, s in zip(self.dims, self.per_dim()))


def permute(grid: Grid, perm) -> Grid:
    """A transpose: whole dims, with their digits, change places."""
    per = grid.per_dim()
    return Grid(tuple(grid.dims[p] for p in perm), tuple(s for p in perm for s in per[p]))


def regroup(grid: Grid, ys) -> Grid | None:
    """A reshape to `ys`: consecutive digits grouped into the new dims, a digit cut in two where a
    new dim's size ends inside it; None where the sizes do not line up with the digits."""
    if 0 in grid.shape or 0 in ys:
        return None
    todo = [(d, set(s)) for d, s in zip(grid.digits, grid.splits) if d != 1]
    dims, splits, k = [], [], 0
    for y in ys:
        group, size = [], 1
        while size < y:
            if k >= len(todo):
                return None
            d, s = todo[k]
            if y % (size * d) == 0:                   # the whole digit
                group.append((d, s))
                size *= d
                k += 1
                continue
            if y % size or d % (y // size):
                return None
            a = y // size                             # digit d = (a, d / a): keep a, leave d / a
            parts: list[set] = [set(), set()]
            for p in s:
                _digits(p, [a, d // a], parts, 0)
            group.append((a, parts[0]))
            todo[k] = (d // a, parts[1])
            size = y
        dims.append(tuple(d for d, _ in group) or (1,))
        splits += [s for _, s in group] or [set()]
    if k != len(todo):
        return None
    return Grid(tuple(dims), norm(splits, [d for ds in dims for d in ds]))


def _bounds(ds) -> set[int]:
    """Strides of a dim's digits from the innermost: (28, 2) -> {1, 2, 56}."""
    out, c = {1}, 1
    for d in reversed(ds):
        c *= d
        out.add(c)
    return out


def common_view(a: Grid, b: Grid) -> tuple[tuple[int, ...], ...]:
    """Per dim, the coarsest digits that refine both grids' digits (one digit where none does)."""
    out = []
    for da, db in zip(a.dims, b.dims):
        bounds = sorted(_bounds(da) | _bounds(db))
        if all(hi % lo == 0 for lo, hi in zip(bounds, bounds[1:])):
            out.append(tuple(hi // lo for lo, hi in zip(bounds, bounds[1:]))[::-1] or (1,))
        else:
            out.append((prod(da),))
    return tuple(out)


def refine(grid: Grid, view) -> Grid:
    """`grid` seen in the digits `view` (from `common_view`): finer or plain, never coarser."""
    splits: list[set] = []
    for ds, ss, vs in zip(grid.dims, grid.per_dim(), view):
        if ds == tuple(vs):
            splits += [set(s) for s in ss]
            continue
        if not _bounds(ds) <= _bounds(vs):            # not a refinement of this dim: merge it first
            ds, ss = (prod(ds),), reshape_splits(ds, (prod(ds),), ss)
        k = 0
        for d, s in zip(ds, ss):                      # each digit d = the next few view digits
            if d == 1:
                continue
            group, size = [], 1
            while size < d:
                group.append(vs[k])
                size *= vs[k]
                k += 1
            parts: list[set] = [set() for _ in group]
            for p in s:
                _digits(p, group, parts, 0)
            splits += parts
        splits += [set() for _ in range(len(vs) - k)]  # a dim of size 1: its one digit
    return Grid(tuple(tuple(v) for v in view), norm(splits, [d for vs in view for d in vs]))


def union(a: Grid, b: Grid) -> Grid:
    """The cells of both (same view): every split of either."""
    return Grid(a.dims, tuple(tuple(sorted(set(x) | set(y))) for x, y in zip(a.splits, b.splits)))


def meet(a: Grid, b: Grid) -> Grid:
    """Cells inside one box of each grid: both in their common view, or both plain where that
    has no more cells (refining a split that falls inside a digit can cost more than it saves)."""
    view = common_view(a, b)
    viewed = union(refine(a, view), refine(b, view))
    plain = union(Grid.of(a.shape, a.plain()), Grid.of(b.shape, b.plain()))
    return viewed if count(viewed) < count(plain) else plain


def count(grid: Grid) -> int:
    return prod(len(s) + 1 for s in grid.splits)
