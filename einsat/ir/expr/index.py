"""Quasi-affine index expressions: the subscripts of EinNet's tensor algebra (§3).

An `Index` is a linear form over *atoms* with integer coefficients plus a constant,

    Index = c + Σ a_k · atom_k        atom = an iterator name | (e // q) | (e % q)

where `//` and `%` are floor division and (non-negative) modulo by a positive constant q, and
`e` is again an `Index`. The form is canonical: terms sorted, no zero coefficients, nested
forms simplified, so that equal expressions built in different orders compare (and hash) equal.

Besides arithmetic (`+`, `-`, `*` by an int, `floordiv`, `mod`) an index can be substituted
(`subst`), evaluated on NumPy arrays (`evaluate`), bounded over iterator ranges (`bounds`) and
simplified with those ranges (`simplify`: `(k·q + p) // k = q` when 0 ≤ p < k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

import numpy as np

Ranges = Mapping[str, tuple[int, int]]  # iterator -> [lo, hi)


@dataclass(frozen=True, slots=True)
class DivMod:
    """`arg // q` (kind "/") or `arg % q` (kind "%"), q > 0."""

    kind: str
    arg: "Index"
    q: int

    def key(self) -> str:
        return f"({self.kind} {self.arg.key()} {self.q})"


Atom = Union[str, DivMod]


def _atom_key(a: Atom) -> str:
    return a if isinstance(a, str) else a.key()


@dataclass(frozen=True, slots=True)
class Index:
    """c + Σ coef·atom, canonical (see the module docstring). Build with `var`, `const`, `+`."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def of(terms: Mapping[Atom, int] | list[tuple[Atom, int]], const: int = 0) -> "Index":
        if isinstance(terms, dict):
            acc = terms
        else:
            acc = {}
            for a, c in terms:
                acc[a] = acc.get(a, 0) + c
        items = [(a, int(c)) for a, c in acc.items() if c]
        if len(items) > 1:
            items.sort(key=lambda t: t[0] if isinstance(t[0], str) else t[0].key())
        return Index(tuple(items), int(const))

    def __add__(self, other: "Index | int") -> "Index":
        other = as_index(other)
        return Index.of(list(self.terms) + list(other.terms), self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Index":
        return self * -1

    def __sub__(self, other: "Index | int") -> "Index":
        return self + (-as_index(other))

    def __rsub__(self, other: int) -> "Index":
        return as_index(other) - self

    def __mul__(self, k: int) -> "Index":
        if not isinstance(k, (int, np.integer)):
            raise TypeError("an index is multiplied by integer constants only")
        return Index.of([(a, c * int(k)) for a, c in self.terms], self.const * int(k))

    __rmul__ = __mul__

    def floordiv(self, q: int) -> "Index":
        """Floor division by a positive constant: (q·a + b) // q = a + b // q, so the terms whose
        coefficients are multiples of q come out; the rest (constant in [0, q)) stays an atom."""
        whole, rest = self._split(_positive(q))
        return whole if rest.is_const else whole + Index.of([(DivMod("/", rest, q), 1)])

    def mod(self, q: int) -> "Index":
        """Non-negative modulo by a positive constant; coefficients are reduced mod q."""
        q = _positive(q)
        reduced = Index.of([(a, c % q) for a, c in self.terms], self.const % q)
        return reduced if reduced.is_const else Index.of([(DivMod("%", reduced, q), 1)])

    def _split(self, q: int) -> tuple["Index", "Index"]:
        """(a, b) with self = q·a + b: a holds the terms whose coefficients q divides (divided),
        b the others and the constant's remainder mod q."""
        whole = Index.of([(a, c // q) for a, c in self.terms if c % q == 0], self.const // q)
        rest = Index.of([(a, c) for a, c in self.terms if c % q], self.const % q)
        return whole, rest

    # -- queries -----------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def iterators(self) -> frozenset[str]:
        out: set[str] = set()
        for a, _ in self.terms:
            if isinstance(a, str):
                out.add(a)
            else:
                out |= a.arg.iterators()
        return frozenset(out)

    def coef(self, name: str) -> int:
        """The coefficient of iterator `name` as a plain term (0 if absent or only nested)."""
        return next((c for a, c in self.terms if a == name), 0)

    def is_affine(self) -> bool:
        """No floor division or modulo."""
        return all(isinstance(a, str) for a, _ in self.terms)

    def key(self) -> str:
        return " ".join(f"{c}*{_atom_key(a)}" for a, c in self.terms) + f" {self.const}"

    # -- transformation ----------------------------------------------------------------------
    def subst(self, mapping: Mapping[str, "Index"]) -> "Index":
        acc: dict[Atom, int] = {}
        const = self.const
        for a, c in self.terms:
            if isinstance(a, str):
                part = mapping.get(a)
                if part is None:
                    acc[a] = acc.get(a, 0) + c
                    continue
            else:
                inner = a.arg.subst(mapping)
                part = inner.floordiv(a.q) if a.kind == "/" else inner.mod(a.q)
            for b, d in part.terms:
                acc[b] = acc.get(b, 0) + c * d
            const += c * part.const
        return Index.of(acc, const)

    def without(self, name: str) -> "Index":
        """The index with iterator `name`'s plain term dropped."""
        return Index(tuple(t for t in self.terms if t[0] != name), self.const)

    def rename(self, names: Mapping[str, str]) -> "Index":
        return self.subst({k: var(v) for k, v in names.items()})

    def simplify(self, ranges: Ranges) -> "Index":
        """Rewrite div/mod atoms using iterator ranges: for e = q·a + b with b in [0, q),
        e // q = a and e % q = b (b's bounds come from `ranges`)."""
        out = Index(const=self.const)
        for a, c in self.terms:
            if isinstance(a, str):
                out = out + Index(((a, c),))
                continue
            inner = a.arg.simplify(ranges)
            out = out + _divmod_simplified(inner, a.kind, a.q, ranges) * c
        return out

    def bounds(self, ranges: Ranges) -> tuple[int, int]:
        """Inclusive (min, max) over the box of iterator ranges (exact for affine forms)."""
        lo = hi = self.const
        for a, c in self.terms:
            alo, ahi = _atom_bounds(a, ranges)
            lo += min(c * alo, c * ahi)
            hi += max(c * alo, c * ahi)
        return lo, hi

    def evaluate(self, values: Mapping[str, np.ndarray]):
        """The index on arrays of iterator values (NumPy broadcasting; floor semantics)."""
        out = self.const
        for a, c in self.terms:
            if isinstance(a, str):
                v = values[a]
            else:
                arg = a.arg.evaluate(values)
                v = np.floor_divide(arg, a.q) if a.kind == "/" else np.mod(arg, a.q)
            out = out + (v if c == 1 else v * c)
        return out

    def __repr__(self) -> str:
        return f"Index({format_index(self)})"


def _positive(q) -> int:
    q = int(q)
    if q <= 0:
        raise ValueError(f"index division and modulo take positive constants, not {q}")
    return q


def _atom_bounds(a: Atom, ranges: Ranges) -> tuple[int, int]:
    if isinstance(a, str):
        lo, hi = ranges[a]
        return lo, hi - 1
    lo, hi = a.arg.bounds(ranges)
    if a.kind == "/":
        return lo // a.q, hi // a.q
    if hi - lo < a.q and lo % a.q <= hi % a.q:
        return lo % a.q, hi % a.q
    return 0, a.q - 1


def _divmod_simplified(e: Index, kind: str, q: int, ranges: Ranges) -> Index:
    """e // q or e % q where e = q·a + b: a (or b) alone when b stays within [0, q) over `ranges`."""
    whole, rest = e._split(q)
    lo, hi = rest.bounds(ranges)
    if 0 <= lo and hi < q:
        return whole if kind == "/" else rest
    return e.floordiv(q) if kind == "/" else e.mod(q)


def var(name: str) -> Index:
    return Index(((name, 1),))


def const(c: int) -> Index:
    return Index(const=int(c))


def as_index(x: "Index | int | str") -> Index:
    if isinstance(x, Index):
        return x
    if isinstance(x, str):
        return var(x)
    if isinstance(x, (int, np.integer)):
        return const(int(x))
    raise TypeError(f"not an index: {x!r}")


def format_index(e: Index, names: Mapping[str, str] | None = None) -> str:
    """The s-expression of an index, iterators renamed by `names` (canonical: terms sorted by
    their printed form, the constant last)."""
    names = names or {}

    def atom(a: Atom) -> str:
        if isinstance(a, str):
            return names.get(a, a)
        return f"({a.kind} {format_index(a.arg, names)} {a.q})"

    parts = sorted(atom(a) if c == 1 else f"(* {c} {atom(a)})" for a, c in e.terms)
    if e.const or not parts:
        parts.append(str(e.const))
    return parts[0] if len(parts) == 1 else "(+ " + " ".join(parts) + ")"
