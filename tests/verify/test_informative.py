"""A verification proves something only when it could have failed (`einsat.verify.informative`).

A saturated classifier (one-hot softmax), a constant output and a varying one, each compared
with a correct and with a slightly wrong copy: the status says proved / inconclusive / failed,
and a wrong copy that the outputs cannot show is caught by the values feeding the softmax.
"""

import numpy as np
import pytest

from einsat.errors import VerificationError
from einsat.ir import GraphBuilder
from einsat.optimize import verify_equivalent
from einsat.verify.informative import MIN_VARYING, feeding_pairs, varying
from einsat.verify.numeric import equivalent


def classifier(scale: float = 1.0, wrong: float = 1.0, name: str = "clf"):
    """softmax(x @ w * scale) over 50 classes, flattened; the logits times `wrong` (1: right)."""
    b = GraphBuilder(name)
    x = b.input("x", (4, 16))
    w = b.weight("w", np.random.default_rng(0).standard_normal((16, 50)).astype(np.float32))
    logits = b.mul(b.matmul(x, w), b.const(np.float32(scale * wrong)), name="logits")
    return b.build(b.reshape(b.softmax(logits, axis=-1), shape=(200,)), names=["prob"])


def test_varying_counts_elements_that_move_more_than_the_allowed_error():
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([1.0, 2.0, 3.5, 4.0], np.float32)
    assert varying(a, b, 1e-3) == 0.25
    assert varying(a, a, 1e-3) == 0.0
    # 1e-6 of the scale is within the allowed error 1e-3 * (|a| + 4): not a variation
    assert varying(a, a + 1e-6, 1e-3) == 0.0
    assert varying(np.array([1, 2, 3, 4]), np.array([1, 0, 3, 0]), 0.0) == 0.5


def test_a_varying_output_is_proved():
    report = equivalent(classifier(), classifier())
    assert report and report.status == "proved"
    (out,) = report.outputs
    assert out.varying > 0.9 and not out.feeding


def test_a_saturated_softmax_is_proved_through_its_logits_and_a_wrong_logit_fails():
    right = classifier(scale=1000.0)
    report = equivalent(right, classifier(scale=1000.0))
    (out,) = report.outputs
    assert out.varying < MIN_VARYING  # one-hot rows: 2 of 50 classes move at most
    assert [f.name for f in out.feeding] == ["logits"] and out.feeding[0].varying > 0.9
    assert report.status == "proved", str(report)
    # logits 0.1% off: the one-hot outputs still agree exactly, the logits do not. No verdict
    # either way (programs can compute the logits otherwise and agree: x - x is 0 whatever x is):
    # inconclusive, the output named, and refused where a proof is required
    wrong = classifier(scale=1000.0, wrong=1.001)
    report = equivalent(right, wrong)
    assert report.status == "inconclusive" and report.outputs[0].feeding_differs
    assert report.outputs[0].feeding[0].error > 1
    (line,) = report.inconclusive()
    assert "'prob'" in line and "values feeding its last op differ (logits)" in line
    v = verify_equivalent(right, wrong)
    assert v.status == "inconclusive" and v.feeding_differs == ["prob"]
    with pytest.raises(VerificationError, match="inconclusive") as refused:
        verify_equivalent(right, wrong, require_proof=True)
    assert refused.value.status == "inconclusive"


def test_optimize_returns_the_input_when_the_values_feeding_an_agreeing_output_differ(monkeypatch):
    """The search's result agrees with a saturated classifier's one-hot outputs but not on its
    logits: it may be wrong where the softmax is not saturated, so the input is what comes back."""
    import einsat
    from einsat.pipeline import phases

    right, wrong = classifier(scale=1000.0), classifier(scale=1000.0, wrong=1.001)
    real = phases.extract_phase

    def planted(state):
        real(state)
        state.extraction.graph = wrong

    monkeypatch.setattr(phases, "extract_phase", planted)
    result = einsat.optimize(right)
    assert result.graph is not wrong and result.graph.op_counts() == right.op_counts()
    assert result.report.verification.feeding_differs == ["prob"]
    assert "values feeding their last op differ" in result.report.kept_input


