"""`optimize`'s numeric check: it passes rounding differences and stops wrong programs."""

import importlib

import numpy as np
import pytest

import einsat
from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.errors import VerificationError
from einsat.ir import GraphBuilder
from einsat.optimize_report import SaturationSummary

optimize_module = importlib.import_module("einsat.optimize")
verify_equivalent = optimize_module.verify_equivalent


def chain(order: str, scale: float = 1.0, op: str = "relu"):
    b = GraphBuilder("chain")
    x, y, z = (b.input(n, (16, 64)) for n in "xyz")
    s = b.add(b.add(x, y), z) if order == "left" else b.add(x, b.add(y, z))
    if scale != 1.0:
        s = b.mul(s, b.const(scale))
    return b.build(getattr(b, op)(s), names=["out"])


def test_reassociation_passes_with_a_small_error():
    v = verify_equivalent(chain("left"), chain("right"))
    assert v.output == "out" and v.trials == 2
    assert 0 < v.max_error <= v.tolerance  # rounding differs, within the tolerance


def test_a_wrong_program_is_an_error_naming_the_output():
    with pytest.raises(VerificationError, match="output 'out'"):
        verify_equivalent(chain("left"), chain("left", op="sigmoid"))


def test_tolerance_scales_with_dtype_and_op_count():
    # a relative error of 1e-4 is far above 32 * eps(f32) * 4 ops = 1.5e-5
    with pytest.raises(VerificationError, match="relative error"):
        verify_equivalent(chain("left"), chain("left", scale=1 + 1e-4))


def test_nan_must_match_exactly():
    def log_of(shift):
        b = GraphBuilder("log")
        x = b.input("x", (32,))
        return b.build(b.log(b.add(x, b.const(shift))), names=["out"])
    verify_equivalent(log_of(0.0), log_of(0.0))   # NaN at the same places
    with pytest.raises(VerificationError):
        verify_equivalent(log_of(0.0), log_of(5.0))


def test_interface_changes_are_errors():
    b = GraphBuilder("other")
    x = b.input("x", (16, 64))
    with pytest.raises(VerificationError, match="interface"):
        verify_equivalent(chain("left"), b.build(b.relu(x), names=["out"]))


def test_optimize_refuses_the_program_of_a_broken_rewrite(monkeypatch):
    """An e-graph where a (wrong) rewrite put relu(x) and x in one e-class: the extraction picks
    the cheaper x, and the verification must stop it."""
    b = GraphBuilder("broken")
    x = b.input("x", (64, 64))
    g = b.build(b.relu(x, name="y"))
    t = g.types["y"]
    broken = EGraphData({0: EClass(0, [ENode(None, leaf=("input", "x"))], t),
                         1: EClass(1, [ENode(einsat.Op.RELU, (0,)), ENode(einsat.Op.IDENTITY, (0,))], t)},
                        [1], ["y"], {"x": t}, {})
    monkeypatch.setattr(optimize_module, "_saturate",
                        lambda *args: (broken, SaturationSummary(2, 2, "saturated")))
    with pytest.raises(VerificationError, match="output 'y'"):
        einsat.optimize(g)


def test_report_prints_costs_verification_and_times(monkeypatch):
    from einsat.extract import egraph_data_from_graph
    g = chain("left")
    monkeypatch.setattr(optimize_module, "_saturate",
                        lambda graph, *args: (egraph_data_from_graph(graph),
                                              SaturationSummary(9, 9, "saturated", 1)))
    result = einsat.optimize(g, cost="h200")
    text = str(result.report)
    assert result.report.verified and "verification: passed" in text
    assert "h200" in text and "stopped: saturated" in text and "total" in text
    assert result.report.cost_after <= result.report.cost_before
    graph, report = result
    assert graph is result.graph and report is result.report
