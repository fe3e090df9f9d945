"""A half-precision run's report shows the user's fp32 program beside the converted one (#41)."""

from __future__ import annotations

import numpy as np
import pytest

import einsat
from einsat.cost.models import cost_model
from einsat.ir import GraphBuilder
from einsat.pipeline.report import Report
from tests.work_bounded import BY_WORK, ended_by_work


def _block() -> einsat.Graph:
    rng = np.random.default_rng(0)
    b = GraphBuilder("block")
    x = b.input("x", (64, 128))
    h = b.relu(b.matmul(x, b.weight("w1", rng.standard_normal((128, 256)).astype(np.float32) / 16)))
    return b.build(b.matmul(h, b.weight("w2", rng.standard_normal((256, 128)).astype(np.float32) / 16)))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_report_shows_the_fp32_input_beside_the_converted_program(precision):
    g = _block()
    result = einsat.optimize(g, cost="h100-roofline", precision=precision, **BY_WORK)
    ended_by_work(result.report)
    report = result.report
    assert report.cost_fp32 == pytest.approx(cost_model("h100-roofline").graph_cost(g))
    assert report.cost_fp32 != pytest.approx(report.cost_before)  # the table's input is the conversion
    text = str(report)
    assert "input (converted)" in text
    (line,) = [ln for ln in text.splitlines() if "against the fp32 input" in ln]
    assert f"{report.cost_fp32 / report.cost_after:.3f}x" in line
    assert report.to_dict()["cost_fp32"] == pytest.approx(report.cost_fp32)


def test_a_half_program_modeled_slower_than_fp32_says_so():
    report = Report(name="p", model="m", unit="µs", cost_before=12.0, cost_after=11.0, ops_before={}, ops_after={},
                    saturation=None, extraction=None, verification=None, times={}, cost_fp32=10.0)
    (line,) = report.fp32_lines()
    assert "0.909x" in line and "SLOWER than the fp32 one" in line
    assert Report(name="p", model="m", unit="µs", cost_before=12.0, cost_after=11.0, ops_before={}, ops_after={},
                  saturation=None, extraction=None, verification=None, times={}).fp32_lines() == []
