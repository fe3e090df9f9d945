"""The canonical printer of expressions (EinNet's fingerprint, §6.2) and its parser.

    (E (L 0:2 0:8 -1:9) (S 0:3 0:3) (mul (T 0 i0 s0 (+ i2 s1)) (T 1 i1 s0 s1)))

`E` is one scope: `L` its traversal ranges, `S` (or `M` for a max reduction) its summation
ranges, then the body: `(T src idx...)` a read (src an input position or a nested `(E ...)`),
`(fn args...)` an element-wise op, `(? idx lo:hi value)` a guard, a float a constant. Indices are
ints, iterators, `(+ ...)`, `(* c e)`, `(/ e q)`, `(% e q)`.

The printer is canonical, so that the four redundancies of §6.2 print one string:
- iterator renaming: traversal iterators are named by position (`i0`, `i1`, ...), summation
  iterators `s0`, `s1`, ... in a canonical order;
- summation reordering: that order sorts summations by range, then by the body as seen from the
  iterator alone (ties between symmetric iterators are broken by the smallest whole print);
- operand reordering: operands of commutative ops and the terms of indices are sorted;
- tensor renaming: a scope prints as its expression, so equal scopes print equally.

`canonical(e)` returns the renamed expression and its print; `parse(text)` reads a print back
(`parse(fingerprint(e))` is `canonical(e)[0]`).
"""

from __future__ import annotations

import itertools
import re
from typing import Mapping

from einsat.errors import AttributeValueError
from einsat.ir.expr.index import Index, as_index, format_index, var
from einsat.ir.expr.nodes import BINARY, COMMUTATIVE, UNARY, Body, Call, Const, Expr, Guard, Iter, Read

MAX_TIE_PERMUTATIONS = 120
_CACHE: dict[Expr, tuple[Expr, str]] = {}
_CACHE_LIMIT = 1 << 16


def fingerprint(e: Expr) -> str:
    return canonical(e)[1]


def canonical(e: Expr) -> tuple[Expr, str]:
    """(e with canonical iterator names and summation order, its canonical print)."""
    hit = _CACHE.get(e)
    if hit is not None:
        return hit
    out = _canonical(e)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[e] = out
    _CACHE[out[0]] = out
    return out


def _canonical(e: Expr) -> tuple[Expr, str]:
    body = _canonical_scopes(e.body)
    names = {it.name: f"i{k}" for k, it in enumerate(e.loops)}
    order = _sum_order(e, body, names)
    names.update({it.name: f"s{k}" for k, it in enumerate(order)})
    loops = tuple(Iter(names[it.name], it.lo, it.hi) for it in e.loops)
    sums = tuple(Iter(names[it.name], it.lo, it.hi) for it in order)
    renamed = Expr(loops, sums, _rename(body, names), e.reduce)
    return renamed, _print_expr(renamed)


def _canonical_scopes(body: Body) -> Body:
    if isinstance(body, Read):
        src = canonical(body.src)[0] if isinstance(body.src, Expr) else body.src
        return Read(src, body.idx)
    if isinstance(body, Call):
        return Call(body.fn, tuple(_canonical_scopes(a) for a in body.args))
    if isinstance(body, Guard):
        return Guard(body.idx, body.lo, body.hi, _canonical_scopes(body.value))
    return body


def _sum_order(e: Expr, body: Body, loop_names: dict[str, str]) -> list[Iter]:
    if len(e.sums) <= 1:
        return list(e.sums)
    keys = {}
    for it in e.sums:
        names = dict(loop_names)
        names.update({o.name: "_" for o in e.sums})
        names[it.name] = "@"
        keys[it.name] = (it.lo, it.hi, print_body(body, names))
    order = sorted(e.sums, key=lambda it: keys[it.name])
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda it: keys[it.name])]
    ties = [g for g in groups if len(g) > 1]
    count = 1
    for g in ties:
        for k in range(2, len(g) + 1):
            count *= k
    if not ties or count > MAX_TIE_PERMUTATIONS:
        return order
    best = None
    for choice in itertools.product(*(itertools.permutations(g) if len(g) > 1 else [tuple(g)] for g in groups)):
        cand = [it for g in choice for it in g]
        names = dict(loop_names)
        names.update({it.name: f"s{k}" for k, it in enumerate(cand)})
        text = print_body(body, names)
        if best is None or text < best[0]:
            best = (text, cand)
    return best[1]


def _rename(body: Body, names: Mapping[str, str]) -> Body:
    table = {k: var(v) for k, v in names.items()}
    if isinstance(body, Read):
        return Read(body.src, tuple(i.subst(table) for i in body.idx))
    if isinstance(body, Call):
        return Call(body.fn, tuple(_rename(a, names) for a in body.args))
    if isinstance(body, Guard):
        return Guard(body.idx.subst(table), body.lo, body.hi, _rename(body.value, names))
    return body


# -- printing -----------------------------------------------------------------------------------

def _ranges(its) -> str:
    return " ".join(f"{it.lo}:{it.hi}" for it in its)


