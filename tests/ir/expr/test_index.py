"""Quasi-affine indices: canonical forms, floor semantics, bounds and range-aware simplification."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from einsat.ir.expr.index import Index, const, format_index, var

x, y, z = var("x"), var("y"), var("z")


def test_equal_forms_built_in_different_orders_are_equal():
    assert x + y * 2 + 3 == 3 + y * 2 + x
    assert (x + y) - y == x
    assert hash(x * 2 + y) == hash(y + x * 2)
    assert (x * 3 + 4).floordiv(3) == x + 1 + ((x * 0) + 1).floordiv(3)  # 4 // 3 = 1, remainder 1 is const
    assert (x * 6 + y * 3 + 5).floordiv(3) == x * 2 + y + 1
    assert (x * 7 - y).mod(3) == (x + y * 2).mod(3)


@given(st.integers(-20, 20), st.integers(-20, 20), st.integers(-3, 3), st.integers(-3, 3), st.integers(1, 5))
def test_floor_division_and_modulo_follow_python(a, b, ca, cb, q):
    e = x * ca + y * cb + 7
    vals = {"x": np.array(a), "y": np.array(b)}
    v = ca * a + cb * b + 7
    assert int(e.floordiv(q).evaluate(vals)) == v // q
    assert int(e.mod(q).evaluate(vals)) == v % q
    assert int(e.floordiv(q).mod(2).evaluate(vals)) == (v // q) % 2


@given(st.integers(-3, 3), st.integers(-3, 3), st.integers(0, 4), st.integers(1, 6), st.integers(1, 6))
def test_bounds_contain_every_value(ca, cb, c, nx, q):
    e = (x * ca + y * cb + c).floordiv(q) + (x * ca - y).mod(q)
    ranges = {"x": (-2, -2 + nx), "y": (0, 3)}
    lo, hi = e.bounds(ranges)
    gx, gy = np.meshgrid(np.arange(-2, -2 + nx), np.arange(0, 3))
    v = np.broadcast_to(e.evaluate({"x": gx, "y": gy}), gx.shape)
    assert lo <= v.min() and v.max() <= hi


def test_simplify_uses_ranges():
    # x = 3q + p with p in [0, 3): (3q + p) // 3 = q, (3q + p) % 3 = p
    e = var("q") * 3 + var("p")
    r = {"q": (0, 5), "p": (0, 3)}
    assert e.floordiv(3).simplify(r) == var("q")
    assert e.mod(3).simplify(r) == var("p")
    # p in [0, 4) may carry into the quotient: nothing to simplify
    r4 = {"q": (0, 5), "p": (0, 4)}
    assert e.floordiv(3).simplify(r4) == e.floordiv(3)
    # merging back: m = 4·t1 + t2 with t2 < 4
    m = var("t1") * 4 + var("t2")
    assert (m.floordiv(4) * 4 + m.mod(4)).simplify({"t1": (0, 9), "t2": (0, 4)}) == m


def test_substitution_and_printing():
    e = (x + y * 2).floordiv(2)
    s = e.subst({"x": var("a") * 2, "y": var("b")})
    assert s == var("a") + var("b")
    assert format_index(x * 2 + y - 1, {"x": "i0", "y": "s0"}) == "(+ (* 2 i0) s0 -1)"
    assert format_index(const(0)) == "0"
    assert format_index((x + 1).mod(3)) == "(% (+ x 1) 3)"
    assert Index.of({"x": 0}) == const(0)
