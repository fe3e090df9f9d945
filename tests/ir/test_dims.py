"""Symbolic dimensions (`einsat.ir.dims`): canonical, closed under arithmetic, and proofs that
are sound: a True or False is checked against evaluation at many sizes (#40)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.ir.dims import (
    SymDim,
    evaluate,
    floordiv,
    is_symbolic,
    prove_divisible,
    prove_eq,
    prove_ge,
    substitute,
    sym,
    symbols_of,
)

NAMES = ("batch", "sequence", "past")
SIZES = st.fixed_dictionaries({n: st.integers(1, 40) for n in NAMES})


@st.composite
def dims(draw, depth=3):
    """A dimension built by +, -, * and // from symbols and small ints, with its evaluator."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            name = draw(st.sampled_from(NAMES))
            return sym(name), (lambda s, n=name: s[n])
        c = draw(st.integers(-5, 9))
        return c, (lambda s, c=c: c)
    a, fa = draw(dims(depth - 1))
    op = draw(st.sampled_from(["+", "-", "*", "//"]))
    if op == "//":
        k = draw(st.integers(1, 6))
        return floordiv(a, k) if is_symbolic(a) else a // k, (lambda s: fa(s) // k)
    b, fb = draw(dims(depth - 1))
    fn = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    return fn(a, b), (lambda s: fn(fa(s), fb(s)))


@settings(max_examples=300, deadline=None)
@given(dims(), SIZES)
def test_arithmetic_evaluates_as_integers_do(d, sizes):
    value, reference = d
    assert evaluate(value, sizes) == reference(sizes)


@settings(max_examples=200, deadline=None)
@given(dims(), dims(), st.lists(SIZES, min_size=8, max_size=8))
def test_proofs_are_sound(a, b, samples):
    (x, fx), (y, fy) = a, b
    eq, ge = prove_eq(x, y), prove_ge(x, y)
    for s in samples:
        if eq is True:
            assert fx(s) == fy(s)
        if eq is False:
            assert fx(s) != fy(s)
        if ge is True:
            assert fx(s) >= fy(s)
        if ge is False:
            assert fx(s) < fy(s)
    for k in (2, 3, 8):
        if prove_divisible(x, k):
            assert all(fx(s) % k == 0 for s in samples)


def test_equal_polynomials_are_equal_and_hash_equal():
    b, s = sym("batch"), sym("sequence")
    one, two = b * (s + 1), s * b + b
    assert one == two and hash(one) == hash(two) and str(one) == str(two)
    assert len({one, two, b * s + b}) == 1
    assert (b + s) - s == b and isinstance((b + s) - s, SymDim)
    assert b - b == 0 and type(b - b) is int  # a constant collapses to its int
    assert b * 0 == 0 and b + 0 == b
    assert b != s and b * 2 != b + 1


def test_floor_division_is_exact_where_the_coefficients_allow_it():
    b, s = sym("batch"), sym("sequence")
    assert floordiv(4 * b + 8 * s, 4) == b + 2 * s
    half = floordiv(s + 1, 2)
    assert is_symbolic(half) and symbols_of(half) == {"sequence"}
    assert [evaluate(half, {"sequence": n}) for n in (1, 2, 3, 4)] == [1, 1, 2, 2]
    assert floordiv(s, 1) == s and floordiv(7, 2) == 3
    with pytest.raises(ValueError):
        floordiv(s, 0)


def test_proofs_refuse_what_depends_on_the_sizes():
    b, s = sym("batch"), sym("sequence")
    assert prove_eq(b, s) is None              # equal for some sizes only
    assert prove_eq(b + 1, b) is False         # never equal
    assert prove_eq(b * s, s * b) is True
    assert prove_ge(b * s, 1) is True          # every symbol is >= 1
    assert prove_ge(b, 2) is None
    assert prove_ge(b, b + 1) is False
    assert prove_divisible(8 * b, 8) is True
    assert prove_divisible(b, 8) is None       # a guard needing batch % 8 == 0 is refused
    assert prove_divisible(8 * b + 4, 8) is None
    assert prove_divisible(24, 8) is True and prove_divisible(20, 8) is False


def test_substitution_keeps_the_symbols_it_is_not_given():
    b, s = sym("batch"), sym("sequence")
    d = b * (s + 1)
    assert substitute(d, {"sequence": 127}) == 128 * b
    assert substitute(d, {"sequence": 127, "batch": 2}) == 256
    assert substitute(d, {"batch": s}) == s * s + s
    with pytest.raises(KeyError, match="batch"):
        evaluate(d, {"sequence": 3})


def test_a_symbolic_dimension_has_no_single_integer_value():
    s = sym("sequence")
    with pytest.raises(TypeError, match="symbolic"):
        int(s)
    with pytest.raises(TypeError):
        np.zeros((s,))
    assert (s + np.int64(2)) == s + 2  # NumPy integers combine as ints do
