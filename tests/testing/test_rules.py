"""einsat.testing.rules and einsat.testing.egraphs catch what they promise to catch."""

import numpy as np
import pytest

from einsat import GraphBuilder
from einsat.egraph import Limits, Rule, Ruleset, Schedule, Session
from einsat.egraph.rules import rewrite
from einsat.testing.egraphs import assert_consistent
from einsat.testing.rules import Case, Leaves, assert_sound, check_goal, check_sound, leaves, shapes

NEG_NEG = Rule("my-neg-neg", "-(-a) = a", rewrite("(Neg (Neg a))", "a"))
MINE = Ruleset("mine", (NEG_NEG,))
SAME = leaves({"a": shapes()}).map(lambda p: Leaves({"a": p.inputs["a"], "b": p.inputs["a"]}, seed=p.seed))

neg_neg = Case("my-neg-neg", leaves({"a": shapes()}), lambda b, t, p: b.neg(b.neg(t["a"])), lambda b, t, p: t["a"])
sub_comm = Case("sub-comm", SAME, lambda b, t, p: b.sub(t["a"], t["b"]), lambda b, t, p: b.sub(t["b"], t["a"]))


def test_a_sound_case_passes_under_hypothesis():
    assert_sound(neg_neg)


def test_an_unsound_case_fails_naming_the_rule_and_the_leaves():
    with pytest.raises(AssertionError, match=r"sub-comm is unsound on Leaves\(inputs=\{'a': \(2,\)"):
        check_sound(sub_comm, Leaves({"a": (2,), "b": (2,)}, seed=3))
    with pytest.raises(AssertionError, match="sub-comm"):
        assert_sound(sub_comm)


def test_sides_of_different_shapes_fail_even_where_values_broadcast():
    case = Case("grow", leaves({"a": (1,)}), lambda b, t, p: t["a"], lambda b, t, p: b.reshape(t["a"], shape=(1, 1)))
    with pytest.raises(AssertionError, match="on the left"):
        check_sound(case, Leaves({"a": (1,)}))


def test_goal_with_a_users_ruleset():
    goal = check_goal(neg_neg, Leaves({"a": (2, 3)}, seed=1), [MINE])
    assert goal.report.rules["my-neg-neg"].matches >= 1
    with pytest.raises(KeyError, match="my-neg-neg"):
        check_goal(neg_neg, Leaves({"a": (2, 3)}), [])


def test_goal_fails_when_the_rule_never_matches():
    wrong_side = Case("my-neg-neg", leaves({"a": (2,)}), lambda b, t, p: b.neg(t["a"]), lambda b, t, p: b.neg(t["a"]))
    with pytest.raises(AssertionError, match="never matched"):
        check_goal(wrong_side, Leaves({"a": (2,)}), [MINE])


def test_consistency_check_finds_an_unequal_union():
    b = GraphBuilder("two")
    x = b.input("x", (3,), np.float64)
    g = b.build(b.neg(x), b.relu(x))
    s = Session(Limits(iterations=1))
    neg, relu = s.add_graph(g)
    s.run(Schedule((MINE,)))
    assert assert_consistent(s.export()) == 3  # x, neg, relu: nothing wrong yet
    s.union(neg, relu)  # a false equality
    with pytest.raises(AssertionError, match="e-class"):
        assert_consistent(s.export())
