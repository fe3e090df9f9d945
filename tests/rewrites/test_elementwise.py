"""Element-wise algebra: every rule sound on random shapes and reaching its goal."""

import pytest
from hypothesis import strategies as st

from tests.rewrites.harness import Case, leaves, parametrize, shapes

S = shapes(1, 3)
# three operands that broadcast together: a full shape, a suffix of it, a scalar-ish one
BROAD = S.flatmap(lambda s: st.tuples(st.just(s), st.just(s[1:]), st.just((1,) * len(s))))


def three(**kw):
    return BROAD.flatmap(lambda ss: leaves({"a": ss[0], "b": ss[1], "c": ss[2]}, **kw))


def weighted_a(**kw):  # a is a weight (weight-only factors are distributed)
    return BROAD.flatmap(lambda ss: leaves({"b": ss[1], "c": ss[2]}, {"a": ss[0]}, **kw))


def weighted_b(**kw):  # b is a weight (add-comm turns a sum with a weight-only term)
    return BROAD.flatmap(lambda ss: leaves({"a": ss[0], "c": ss[2]}, {"b": ss[1]}, **kw))


def weighted_bc(**kw):  # b and c are weights (mul-assoc regroups a weight-only pair)
    return BROAD.flatmap(lambda ss: leaves({"a": ss[0]}, {"b": ss[1], "c": ss[2]}, **kw))


def pos(**kw):  # c stays away from zero (a divisor)
    return BROAD.flatmap(lambda ss: leaves({"a": ss[0], "b": ss[1]}, {"var_c": ss[2]}, **kw))


CASES = [
    Case("add-comm", weighted_b(), lambda b, t, p: b.add(t["a"], t["b"]), lambda b, t, p: b.add(t["b"], t["a"])),
    Case("mul-comm", three(), lambda b, t, p: b.mul(t["a"], t["b"]), lambda b, t, p: b.mul(t["b"], t["a"])),
    Case("add-assoc", three(), lambda b, t, p: b.add(b.add(t["a"], t["b"]), t["c"]),
         lambda b, t, p: b.add(t["a"], b.add(t["b"], t["c"]))),
    Case("mul-assoc", weighted_bc(), lambda b, t, p: b.mul(b.mul(t["a"], t["b"]), t["c"]),
         lambda b, t, p: b.mul(t["a"], b.mul(t["b"], t["c"]))),
    Case("mul-add-distrib", weighted_a(), lambda b, t, p: b.mul(t["a"], b.add(t["b"], t["c"])),
         lambda b, t, p: b.add(b.mul(t["a"], t["b"]), b.mul(t["a"], t["c"]))),
    Case("mul-add-factor", three(), lambda b, t, p: b.add(b.mul(t["a"], t["b"]), b.mul(t["a"], t["c"])),
         lambda b, t, p: b.mul(t["a"], b.add(t["b"], t["c"]))),
    Case("mul-sub-distrib", three(), lambda b, t, p: b.mul(t["a"], b.sub(t["b"], t["c"])),
         lambda b, t, p: b.sub(b.mul(t["a"], t["b"]), b.mul(t["a"], t["c"]))),
    Case("sub-as-add", three(), lambda b, t, p: b.sub(t["a"], t["b"]), lambda b, t, p: b.add(t["a"], b.neg(t["b"]))),
    Case("neg-mul", three(), lambda b, t, p: b.neg(b.mul(t["a"], t["b"])),
         lambda b, t, p: b.mul(b.neg(t["a"]), t["b"])),
    Case("neg-neg", three(), lambda b, t, p: b.relu(b.neg(b.neg(t["a"]))), lambda b, t, p: b.relu(t["a"])),
    Case("div-as-mul", pos(), lambda b, t, p: b.div(b.mul(t["a"], t["b"]), t["var_c"]),
         lambda b, t, p: b.mul(t["a"], b.div(t["b"], t["var_c"]))),
    Case("div-add-factor", pos(), lambda b, t, p: b.add(b.div(t["a"], t["var_c"]), b.div(t["b"], t["var_c"])),
         lambda b, t, p: b.div(b.add(t["a"], t["b"]), t["var_c"])),
]

test_sound, test_goal = parametrize(CASES)


