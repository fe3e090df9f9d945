"""Under a measured model (cost="cpu") the e-graph is extracted a second time under the default
modeled cost model, and that program, verified like any result, is timed against the input beside
the measured choice (issue #37: files written for the default cost ran faster on onnxruntime than
what cost="cpu" returned, on programs found in the same e-graph).

Nothing here depends on the clock or the machine: the profiler is a script (every signature one
fixed figure, timed instantly), the side-by-side verdicts are scripted per program, and the
alternative is planted (`phases.modeled_extraction` replaced) so that it differs from the measured
choice and the input, or equals one of them, as each test needs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import einsat
from einsat.cost.target import cpu_model
from einsat.ir import GraphBuilder
from einsat.ir.registry import Op
from einsat.pipeline import measure, phases
from einsat.runtime.profiler import ProfileRun, judge

pytest.importorskip("onnxruntime")


def double_transpose():
    """relu(transpose(transpose(x)) @ w): the measured choice drops both transposes (a fused
    matmul, no transpose)."""
    b = GraphBuilder("tt")
    x = b.input("x", (32, 48))
    t = b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0))
    return b.build(b.relu(b.matmul(t, b.weight("w", (48, 16)))))


def other_form(g, wrong: bool = False):
    """relu(transpose(transpose(w) @ transpose(x))): what `g` computes, another program (its
    transposes tell it from the measured choice); `wrong`: the relu left out, a program that
    differs from `g` on every negative product."""
    b = GraphBuilder("tt")
    x = b.input("x", (32, 48))
    w = b.weight("w", g.weights["w"])
    y = b.transpose(b.matmul(b.transpose(w, perm=(1, 0)), b.transpose(x, perm=(1, 0))), perm=(1, 0))
    return b.build(y if wrong else b.relu(y), names=list(g.outputs))


class Planted:
    """An extraction of the alternative's program (what `phases.modeled_extraction` returns)."""

    def __init__(self, graph):
        self.graph = graph
        self.weight_classes = {}


def fixed_profile(monkeypatch):
    """Every signature profiled at once at a fixed figure (1 µs and 1 µs per 1,000 input elements)."""
    def profile_signatures(sigs, *args, **kwargs):
        run = ProfileRun()
        run.entries = {s.key: {"us": 1.0 + sum(int(np.prod(t.shape)) for t in s.inputs if t) / 1000} for s in sigs}
        return run

    monkeypatch.setattr(measure, "profile_signatures", profile_signatures)


def is_alternative(g) -> bool:
    return any(n.op is Op.TRANSPOSE and n.inputs[0] == "w" for n in g.nodes)


def scripted(monkeypatch, choice: float | None, alternative: float | None):
    """The side-by-side check as a script: the candidate's time is the input's times `choice` or
    `alternative` (None: that one must never be timed); returns the candidates timed, in order."""
    timed = []

    def check_measured(model, a, b, reps):
        which = "alternative" if is_alternative(b) else "choice"
        factor = alternative if which == "alternative" else choice
        assert factor is not None, f"the {which} was timed"
        timed.append(which)
        base = [1000.0 + k for k in range(15)]
        return judge(base, [v * factor for v in base])

    monkeypatch.setattr(measure, "check_measured", check_measured)
    return timed


def planting(monkeypatch, g, plant=other_form) -> dict:
    """The alternative planted: `plant(g)` (None: the measured choice itself) is what the modeled
    extraction returns; the dict gets it as "graph" once extracted."""
    planted = {}

    def modeled_extraction(state, seconds):
        planted["graph"] = plant(g) if plant is not None else state.extraction.graph
        return Planted(planted["graph"])

    monkeypatch.setattr(phases, "modeled_extraction", modeled_extraction)
    return planted


def run(tmp_path, monkeypatch, choice, alternative, plant=other_form, **kwargs):
    fixed_profile(monkeypatch)
    timed = scripted(monkeypatch, choice, alternative)
    g = double_transpose()
    planted = planting(monkeypatch, g, plant)
    result = einsat.optimize(g, cost=cpu_model(path=tmp_path / "p.json"), **kwargs)
    return g, result, planted.get("graph"), timed


