"""Cast laws (`einsat.rewrites.algebra.casts`): each exact, so both sides agree to the bit
(rtol 0) on random inputs, and the rule alone puts the right side into the left side's class."""

from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.rewrites.algebra.casts import WIDENS, cast_rules
from tests.rewrites.harness import Case, check_goal, check_sound, leaves, shapes

S = shapes(1, 3)
PERM = S.flatmap(lambda s: st.tuples(st.just(s), st.permutations(range(len(s))).map(tuple)))
RESHAPE = S.flatmap(lambda s: st.tuples(st.just(s), st.sampled_from([(prod(s),), tuple(reversed(s)), (1,) + s])))
FLOATS = ("float16", "bfloat16", "float32")


def typed(b, t, src):
    """The input in `src` (it is float64: the harness's leaves)."""
    return t["a"] if src == "float64" else b.cast(t["a"], dtype=src)


def widen_narrow(n, w):
    return Case("cast-widen-narrow", S.flatmap(lambda s: leaves({"a": s})),
                lambda b, t, p: b.cast(b.cast(typed(b, t, n), dtype=w), dtype=n),
                lambda b, t, p: typed(b, t, n), variant=f"{n}-{w}")


def widen_cast(n, w, d):
    return Case("cast-widen-cast", S.flatmap(lambda s: leaves({"a": s})),
                lambda b, t, p: b.cast(b.cast(typed(b, t, n), dtype=w), dtype=d),
                lambda b, t, p: b.cast(typed(b, t, n), dtype=d), variant=f"{n}-{w}-{d}")


def through(name, strat, op, src, dst):
    return Case(f"cast-{name}", strat.flatmap(lambda sa: leaves({"a": sa[0]}, arg=sa[1])),
                lambda b, t, p: b.cast(op(b, typed(b, t, src), p), dtype=dst),
                lambda b, t, p: op(b, b.cast(typed(b, t, src), dtype=dst), p), variant=f"{src}-{dst}")


UNIT = S.map(lambda s: (s, None))
CASES = ([widen_narrow(n, w) for n, w in WIDENS if n != "float32" or w == "float64"]
         + [widen_cast(n, w, d) for n, w in WIDENS[:2] for d in ("float16", "bfloat16", "int32")]
         + [through("transpose", PERM, lambda b, x, p: b.transpose(x, perm=p["arg"]), s, d)
            for s in FLOATS for d in FLOATS if s != d]
         + [through("reshape", RESHAPE, lambda b, x, p: b.reshape(x, shape=p["arg"]), "float32", "bfloat16")]
         + [through("relu", UNIT, lambda b, x, p: b.relu(x), s, d) for s, d in
            (("float32", "float16"), ("float32", "bfloat16"), ("float16", "float32"), ("bfloat16", "float16"))]
         + [through("neg", UNIT, lambda b, x, p: b.neg(x), s, d) for s, d in
            (("float32", "float16"), ("float32", "bfloat16"), ("bfloat16", "float32"))])
IDS = [repr(c) for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
@settings(max_examples=15)
@given(data=st.data())
def test_sound_exactly(case, data):
    """Exact laws: equal to the bit (rtol 0), rounding included."""
    check_sound(case, data.draw(case.leaves), rtol=0.0)


GOALS = list({c.rule: c for c in CASES}.values())  # one dtype pair per rule: an e-graph session each


@pytest.mark.parametrize("case", GOALS, ids=[repr(c) for c in GOALS])
@settings(max_examples=1)
@given(data=st.data())
def test_goal(case, data):
    check_goal(case, data.draw(case.leaves), [cast_rules()])


def test_a_narrowing_cast_is_not_removed():
    """fp64 -> fp32 -> fp16 rounds twice: no rule takes it for fp64 -> fp16 (it would be wrong at
    ties: 1 + 2^-11 + 2^-40 rounds up to 1 + 2^-10 directly, down to 1 twice)."""
    import numpy as np

    x = np.float64(1 + 2 ** -11 + 2 ** -40)
    assert np.float16(x) != np.float16(np.float32(x))
    assert all(not (n == "float64" and w in ("float32", "float16")) for n, w in WIDENS)