def test_a_computed_factor_is_not_distributed():
    """`mul-add-distrib` fires for a weight-only factor only: x * (y + z) over three inputs stays
    as it is (the rule alone never matches), so products of sums are not expanded."""
    import pytest

    from einsat.testing.rules import Leaves, check_goal
    case = Case("mul-add-distrib", three(), lambda b, t, p: b.mul(t["a"], b.add(t["b"], t["c"])),
                lambda b, t, p: b.add(b.mul(t["a"], t["b"]), b.mul(t["a"], t["c"])))
    computed = Leaves({"a": (2, 3), "b": (3,), "c": (1, 1)}, {}, {}, 0)
    with pytest.raises(AssertionError, match="never matched"):
        check_goal(case, computed)
    weighted = Leaves({"b": (3,), "c": (1, 1)}, {"a": (2, 3)}, {}, 0)
    assert check_goal(case, weighted).report.rules["mul-add-distrib"].matches > 0  # and the right side is reached


def test_mul_assoc_regroups_only_into_a_weight_only_product():
    """`mul-assoc` is bounded by design: (a · b) · c = a · (b · c) fires when b · c is weight-only
    (a constant pair to fold), and back, a · (b · c) = (a · b) · c, when a · b is; a chain of
    computed factors keeps its one grouping (the rule alone never matches), so the e-graph holds
    no enumeration of a product's groupings."""
    import pytest

    from einsat.testing.rules import Leaves, check_goal
    forward = Case("mul-assoc", three(), lambda b, t, p: b.mul(b.mul(t["a"], t["b"]), t["c"]),
                   lambda b, t, p: b.mul(t["a"], b.mul(t["b"], t["c"])))
    back = Case("mul-assoc", three(), lambda b, t, p: b.mul(t["a"], b.mul(t["b"], t["c"])),
                lambda b, t, p: b.mul(b.mul(t["a"], t["b"]), t["c"]))
    computed = Leaves({"a": (2, 3), "b": (3,), "c": (1, 1)}, {}, {}, 0)
    for case in (forward, back):
        with pytest.raises(AssertionError, match="never matched"):
            check_goal(case, computed)
    one_weight = Leaves({"a": (2, 3), "b": (3,)}, {"c": (1, 1)}, {}, 0)  # only c weight-only: b · c computed
    with pytest.raises(AssertionError, match="never matched"):
        check_goal(forward, one_weight)
    assert check_goal(forward, Leaves({"a": (2, 3)}, {"b": (3,), "c": (1, 1)}, {}, 0)).report.rules["mul-assoc"].matches
    assert check_goal(back, Leaves({"c": (1, 1)}, {"a": (2, 3), "b": (3,)}, {}, 0)).report.rules["mul-assoc"].matches


def test_add_comm_turns_only_a_sum_with_a_weight_only_term():
    """`add-comm` is bounded by design: a + b = b + a when a or b is weight-only (a bias, a
    constant: the rules that read a sum's order match a constant on one side); a sum of two
    computed terms keeps its order (the generators read sums in both orders), so the e-graph
    holds no enumeration of a long sum's orders."""
    import pytest

    from einsat.testing.rules import Leaves, check_goal
    case = Case("add-comm", three(), lambda b, t, p: b.add(t["a"], t["b"]), lambda b, t, p: b.add(t["b"], t["a"]))
    with pytest.raises(AssertionError, match="never matched"):
        check_goal(case, Leaves({"a": (2, 3), "b": (3,), "c": (1, 1)}, {}, {}, 0))
    for weights in ({"a": (2, 3)}, {"b": (3,)}):
        inputs = {k: v for k, v in {"a": (2, 3), "b": (3,), "c": (1, 1)}.items() if k not in weights}
        assert check_goal(case, Leaves(inputs, weights, {}, 0)).report.rules["add-comm"].matches


@pytest.mark.slow
def test_a_llama_decoder_export_saturates_below_the_node_limit():
    """The bounds by design at work on a real export (#39): the dynamo Llama decoder (170 nodes)
    grew to the node limit (15,009 e-nodes) and stopped there; with mul-assoc and add-comm bounded
    its default run saturates, by work, at 4,254 e-nodes (benchmarks/results/speed.md)."""
    from pathlib import Path

    import einsat
    from benchmarks.speed_bench import BUNDLED, bundled_shapes

    path = BUNDLED / "hf_llama_decode_dynamo.onnx"
    g = einsat.load_onnx(str(path), fill_weights="random", input_shapes=bundled_shapes(Path(path)) or None)
    s = einsat.optimize(g, verify=False).report.saturation
    assert s.stop_reason == "saturated"
    assert s.enodes < 6_000