def test_the_alternative_is_returned_when_only_it_is_measured_faster(tmp_path, monkeypatch):
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=1.5, alternative=0.5)
    r, a = result.report, result.report.alternative
    assert timed == ["choice", "alternative"]
    assert result.graph is alt and r.kept_input is None and a["returned"] == "alternative"
    assert a["status"] == "compared" and a["verdict"]["faster"] and not a["choice"]["faster"]
    assert r.measured_speedup == pytest.approx(2.0) and r.measured["speedup"] == pytest.approx(2.0)
    assert r.verification.status == "proved" and r.ops_after == alt.op_counts()
    assert r.measured["predicted_ms"][1] == pytest.approx(result.report.cost_after / 1e3)
    assert set(a["modeled"]) == {"modeled", "measured"} and a["modeled"]["modeled"]["model"].endswith("h100")
    line = next(ln for ln in str(r).splitlines() if ln.strip().startswith("alternative"))
    assert "returned: the ALTERNATIVE" in line and "2.000x, faster" in line and "0.667x, not faster" in line
    assert result.contrib  # still written for onnxruntime
    assert json.loads(r.to_json())["alternative"]["verdict"]["speedup"] == pytest.approx(2.0)


def test_the_measured_choice_is_returned_when_only_it_is_measured_faster(tmp_path, monkeypatch):
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=0.5, alternative=1.5)
    a = result.report.alternative
    assert timed == ["choice", "alternative"] and a["returned"] == "measured choice"
    assert result.graph is not g and result.graph is not alt and not is_alternative(result.graph)
    assert result.report.measured_speedup == pytest.approx(2.0) and not a["verdict"]["faster"]
    assert "not measured faster" in a["kept_input"]


@pytest.mark.parametrize("choice, alternative, returned", [(0.8, 0.5, "alternative"), (0.5, 0.8, "measured choice")])
def test_the_better_of_two_faster_candidates_is_returned(tmp_path, monkeypatch, choice, alternative, returned):
    g, result, alt, _ = run(tmp_path, monkeypatch, choice=choice, alternative=alternative)
    a = result.report.alternative
    assert a["verdict"]["faster"] and a["choice"]["faster"] and a["returned"] == returned
    assert (result.graph is alt) == (returned == "alternative")
    assert result.report.measured_speedup == pytest.approx(2.0)


def test_the_input_is_returned_when_neither_is_measured_faster(tmp_path, monkeypatch):
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=1.5, alternative=1.2)
    r = result.report
    assert result.graph is g and timed == ["choice", "alternative"] and r.alternative["returned"] == "input"
    assert "not measured faster" in r.kept_input and "the modeled alternative (h100) was not returned" in r.kept_input
    assert r.measured_speedup == 1.0 and "returned: the INPUT program" in str(r)


def test_an_alternative_equal_to_the_measured_choice_is_not_timed_twice(tmp_path, monkeypatch):
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=0.5, alternative=None, plant=None)
    a = result.report.alternative
    assert timed == ["choice"] and a["status"] == "same as the measured choice" and a["verdict"] is None
    assert a["returned"] == "measured choice" and result.report.measured_speedup == pytest.approx(2.0)


def test_an_alternative_equal_to_the_input_is_neither_verified_nor_timed(tmp_path, monkeypatch):
    verified = []
    real = phases.checks.verify_equivalent
    monkeypatch.setattr(phases.checks, "verify_equivalent", lambda a, b, **k: verified.append(b) or real(a, b, **k))
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=0.5, alternative=None, plant=lambda g: g)
    a = result.report.alternative
    assert a["status"] == "same as the input" and timed == ["choice"] and alt not in verified
    assert a["returned"] == "measured choice"


def test_an_alternative_that_fails_verification_is_never_returned(tmp_path, monkeypatch):
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=1.5, alternative=None,
                                plant=lambda g: other_form(g, wrong=True))
    a, r = result.report.alternative, result.report
    assert a["status"] == "dropped" and a["why"].startswith("it failed verification") and a["verdict"] is None
    assert timed == ["choice"] and result.graph is g and a["returned"] == "input"
    assert any(ln.strip().startswith("alternative (h100 cost model): dropped: it failed verification")
               for ln in str(r).splitlines())


def test_a_budget_with_no_room_skips_the_alternative_and_says_so(tmp_path, monkeypatch):
    """The checks held back take more than the budget has (their estimate made huge): the
    alternative is skipped, never extracted nor timed, and the report says why."""
    monkeypatch.setattr(phases, "check_estimate", lambda predicted_us, reps: 1e6)
    g, result, alt, timed = run(tmp_path, monkeypatch, choice=0.5, alternative=None, budget=30)
    a = result.report.alternative
    assert alt is None and a["status"] == "skipped" and "had no room for it" in a["why"] and "alternative" not in timed
    assert a["returned"] in ("input", "measured choice")  # the search floored: which one is the clock's
    assert "held for the verifications and side-by-side checks" in a["why"]
