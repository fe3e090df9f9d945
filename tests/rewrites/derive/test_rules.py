"""Every derivation rule keeps the value of the expression (EinNet §4.1): hypothesis draws op
expressions and inputs, rules are applied (alone and in sequences), both sides are evaluated."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.ir.expr import Call, Expr, Iter, evaluate, fingerprint, var
from einsat.ir.expr.build import read
from einsat.ir.expr.nodes import all_scopes, scopes
from einsat.rewrites.derive import rules
from einsat.rewrites.derive.steps import steps, subscripts, traversal_part
from einsat.testing.expressions import expression_inputs, op_expressions


def same_value(a: Expr, b: Expr, shapes, seed=0):
    xs = expression_inputs(shapes, seed)
    want = evaluate(a, xs)
    np.testing.assert_allclose(evaluate(b, xs), want, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(want).max(initial=0)))


@settings(max_examples=30)
@given(op_expressions(), st.data())
def test_every_step_keeps_the_value(case, data):
    e, shapes = case
    state = rules.normalize(e, shapes)
    same_value(e, state, shapes)
    for _ in range(data.draw(st.integers(1, 3))):
        options = list(steps(state, shapes))
        if not options:
            break
        step = options[data.draw(st.integers(0, len(options) - 1))]
        same_value(e, step.expr, shapes)
        assert step.expr.shape == e.shape
        state = step.expr


@settings(max_examples=25)
@given(op_expressions(), st.data())
def test_each_rule_keeps_the_value(case, data):
    e, shapes = case
    root = rules.normalize(e, shapes)
    s = data.draw(st.sampled_from(all_scopes(root)))
    loops = {it.name for it in s.loops}
    tried = []
    if len(s.sums) >= 2:
        tried.append(rules.split_summation(root, s, [s.sums[0].name]))
        tried.append(rules.merge_sums(root, s, s.sums[0].name, s.sums[1].name))
    for i in subscripts(s):
        t = traversal_part(i, loops)
        for x in t.iterators():
            tried.append(rules.substitute(root, s, x, t))
    for it in s.loops:
        tried.append(rules.split_loop(root, s, it.name, data.draw(st.integers(2, 4))))
    for it in s.sums:
        tried.append(rules.split_sum(root, s, it.name, data.draw(st.integers(2, 4)), shapes))
    for k in range(len(s.loops) - 1):
        tried.append(rules.merge_loops(root, s, k))
    for child in scopes(s):
        tried.append(rules.inline(root, s, child, shapes))
    for new in tried:
        if new is not None:
            same_value(e, new, shapes)
            same_value(e, rules.normalize(new, shapes), shapes)


def conv3x3(n=1, c=4, h=5, w=6, f=3):
    loops = (Iter("n", 0, n), Iter("f", 0, f), Iter("h", 0, h), Iter("w", 0, w))
    sums = (Iter("c", 0, c), Iter("r", 0, 3), Iter("s", 0, 3))
    x = read(0, "n", "c", var("h") + var("r") - 1, var("w") + var("s") - 1)
    body = Call("mul", (x, read(1, "f", "c", "r", "s")))
    return Expr(loops, sums, body), [(n, c, h, w), (f, c, 3, 3)]


def test_einnet_fig5_path_by_hand():
    """E1 -> E2 (split Σ_c inside) -> E3/E4 (substitute h + r, w + s: relaxed boxes) -> E6 (tight)."""
    e1, shapes = conv3x3()
    e2 = rules.split_summation(e1, e1, ["r", "s"])
    (inner,) = scopes(e2)
    assert [it.name for it in inner.sums] == ["c"] and len(inner.loops) == 6
    e3 = rules.substitute(e2, inner, "h", var("h") + var("r"))
    (inner3,) = scopes(e3)
    e4 = rules.substitute(e3, inner3, "w", var("w") + var("s"))
    e6 = rules.normalize(e4, shapes)
    (inner6,) = scopes(e6)
    # the inner scope is a matmul: x[n, c, t1 - 1, t2 - 1] · w[f, c, r, s] over t1 in [1, h + 1)
    assert sorted((it.lo, it.hi) for it in inner6.loops) == sorted([(0, 1), (0, 3), (0, 3), (0, 3), (1, 6), (1, 7)])
    for e in (e2, e3, e4, e6):
        same_value(e1, e, shapes)
    assert fingerprint(e6) != fingerprint(rules.normalize(e1, shapes))


def test_tightening_removes_the_padding_and_relaxing_needs_zeros():
    x = Expr((Iter("i", 0, 4),), (Iter("k", -3, 9),), read(0, var("i") + var("k")))
    t = rules.normalize(x, [(5,)])
    assert t.sums[0].lo == -3 and t.sums[0].hi == 5  # i + k < 5 needs k < 5; k >= -3 stays (i up to 3)
    # a summation over [0, 5) of w[k]: relaxed to 6 only because w[5] reads 0
    w = Expr((), (Iter("k", 0, 5),), read(0, "k"))
    assert rules.split_sum(w, w, "k", 3, [(5,)]) is not None
    assert rules.split_sum(w, w, "k", 3, [(7,)]) is None      # w[5] exists: no relaxing


def test_merging_loops_needs_readers_in_range():
    inner = Expr((Iter("a", 0, 3), Iter("b", 0, 4)), (), Call("mul", (read(0, "a"), read(1, "b"))))
    safe = Expr((Iter("i", 0, 3), Iter("j", 0, 4)), (), read(inner, "i", "j"))
    shifted = Expr((Iter("i", 0, 3), Iter("j", 0, 4)), (), read(inner, "i", var("j") - 1))
    assert rules.merge_loops(safe, inner, 0) is not None
    assert rules.merge_loops(shifted, inner, 0) is None  # j - 1 = -1 would wrap to the row before
    same_value(safe, rules.merge_loops(safe, inner, 0), [(3,), (4,)])


@pytest.mark.parametrize("k", [2, 3])
def test_split_loop_of_the_root_adds_a_wrapper(k):
    e, shapes = conv3x3(h=7)
    new = rules.split_loop(e, e, "h", k)
    assert len(scopes(new)) == 1 and new.shape == e.shape
    same_value(e, new, shapes)
