"""Tensor algebra expressions (EinNet eq. 1, §3): traversals, summations, scopes, padding.

    Expr(loops, sums, body)  =  L_{loops} Σ_{sums} body

- `loops` are the traversal iterators: one output dim each, in order; an iterator ranging over
  [lo, hi) gives a dim of size hi - lo, and output element p holds the value at lo + p;
- `sums` are the summation iterators (their order is immaterial); `reduce="max"` takes the
  maximum over them instead (max pooling);
- `body` is a scalar term: `Read(src, idx)` of an input tensor (`src` an int: the expression's
  k-th input) or of a *scope* (`src` another `Expr`, whose result is instantiated as a tensor),
  at quasi-affine `Index` subscripts; `Const`; `Call` of an element-wise registry op by name
  (`add`, `mul`, `relu`, ...); `Guard(idx, lo, hi, value)`: value where lo <= idx < hi, else 0.

Padding: a read outside its tensor is 0. A scope is read in its own iterator coordinates: element
`x` of a scope whose iterator ranges over [lo, hi) is its output element x - lo, and 0 outside
[lo, hi). Scopes are closed: a body uses only its own iterators.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Callable, Iterator, Mapping, Union

from einsat.ir.expr.index import Index

COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum"})
BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "pow"})
UNARY = frozenset({"relu", "sigmoid", "tanh", "exp", "log", "sqrt", "neg", "abs", "erf", "floor", "gelu"})
LINEAR = frozenset({"add", "sub", "neg"})  # linear in their arguments jointly (mul: in each one)


@dataclass(frozen=True, slots=True)
class Iter:
    """An iterator `name` ranging over [lo, hi)."""

    name: str
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return max(self.hi - self.lo, 0)


@dataclass(frozen=True)
class Read:
    src: Union[int, "Expr"]
    idx: tuple[Index, ...]


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple["Body", ...]


@dataclass(frozen=True)
class Guard:
    idx: Index
    lo: int
    hi: int
    value: "Body"


Body = Union[Read, Const, Call, Guard]


@dataclass(frozen=True)
class Expr:
    loops: tuple[Iter, ...]
    sums: tuple[Iter, ...]
    body: Body
    reduce: str = "sum"
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "loops", tuple(self.loops))
        object.__setattr__(self, "sums", tuple(self.sums))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(it.size for it in self.loops)

    @property
    def lows(self) -> tuple[int, ...]:
        return tuple(it.lo for it in self.loops)

    def ranges(self) -> dict[str, tuple[int, int]]:
        return {it.name: (it.lo, it.hi) for it in self.loops + self.sums}

    def iterator(self, name: str) -> Iter:
        return next(it for it in self.loops + self.sums if it.name == name)

    def with_body(self, body: Body) -> "Expr":
        return replace(self, body=body)

    def sum_points(self) -> int:
        return prod(it.size for it in self.sums)

    def __hash__(self):
        if not self._hash:
            object.__setattr__(self, "_hash", hash((self.loops, self.sums, self.body, self.reduce)) or 1)
        return self._hash


# -- walking and rebuilding bodies --------------------------------------------------------------

def walk(body: Body) -> Iterator[Body]:
    """Every term of a body, parents before children (scopes not entered)."""
    yield body
    if isinstance(body, Call):
        for a in body.args:
            yield from walk(a)
    elif isinstance(body, Guard):
        yield from walk(body.value)


def reads(body: Body) -> list[Read]:
    return [t for t in walk(body) if isinstance(t, Read)]


def scopes(e: Expr) -> list[Expr]:
    """The scopes `e` reads directly (each once, in order of first use)."""
    out: list[Expr] = []
    for r in reads(e.body):
        if isinstance(r.src, Expr) and r.src not in out:
            out.append(r.src)
    return out


def map_indices(body: Body, fn: Callable[[Index], Index]) -> Body:
    """The body with every subscript (and guard index) replaced by `fn(index)`."""
    if isinstance(body, Read):
        return Read(body.src, tuple(fn(i) for i in body.idx))
    if isinstance(body, Call):
        return Call(body.fn, tuple(map_indices(a, fn) for a in body.args))
    if isinstance(body, Guard):
        return Guard(fn(body.idx), body.lo, body.hi, map_indices(body.value, fn))
    return body


def map_reads(body: Body, fn: Callable[[Read], Body]) -> Body:
    """The body with every read replaced by `fn(read)`."""
    if isinstance(body, Read):
        return fn(body)
    if isinstance(body, Call):
        return Call(body.fn, tuple(map_reads(a, fn) for a in body.args))
    if isinstance(body, Guard):
        return Guard(body.idx, body.lo, body.hi, map_reads(body.value, fn))
    return body


def subst(body: Body, mapping: Mapping[str, Index]) -> Body:
    return map_indices(body, lambda i: i.subst(mapping))


def body_iterators(body: Body) -> frozenset[str]:
    out: set[str] = set()
    for t in walk(body):
        if isinstance(t, Read):
            for i in t.idx:
                out |= i.iterators()
        elif isinstance(t, Guard):
            out |= t.idx.iterators()
    return frozenset(out)


def inputs_used(e: Expr) -> frozenset[int]:
    """The input positions `e` and its scopes read."""
    out: set[int] = set()
    for r in reads(e.body):
        out |= {r.src} if isinstance(r.src, int) else inputs_used(r.src)
    return frozenset(out)


def products(body: Body) -> list[list[Body]] | None:
    """The body as a sum of products of factors (reads, constants, guarded factors):
    [[f11, f12], [f21], ...], or None when it is not one (a non-linear function, a division)."""
    if isinstance(body, (Read, Const)):
        return [[body]]
    if isinstance(body, Guard):
        inner = products(body.value)
        return None if inner is None else [[Guard(body.idx, body.lo, body.hi, Const(1.0))] + p for p in inner]
    if body.fn == "add":
        parts = [products(a) for a in body.args]
        return None if any(p is None for p in parts) else [p for ps in parts for p in ps]
    if body.fn == "sub":
        a, b = (products(x) for x in body.args)
        return None if a is None or b is None else a + [[Const(-1.0)] + p for p in b]
    if body.fn == "neg":
        a = products(body.args[0])
        return None if a is None else [[Const(-1.0)] + p for p in a]
    if body.fn == "mul":
        a, b = (products(x) for x in body.args)
        return None if a is None or b is None else [p + q for p in a for q in b]
    return None


def mul(*factors: Body) -> Body:
    out = factors[0]
    for f in factors[1:]:
        out = Call("mul", (out, f))
    return out


def add(*terms: Body) -> Body:
    out = terms[0]
    for t in terms[1:]:
        out = Call("add", (out, t))
    return out


def relabel_inputs(e: Expr, mapping: Mapping[int, int]) -> Expr:
    """`e` reading input `mapping[k]` wherever it read input k (scopes too)."""
    def read(r: Read) -> Body:
        src = mapping[r.src] if isinstance(r.src, int) else relabel_inputs(r.src, mapping)
        return Read(src, r.idx)
    return e.with_body(map_reads(e.body, read))


def all_scopes(e: Expr) -> list[Expr]:
    """`e` and every scope below it, each once, children before parents."""
    out: list[Expr] = []

    def visit(s: Expr) -> None:
        for c in scopes(s):
            visit(c)
        if s not in out:
            out.append(s)
    visit(e)
    return out


def replace_reads_of(e: Expr, old: Expr, fn: Callable[[Read], Body]) -> Expr:
    """`e` with every read of the scope `old`, at any depth, replaced by `fn(read)`."""
    def read(r: Read) -> Body:
        if isinstance(r.src, int):
            return r
        if r.src == old:
            return fn(r)
        return Read(replace_reads_of(r.src, old, fn), r.idx)
    return e.with_body(map_reads(e.body, read))
