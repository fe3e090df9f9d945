"""Verifying a precision conversion (`einsat.verify.precision`): a sound conversion passes with
its error distribution reported; one that loses too much is refused, naming the worst output
and the first value where the error grows past its bound."""

from __future__ import annotations

import numpy as np
import pytest

from einsat.ir.builder import GraphBuilder
from einsat.ir.precision import Policy, convert, unit_roundoff
from einsat.verify.precision import KAPPA, PrecisionError, check_conversion, depths, verify_conversion
from tests.ir.test_precision import block


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_sound_conversion_of_a_bert_like_block_passes(precision):
    g = block()
    report = verify_conversion(g, convert(g, precision), precision)
    (y,) = report.outputs
    u = unit_roundoff(np.float16 if precision == "fp16" else "bfloat16")
    assert report.ok and report.informative and y.name == "y"
    assert 0 < y.median <= y.p99 <= y.max <= y.bound
    assert y.bound == pytest.approx(KAPPA * u * np.sqrt(y.depth))
    assert y.max > u / 8  # the half program did round: the comparison could have failed
    assert report.first_growth is None


def statistics_in_the_open(offset: float = 30.0, d: int = 64):
    """Layer normalization whose variance is E[x²] − E[x]², of values centred at `offset`: fine
    in fp32, a catastrophic cancellation when its statistics are stored in half."""
    b = GraphBuilder("var")
    x = b.add(b.input("x", (8, d)), b.const(offset))
    mean = b.reduce_mean(x, axes=[-1])
    var = b.sub(b.reduce_mean(b.mul(x, x), axes=[-1]), b.mul(mean, mean))
    return b.build(b.div(b.sub(x, mean), b.sqrt(b.add(var, b.const(1e-5)))), names=["y"])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_statistics_stored_in_half_are_refused(precision):
    g = statistics_in_the_open()
    planted = convert(g, precision, policy=Policy(fp32=frozenset()))  # every op in half
    with pytest.raises(PrecisionError) as err:
        verify_conversion(g, planted, precision)
    report = err.value.report
    assert not report.ok and report.worst.name == "y" and report.worst.max > report.worst.bound
    # where it grows: the variance's subtraction, not the products or the means before it
    assert report.first_growth_op == "sub" and report.first_growth.name == g.producer(
        next(n for n in g.nodes if n.op.value == "add" and "x" not in n.inputs).inputs[0]).outputs[0]
    assert "'y'" in str(err.value) and "first exceeds its bound" in str(err.value)


def test_a_softmax_overflowing_fp16_is_refused():
    """exp of logits past 11.1 overflows fp16 (65504): a softmax written without its max
    subtraction is inf / inf = NaN in half where fp32 is finite."""
    b = GraphBuilder("sm")
    e = b.exp(b.mul(b.input("x", (4, 32)), b.const(8.0)))
    g = b.build(b.div(e, b.reduce_sum(e, axes=[-1])), names=["y"])
    with pytest.raises(PrecisionError, match="'y'"):
        verify_conversion(g, convert(g, "fp16"), "fp16")
    # bf16 has fp32's range: the same program converts
    assert verify_conversion(g, convert(g, "bf16"), "bf16").ok


def test_depth_counts_roundings_not_layout():
    b = GraphBuilder("d")
    x = b.input("x", (2, 3))
    t = b.transpose(b.relu(x), perm=[1, 0])
    g = b.build(b.add(t, t), names=["y"])
    h = convert(g, "bf16")
    d = depths(h, rounded_inputs=set())
    # the input's cast rounds (1), relu and transpose are exact (0), add rounds (1), the cast out widens (0)
    assert d["y"] == 2
    assert check_conversion(g, h, "bf16").outputs[0].depth == 2


def rotary(seq: int = 256, half_dim: int = 8):
    """A rotary embedding's tables: cos and sin of positions times frequencies (angles up to 255)."""
    b = GraphBuilder("rope")
    pos = b.cast(b.unsqueeze(b.input("positions", (1, seq), np.int64), axes=[-1]), dtype="float32")
    inv_freq = b.weight("inv_freq", 10000.0 ** (-np.arange(half_dim, dtype=np.float32) / half_dim))
    angle = b.mul(pos, inv_freq)
    x = b.input("x", (1, seq, half_dim))
    return b.build(b.add(b.mul(x, b.cos(angle)), b.mul(x, b.sin(angle))), names=["y"])


def test_rotary_angles_stay_fp32_and_a_half_angle_is_refused():
    g = rotary()
    examples = {"positions": np.arange(256, dtype=np.int64)[None], "x": np.ones((1, 256, 8), np.float32)}
    assert verify_conversion(g, convert(g, "bf16"), "bf16", inputs=examples).ok
    from einsat.ir.precision import KEPT, STATISTICS
    planted = convert(g, "bf16", policy=Policy(fp32=STATISTICS | KEPT, trig=frozenset()))  # angles in bf16
    with pytest.raises(PrecisionError) as err:
        verify_conversion(g, planted, "bf16", inputs=examples)
    assert err.value.report.first_growth_op in ("cos", "sin")
