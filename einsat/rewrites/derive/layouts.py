"""Operand and result layouts of a matched operator (EinNet §6.1, eqs. 2–3).

A matched operator reads each operand in its own layout: `Layout(src, idx, axes)` says that the
operator's input is the tensor `src` read at subscripts `idx`, arranged along `axes`; an axis
is a group of the scope's iterators flattened row-major (`Group`), or one new iterator over a
range whose value replaces a subscript (`Free`: a convolution's spatial dim as it is, a band
product's row). When every subscript is one iterator lined up with its dim, the layout is a
transpose and a reshape of the tensor (a view when nothing moves); otherwise it is an
eOperator, L_{axes} src[idx] (EinNet's input-layout eOperators), a constant one when `src` is a
weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from einsat.ir.expr.index import Index, var
from einsat.ir.expr.nodes import Expr, Iter, Read


@dataclass(frozen=True)
class Group:
    """An axis holding these iterators, flattened row-major."""

    iters: tuple[Iter, ...]

    @property
    def size(self) -> int:
        return prod(it.size for it in self.iters)


@dataclass(frozen=True)
class Free:
    """An axis of a new iterator over [lo, hi) that stands for subscript `dim` (`index` replaces
    it, in terms of the new iterator and the scope's)."""

    it: Iter
    dim: int
    index: Index

    @property
    def size(self) -> int:
        return self.it.size


Axis = Group | Free


@dataclass(frozen=True)
class Layout:
    src: int
    idx: tuple[Index, ...]
    axes: tuple[Axis, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    def iterators(self) -> tuple[Iter, ...]:
        return tuple(it for a in self.axes for it in (a.iters if isinstance(a, Group) else (a.it,)))

    def subscripts(self) -> tuple[Index, ...]:
        idx = list(self.idx)
        for a in self.axes:
            if isinstance(a, Free):
                idx[a.dim] = a.index
        return tuple(idx)

    def permutation(self, shape: Sequence[int]) -> tuple[int, ...] | None:
        """The transpose of `src` that lines its dims up with the axes' iterators, when every
        subscript is one distinct iterator whose range is exactly its dim (None otherwise)."""
        its = self.iterators()
        names = [it.name for it in its]
        dims = {}
        for d, (i, n) in enumerate(zip(self.subscripts(), shape)):
            if len(i.terms) != 1 or i.terms[0][1] != 1 or not isinstance(i.terms[0][0], str):
                return None
            name = i.terms[0][0]
            if name not in names or name in dims:
                return None
            it = its[names.index(name)]
            if it.lo + i.const != 0 or it.size != n:
                return None
            dims[name] = d
        if len(dims) != len(names):
            return None
        return tuple(dims[n] for n in names)

    def expression(self) -> Expr:
        """The layout as an eOperator over input 0 (the tensor `src`)."""
        return Expr(self.iterators(), (), Read(0, self.subscripts()))


def group(iters: Sequence[Iter]) -> Group:
    return Group(tuple(iters))


def free(name: str, lo: int, hi: int, dim: int, index: Index | None = None) -> Free:
    return Free(Iter(name, lo, hi), dim, var(name) if index is None else index)
