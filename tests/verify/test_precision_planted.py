"""A planted conversion that loses too much is refused, naming the worst output and the first op
where the error grows (issue #30's done-when): a softmax in fp16 whose statistics are not kept in
fp32 (written out as exp / sum(exp), every op converted to half), against the same softmax as
the registry's op, whose kernel computes its statistics in float and converts."""

from __future__ import annotations

import pytest

from einsat.ir.builder import GraphBuilder
from einsat.ir.precision import Policy, convert
from einsat.verify.precision import PrecisionError, verify_conversion


def logits(b: GraphBuilder):
    return b.mul(b.input("x", (4, 32)), b.const(8.0))  # logits up to ~25: exp overflows fp16 past 11.1


def test_a_softmax_in_half_without_fp32_statistics_is_refused_naming_output_and_first_op():
    b = GraphBuilder("softmax_by_hand")
    e = b.exp(logits(b))
    g = b.build(b.div(e, b.reduce_sum(e, axes=[-1])), names=["probs"])
    planted = convert(g, "fp16", policy=Policy(fp32=frozenset()))  # exp and its sum stored in half
    with pytest.raises(PrecisionError) as err:
        verify_conversion(g, planted, "fp16")
    report = err.value.report
    assert report.worst.name == "probs" and report.worst.max > report.worst.bound
    exp_value = next(n for n in g.nodes if n.op.value == "exp").outputs[0]
    assert report.first_growth_op == "exp" and report.first_growth.name == exp_value
    message = str(err.value)
    assert "output 'probs'" in message and f"first exceeds its bound at {exp_value!r} (exp)" in message


def test_the_same_softmax_as_one_op_keeps_its_statistics_in_float_and_converts():
    b = GraphBuilder("softmax_op")
    g = b.build(b.softmax(logits(b), axis=-1), names=["probs"])
    report = verify_conversion(g, convert(g, "fp16"), "fp16")
    assert report.ok and report.outputs[0].name == "probs" and report.outputs[0].max > 0