def same_difference(negated: bool):
    """sub(v, v) with v = -(4x) or v = 4x: 0 whatever v is (`einsat fuzz`'s fusion target, seed 0,
    case 1312: neg(a) - neg(a) became a - a, equal programs that were refused as 'failed')."""
    b = GraphBuilder("chain")
    x0 = b.input("x0", (3,))
    add2 = b.mul(x0, b.const(np.float32(4.0)), name="add2")
    v = b.neg(add2, name="neg3") if negated else add2
    return b.build(add2, b.sub(v, v, name="sub5"), names=["a", "s"])


def test_values_feeding_a_constant_output_that_vary_and_differ_fail_nothing():
    report = equivalent(same_difference(negated=True), same_difference(negated=False))
    assert report, str(report)
    assert report.status == "inconclusive" and report.outputs[1].feeding_differs


def constant(c: float, through_input: bool = True):
    """softmax(x * 0 + c): 1/16 everywhere, whatever x (or softmax(c), x unused)."""
    b = GraphBuilder("const")
    x = b.input("x", (4, 16))
    bias = b.const(np.full((4, 16), c, np.float32))
    pre = b.add(b.mul(x, b.const(np.float32(0.0))), bias, name="pre") if through_input else bias
    return b.build(b.softmax(pre, axis=-1), names=["p"])


def test_a_constant_output_is_inconclusive_and_require_proof_refuses_it():
    # a candidate that ignores its input agrees with the constant reference: never "passed"
    report = equivalent(constant(1.0), constant(1.0, through_input=False))
    assert report and report.status == "inconclusive"
    (line,) = report.inconclusive()
    assert "'p'" in line and "varies in 0.0%" in line
    v = verify_equivalent(constant(1.0), constant(1.0))
    assert v.status == "inconclusive" and not v.proved
    assert str(v).startswith("INCONCLUSIVE") and "passed" not in str(v)
    with pytest.raises(VerificationError, match="inconclusive") as refused:
        verify_equivalent(constant(1.0), constant(1.0), require_proof=True)
    assert refused.value.status == "inconclusive" and refused.value.report.status == "inconclusive"
    # softmax(1) and softmax(2) are both uniform: equal programs. The values feeding the softmax
    # differ, but they are constant in the reference, so that says nothing: inconclusive, never
    # failed (#27 item 4: a verification right both ways)
    both_uniform = equivalent(constant(1.0), constant(2.0))
    assert both_uniform and both_uniform.status == "inconclusive", str(both_uniform)
    assert not both_uniform.outputs[0].feeding[0].ok  # the difference is seen, and reported


def double_relu(twice: bool):
    """relu(relu(z)) or relu(z) with z = -(x * x) <= 0: both always 0, equal programs (`einsat
    fuzz`'s fusion target, seed 0: relu∘relu folded into one relu was refused as 'failed')."""
    b = GraphBuilder("relus")
    x = b.input("x", (4, 8))
    z = b.neg(b.mul(x, x), name="z")
    inner = b.relu(z, name="inner") if twice else z
    return b.build(b.relu(inner), names=["y"])


def test_values_feeding_a_constant_output_that_are_constant_in_the_reference_fail_nothing():
    report = equivalent(double_relu(twice=True), double_relu(twice=False))
    assert report, str(report)
    assert report.status == "inconclusive"
    (f,) = report.outputs[0].feeding
    assert f.name == "inner" and not f.ok and f.varying == 0.0  # 0 in the reference, z in the candidate
    assert verify_equivalent(double_relu(twice=True), double_relu(twice=False)).status == "inconclusive"


def test_feeding_pairs_need_the_same_last_op():
    g = classifier()
    assert feeding_pairs(g, g, "prob", "prob") == [("logits", "logits")]  # through the reshape
    b = GraphBuilder("clf")
    x = b.input("x", (4, 16))
    other = b.build(b.sigmoid(b.matmul(x, b.weight("w", np.ones((16, 50), np.float32)))), names=["prob"])
    assert feeding_pairs(g, other, "prob", "prob") == []


def test_given_examples_get_a_shuffled_second_draw():
    def gather(offset: int):
        b = GraphBuilder("emb")
        ids = b.input("ids", (6,), np.int64)
        table = b.weight("table", np.random.default_rng(1).standard_normal((10, 8)).astype(np.float32))
        return b.build(b.add(b.gather(table, ids, axis=0), b.const(np.float32(offset))), names=["e"])

    ids = {"ids": np.array([0, 1, 2, 7, 8, 9])}
    report = equivalent(gather(0), gather(0), ids)
    assert report.draws == 2 and report.status == "proved"
    v = verify_equivalent(gather(0), gather(0), examples=ids)
    assert v.proved and v.trials == 2
    with pytest.raises(VerificationError):
        verify_equivalent(gather(0), gather(1), examples=ids)


