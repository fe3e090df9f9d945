"""Symbolic dimensions: a size that is an integer or a polynomial over named symbols.

    batch, seq = sym("batch"), sym("sequence")
    d = batch * (seq + 1)                 # SymDim: batch*sequence + batch
    d == batch * seq + batch              # True: equal polynomials are equal (and hash equal)
    prove_eq(d, batch)                    # None: depends on the sizes (unknown, never guessed)
    prove_ge(d, 2)                        # True: every symbol is >= 1
    substitute(d, {"batch": 2, "sequence": 127})   # 256

A `SymDim` is immutable and canonical: integer coefficients over monomials, a monomial being a
sorted tuple of (atom, power); an atom is a symbol (`str`) or a floor division `FloorDiv(p, k)`
of a canonical polynomial by an integer k >= 2 (convolution and pooling output sizes). Two
expressions equal as polynomials have equal `SymDim`s with equal hashes; one whose polynomial is
a constant collapses to that `int`, so static shapes stay tuples of ints.

Every symbol stands for an integer >= 1. Comparisons that must hold for *every* value of the
symbols are three-valued: `prove_eq`, `prove_ge`, `prove_divisible` return True (holds for all
values), False (fails for all values) or None (depends, or not decided: the caller refuses what
needs the fact). The procedures are deliberately incomplete and always sound.

Pure Python, no dependency: the design and why not sympy are in docs/dynamic-shapes.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
from numbers import Integral
from typing import Union

from einsat.errors import ShapeError

Monomial = tuple  # ((atom, power), ...) sorted by the atom's sort key


class SymbolicDimError(ShapeError, TypeError):
    """A fact about a symbolic dim that holds for some sizes only (or is not shown for all): its
    integer value, an order or an equality. A `ShapeError`, so a shape rule that needs the fact
    refuses the symbolic type with a message naming the dims; a `TypeError` where Python asks
    for an int (`range(d)`, `np.zeros(d)`)."""


class FloorDiv:
    """floor(p / k) for a canonical polynomial p and an integer k >= 2: an atom of a monomial."""

    __slots__ = ("p", "k", "_key")

    def __init__(self, p: SymDim, k: int):
        self.p, self.k = p, k
        self._key = ("//", p._key, k)

    def __eq__(self, other):
        return isinstance(other, FloorDiv) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"({self.p}) // {self.k}"


def _atom_key(a) -> tuple:
    return (0, a) if isinstance(a, str) else (1, repr(a._key))


def _mono_key(m: Monomial) -> tuple:
    return tuple((_atom_key(a), p) for a, p in m)


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    powers: dict = {}
    for atom, p in (*a, *b):
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _make(terms: dict) -> Dim:
    """The canonical value of {monomial: coefficient}: an int when only the constant remains."""
    terms = {m: c for m, c in terms.items() if c != 0}
    if not terms:
        return 0
    if set(terms) == {()}:
        return terms[()]
    return SymDim(terms)


class SymDim:
    """A polynomial over symbols and floor divisions (see the module doc). Build with `sym`."""

    __slots__ = ("terms", "_key", "_hash")

    def __init__(self, terms: dict):
        self.terms = dict(sorted(terms.items(), key=lambda mc: _mono_key(mc[0])))
        self._key = tuple((_mono_key(m), c) for m, c in self.terms.items())
        self._hash = hash(self._key)

    # --- arithmetic: closed over Dim ---------------------------------------------------------
    def __add__(self, other) -> Dim:
        other = _terms(other)
        if other is None:
            return NotImplemented
        out = dict(self.terms)
        for m, c in other.items():
            out[m] = out.get(m, 0) + c
        return _make(out)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return _make({m: -c for m, c in self.terms.items()})

    def __sub__(self, other) -> Dim:
        other = _terms(other)
        if other is None:
            return NotImplemented
        return self + _make({m: -c for m, c in other.items()})

    def __rsub__(self, other) -> Dim:
        return (-self) + other

    def __mul__(self, other) -> Dim:
        other = _terms(other)
        if other is None:
            return NotImplemented
        out: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.items():
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return _make(out)

    __rmul__ = __mul__

    def __floordiv__(self, k) -> Dim:
        return floordiv(self, k)

    def __mod__(self, k) -> int:
        """`self % k` for an int k >= 1 where it is the same for all sizes (k divides every
        coefficient but the constant's); otherwise a SymbolicDimError."""
        if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise SymbolicDimError(f"{self} % {k}: a symbolic dimension has a remainder by a positive int only")
        if all(c % k == 0 for m, c in self.terms.items() if m):
            return self.terms.get((), 0) % k
        raise SymbolicDimError(f"{self} % {k} depends on the sizes of {', '.join(sorted(symbols_of(self)))}")

    def __rmod__(self, k):
        raise SymbolicDimError(f"{k} % {self}: a remainder by a symbolic dimension depends on its size")

    # --- identity ------------------------------------------------------------------------------
    def __eq__(self, other):
        """Equal as polynomials (structural, canonical). Not a proof about sizes for an int:
        `SymDim == 3` is False even where the symbols could make it 3 (use `prove_eq`)."""
        return isinstance(other, SymDim) and self._key == other._key

    def __hash__(self):
        return self._hash

    def __bool__(self):
        return True  # a SymDim is never the constant 0 (that collapses to the int)

    def __int__(self):
        raise SymbolicDimError(f"the dimension {self} is symbolic: it has no single integer value")

    # --- order: a proof for all sizes, or an error naming the dims (never a guess) -------------
    def _order(self, other, op: str, ge: bool | None) -> bool:
        if ge is None:
            raise SymbolicDimError(f"whether {self} {op} {other} depends on the sizes of "
                                   f"{', '.join(sorted(symbols_of(self) | symbols_of(other)))}")
        return ge

    def __ge__(self, other):
        if _terms(other) is None:
            return NotImplemented
        return self._order(other, ">=", prove_ge(self, other))

    def __gt__(self, other):
        if _terms(other) is None:
            return NotImplemented
        return self._order(other, ">", prove_ge(self, other + 1))

    def __le__(self, other):
        if _terms(other) is None:
            return NotImplemented
        return self._order(other, "<=", prove_ge(other, self))

    def __lt__(self, other):
        if _terms(other) is None:
            return NotImplemented
        return self._order(other, "<", prove_ge(other, self + 1))

    __index__ = __int__

    def __str__(self):
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda mc: not mc[0]):  # the constant last
            factors = [_atom_text(a) + (f"^{p}" if p > 1 else "") for a, p in m]
            if not factors:
                parts.append(str(c))
            elif c == 1:
                parts.append("*".join(factors))
            elif c == -1:
                parts.append("-" + "*".join(factors))
            else:
                parts.append(f"{c}*" + "*".join(factors))
        return " + ".join(parts).replace("+ -", "- ")

    __repr__ = __str__

    @property
    def symbols(self) -> frozenset[str]:
        return symbols_of(self)