def _print_expr(e: Expr) -> str:
    """The print of an expression already in canonical form."""
    loops = f"(L {_ranges(e.loops)})" if e.loops else "(L)"
    kind = "S" if e.reduce == "sum" else "M"
    sums = f"({kind} {_ranges(e.sums)})" if e.sums else f"({kind})"
    return f"(E {loops} {sums} {print_body(e.body, {})})"


def print_body(body: Body, names: Mapping[str, str]) -> str:
    if isinstance(body, Read):
        src = str(body.src) if isinstance(body.src, int) else canonical(body.src)[1]
        idx = " ".join(format_index(i, names) for i in body.idx)
        return f"(T {src}{' ' + idx if idx else ''})"
    if isinstance(body, Const):
        return repr(float(body.value))
    if isinstance(body, Guard):
        return f"(? {format_index(body.idx, names)} {body.lo}:{body.hi} {print_body(body.value, names)})"
    args = [print_body(a, names) for a in body.args]
    if body.fn in COMMUTATIVE:
        args.sort()
    return f"({body.fn} {' '.join(args)})"


# -- parsing ------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[()]|[^\s()]+")


def parse(text: str) -> Expr:
    """An expression from a print (iterators named `i<k>`, `s<k>` by position in the `L` and `S`
    lists, in any order of summations and operands); raises AttributeValueError naming what is
    wrong."""
    tokens = _TOKEN.findall(text)
    pos = 0

    def fail(why: str):
        raise AttributeValueError(f"expression {text[:120]!r}: {why} (at token {pos})")

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            fail("ends early")
        pos += 1
        return tokens[pos - 1]

    def expect(tok: str) -> None:
        if take() != tok:
            fail(f"expected {tok!r}")

    def ranges(head: str) -> list[tuple[int, int]]:
        expect("(")
        got = take()
        if got not in head:
            fail(f"expected ({head[0]} ...)")
        out = []
        while tokens[pos] != ")":
            tok = take()
            m = re.fullmatch(r"(-?\d+):(-?\d+)", tok)
            if not m:
                fail(f"bad range {tok!r}")
            out.append((int(m.group(1)), int(m.group(2))))
        take()
        return out if head != "SM" else (got, out)

    def expr() -> Expr:
        expect("(")
        if take() != "E":
            fail("expected (E ...)")
        loop_ranges = ranges("L")
        kind, sum_ranges = ranges("SM")
        loops = [Iter(f"i{k}", lo, hi) for k, (lo, hi) in enumerate(loop_ranges)]
        sums = [Iter(f"s{k}", lo, hi) for k, (lo, hi) in enumerate(sum_ranges)]
        known = {it.name for it in loops + sums}
        b = body(known)
        expect(")")
        return Expr(tuple(loops), tuple(sums), b, "sum" if kind == "S" else "max")

    def body(known) -> Body:
        if tokens[pos] != "(":
            tok = take()
            try:
                return Const(float(tok))
            except ValueError:
                fail(f"bad constant {tok!r}")
        if pos + 1 < len(tokens) and tokens[pos + 1] == "E":
            fail("a scope must be read: (T (E ...) idx...)")
        take()
        head = take()
        if head == "T":
            if tokens[pos] == "(":
                src = expr()
            else:
                tok = take()
                if not re.fullmatch(r"\d+", tok):
                    fail(f"bad tensor {tok!r}")
                src = int(tok)
            idx = []
            while tokens[pos] != ")":
                idx.append(index(known))
            take()
            return Read(src, tuple(idx))
        if head == "?":
            i = index(known)
            m = re.fullmatch(r"(-?\d+):(-?\d+)", take())
            if not m:
                fail("bad guard range")
            value = body(known)
            expect(")")
            return Guard(i, int(m.group(1)), int(m.group(2)), value)
        if head not in BINARY | UNARY:
            fail(f"unknown function {head!r}")
        args = []
        while tokens[pos] != ")":
            args.append(body(known))
        take()
        if len(args) != (2 if head in BINARY else 1):
            fail(f"{head} takes {2 if head in BINARY else 1} arguments, got {len(args)}")
        return Call(head, tuple(args))

    def index(known) -> Index:
        tok = take()
        if tok != "(":
            if re.fullmatch(r"-?\d+", tok):
                return as_index(int(tok))
            if tok not in known:
                fail(f"unknown iterator {tok!r}")
            return var(tok)
        op = take()
        if op == "+":
            out = Index()
            while tokens[pos] != ")":
                out = out + index(known)
            take()
            return out
        if op == "*":
            c = int(take())
            out = index(known) * c
        elif op in ("/", "%"):
            arg = index(known)
            q = int(take())
            if q <= 0:
                fail(f"division by {q}")
            out = arg.floordiv(q) if op == "/" else arg.mod(q)
        else:
            fail(f"unknown index operator {op!r}")
        expect(")")
        return out

    try:
        e = expr()
    except IndexError:
        raise AttributeValueError(f"expression {text[:120]!r} ends early") from None
    except ValueError as err:
        raise AttributeValueError(f"expression {text[:120]!r} does not parse: {err}") from None
    if pos != len(tokens):
        fail("has trailing tokens")
    return e