def zero_times(swap: bool = False, wrong: float = 2.0):
    """mul(relu(add1 - add1), add1) with add1 = x + x: always 0 (#27's fuzz case, seed 11); `swap`
    writes the multiplication's operands the other way round, `wrong` != 2 scales add1 wrongly."""
    b = GraphBuilder("zero")
    x0 = b.input("x0", (2, 3))
    add1 = b.add(x0, x0, name="add1") if wrong == 2.0 else b.mul(x0, b.const(np.float32(wrong)), name="add1")
    relu3 = b.relu(b.sub(add1, add1), name="relu3")
    return b.build(b.mul(add1, relu3) if swap else b.mul(relu3, add1), names=["mul4"])


def test_a_commutative_ops_operands_match_in_either_order():
    report = equivalent(zero_times(), zero_times(swap=True))
    assert report, str(report)
    assert report.status == "inconclusive"  # relu3 is 0 on every draw: the output could not have failed
    assert sorted(f.name for f in report.outputs[0].feeding) == ["add1", "relu3"]
    assert all(f.ok for f in report.outputs[0].feeding)
    # verify_equivalent refuses nothing that is right (the VerificationError)
    assert verify_equivalent(zero_times(), zero_times(swap=True)).status == "inconclusive"
    # a different add1 (3x) behind the constant output: 0 * add1 is 0 either way, the programs
    # are equal as functions; the difference is seen and reported, in either order, as no
    # verdict (inconclusive, the output named), never as a proof and never as "failed"
    for swap in (False, True):
        other = equivalent(zero_times(), zero_times(swap=swap, wrong=3.0))
        assert other.status == "inconclusive" and other.outputs[0].feeding_differs, str(other)


@pytest.mark.slow
def test_the_fuzz_case_optimizes_under_the_measured_cost_model(tmp_path, monkeypatch):
    """einsat fuzz --seed 11's program: cost="cpu" extracts mul(add1, relu3); it verifies."""
    import einsat
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # its own profile cache, not the user's
    g = zero_times()
    out = einsat.optimize(g, cost="cpu")
    x = {"x0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    from einsat.runtime import run
    assert np.array_equal(run(out.graph, x)["mul4"], np.zeros((2, 3), np.float32))


def with_a_mask(fill: float = 0.0, through_input: bool = False):
    """(x @ w, expand(c)): the second output a constant of the weights, as a partition's first piece
    of HF's ViT passes its layers the attention biases expanded from a 0-valued scalar (#41)."""
    b = GraphBuilder("masked")
    x = b.input("x", (4, 16))
    w = b.weight("w", np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))
    c = b.weight("c", np.full((1, 1), fill, np.float32))
    if through_input:  # x * 0 + c: the same values, reached by the input
        c = b.add(b.mul(b.reshape(b.reduce_sum(x, axes=(0, 1), keepdims=1), shape=(1, 1)), b.const(np.float32(0.0))), c)
    return b.build(b.matmul(x, w), b.expand(c, shape=(2, 12, 12)), names=["y", "bias"])


def test_an_output_made_from_the_weights_alone_is_proved_by_one_comparison():
    report = equivalent(with_a_mask(), with_a_mask())
    assert report.status == "proved", str(report)
    assert report.outputs[1].of_weights and report.outputs[1].varying == 0.0
    assert "a constant of the weights" in str(report)
    assert verify_equivalent(with_a_mask(), with_a_mask(), require_proof=True).proved
    # a wrong constant is still seen: compared once is compared for every input
    wrong = equivalent(with_a_mask(), with_a_mask(fill=1.0))
    assert not wrong and wrong.status == "failed" and not wrong.outputs[1].ok
    # a candidate that reaches the value through its input is not a constant of its weights: no proof
    reached = equivalent(with_a_mask(), with_a_mask(through_input=True))
    assert reached and reached.status == "inconclusive" and not reached.outputs[1].of_weights