Dim = Union[int, SymDim]


def _atom_text(a) -> str:
    return a if isinstance(a, str) else repr(a)


def _terms(x) -> dict | None:
    if isinstance(x, SymDim):
        return x.terms
    if isinstance(x, Integral) and not isinstance(x, bool):  # ints and NumPy's integers
        return {(): int(x)}
    return None


def sym(name: str) -> SymDim:
    """The symbol `name` (an ONNX `dim_param`), standing for an integer >= 1."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a symbol is a non-empty string, not {name!r}")
    return SymDim({((name, 1),): 1})


def is_symbolic(d) -> bool:
    return isinstance(d, SymDim)


def floordiv(p: Dim, k: int) -> Dim:
    """floor(p / k), k >= 1: exact where k divides every coefficient, else an atom."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"a dimension is divided by a positive integer only, not {k!r}")
    if not isinstance(p, SymDim):
        return int(p) // k
    if k == 1:
        return p
    if all(c % k == 0 for c in p.terms.values()):
        return _make({m: c // k for m, c in p.terms.items()})
    return SymDim({((FloorDiv(p, k), 1),): 1})


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """a / b where the division is exact for all sizes, or None when that is not shown: b an int
    dividing every coefficient of a, or b a monomial (c·m) dividing every term of a."""
    if not isinstance(b, SymDim):
        if b == 0:
            return None
        if not isinstance(a, SymDim):
            return a // b if a % b == 0 else None
        return _make({m: c // b for m, c in a.terms.items()}) if all(c % b == 0 for c in a.terms.values()) else None
    if not isinstance(a, SymDim):
        return None
    if len(b.terms) != 1:
        return _poly_div(a, b)
    (mb, cb), = b.terms.items()
    need = dict(mb)
    out: dict = {}
    for m, c in a.terms.items():
        have = dict(m)
        if c % cb or any(have.get(atom, 0) < p for atom, p in need.items()):
            return None
        rest = {atom: p - need.get(atom, 0) for atom, p in have.items() if p - need.get(atom, 0)}
        out[tuple(sorted(rest.items(), key=lambda ap: _atom_key(ap[0])))] = c // cb
    return _make(out)


def _poly_div(a: SymDim, b: SymDim) -> Dim | None:
    """a / b by long division on the leading monomial of b (graded order); the quotient is
    returned only when quotient * b == a exactly (so always sound)."""
    def order(m):
        return (sum(p for _, p in m), _mono_key(m))
    lead = max(b.terms, key=order)
    lead_b = SymDim({lead: b.terms[lead]})
    rest: Dim = a
    q: Dim = 0
    for _ in range(64):
        if not isinstance(rest, SymDim):
            break
        top = max(rest.terms, key=order)
        t = exact_div(SymDim({top: rest.terms[top]}), lead_b)
        if t is None:
            return None
        q = q + t
        rest = rest - t * b
    return q if rest == 0 and q * b == a else None


def symbols_of(d: Dim) -> frozenset[str]:
    if not isinstance(d, SymDim):
        return frozenset()
    out: set[str] = set()
    for m in d.terms:
        for a, _ in m:
            out |= {a} if isinstance(a, str) else symbols_of(a.p)
    return frozenset(out)


def substitute(d: Dim, sizes: Mapping[str, Dim]) -> Dim:
    """`d` with the symbols named in `sizes` replaced (ints or dims); the rest stay symbols."""
    if not isinstance(d, SymDim):
        return d
    total: Dim = 0
    for m, c in d.terms.items():
        term: Dim = c
        for a, p in m:
            v = (sizes[a] if a in sizes else sym(a)) if isinstance(a, str) else floordiv(substitute(a.p, sizes), a.k)
            for _ in range(p):
                term = term * v
        total = total + term
    return total


def evaluate(d: Dim, sizes: Mapping[str, int]) -> int:
    """The integer value of `d` at `sizes`, which must name every symbol of `d`."""
    v = substitute(d, sizes)
    if isinstance(v, SymDim):
        raise KeyError(f"no size for {sorted(symbols_of(v))} in {dict(sizes)}")
    return v


def _lower_bound(d: Dim) -> int | None:
    """A bound b with d >= b for every value of the symbols (each >= 1), or None when not shown.
    A monomial with a positive coefficient whose atoms are all >= 1 is >= its coefficient; a
    floor division of a polynomial bounded below by b >= 0 is >= b // k (it may be 0)."""
    if not isinstance(d, SymDim):
        return d
    bound = 0
    for m, c in d.terms.items():
        if not m:
            bound += c
            continue
        if c < 0:
            return None
        low = 1
        for a, p in m:
            if isinstance(a, str):
                continue
            b = _lower_bound(a.p)
            if b is None or b < 0:
                return None
            low *= (b // a.k) ** p
        bound += c * low
    return bound


def prove_ge(a: Dim, b: Dim) -> bool | None:
    """True: a >= b for all sizes; False: a < b for all sizes; None: not shown either way."""
    low = _lower_bound(a - b)
    if low is not None and low >= 0:
        return True
    high = _lower_bound(b - a)
    if high is not None and high >= 1:
        return False
    return None


def prove_eq(a: Dim, b: Dim) -> bool | None:
    """True: a == b for all sizes (equal polynomials); False: a != b for all sizes; None: depends."""
    diff = a - b
    if not isinstance(diff, SymDim):
        return diff == 0
    if prove_ge(a, b + 1) or prove_ge(b, a + 1):
        return False
    return None


def prove_divisible(a: Dim, k: int) -> bool | None:
    """True: k divides a for all sizes; False: for none; None: depends or not shown. Shown when k
    divides every coefficient (symbols and floor divisions are integers), or a is an int."""
    if k < 1:
        raise ValueError(f"divisibility by a positive integer only, not {k!r}")
    if not isinstance(a, SymDim):
        return a % k == 0
    if all(c % k == 0 for c in a.terms.values()):
        return True
    return None


def content(a: Dim) -> int:
    """The gcd of the coefficients: the largest integer that provably divides `a` for all sizes
    from its coefficients alone."""
    if not isinstance(a, SymDim):
        return abs(a)
    g = 0
    for c in a.terms.values():
        g = gcd(g, c)
    return g
