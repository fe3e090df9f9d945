"""An unpartitioned measured run (cost="cpu") times a third candidate after its measured choice
and its e-graph's modeled extraction: the program `einsat.optimize` returns without `cost=`, by a
run of its own under the default modeled cost model (`phases.modeled_whole`, as a partitioned
run does for its whole). Issue #37: on efficientnet_dynamo the default-cost file ran 1.04x-1.06x
its export on onnxruntime where cost="cpu" wrote the export unchanged; the measured run's e-graph,
grown by the measured model's generators, held another program than the default run's.

Nothing here depends on the clock or the machine: the profiler and the side-by-side verdicts are
scripts (`test_alternative`'s), and the modeled run is scripted (`runner.modeled_run` replaced)
where a test needs its program to be one thing or another; the last test runs it for real."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import einsat
from einsat.cost.target import cpu_model
from einsat.errors import EinsatError
from einsat.ir import GraphBuilder
from einsat.ir.registry import Op
from einsat.pipeline import measure, phases, runner
from einsat.pipeline.options import Options
from einsat.runtime.profiler import judge
from tests.pipeline.test_alternative import double_transpose, fixed_profile, is_alternative, planting

pytest.importorskip("onnxruntime")


def third_form(g):
    """relu(reshape(reshape(x)) @ w): what `g` computes, a program neither the measured choice nor
    the planted alternative is (its reshapes tell it apart)."""
    b = GraphBuilder("tt")
    x = b.input("x", (32, 48))
    flat = b.reshape(b.reshape(x, shape=(32 * 48,)), shape=(32, 48))
    return b.build(b.relu(b.matmul(flat, b.weight("w", g.weights["w"]))), names=list(g.outputs))


def is_run(g) -> bool:
    return any(n.op is Op.RESHAPE for n in g.nodes)


def scripted(monkeypatch, factors: dict):
    """The side-by-side check as a script: a candidate's time is the input's times its factor
    ("choice", "alternative", "run"; a missing one must never be timed); returns those timed, in order."""
    timed = []

    def check_measured(model, a, b, reps):
        which = "run" if is_run(b) else "alternative" if is_alternative(b) else "choice"
        assert which in factors, f"the {which} was timed"
        timed.append(which)
        base = [1000.0 + k for k in range(15)]
        return judge(base, [v * factors[which] for v in base])

    monkeypatch.setattr(measure, "check_measured", check_measured)
    return timed


def modeled_as(monkeypatch, program, recipe=None) -> list:
    """The modeled run scripted: `program(graph)` is what it returns (None: the run raises);
    returns the options it was called with, one per call."""
    calls = []

    def modeled_run(graph, examples, options, split):
        calls.append(options)
        if program is None:
            raise EinsatError("scripted: the modeled run failed")
        return SimpleNamespace(graph=program(graph), recipe=recipe, report=SimpleNamespace(verification=None))

    monkeypatch.setattr(runner, "modeled_run", modeled_run)
    return calls


def run(tmp_path, monkeypatch, factors, program=third_form, recipe=None, **kwargs):
    fixed_profile(monkeypatch)
    timed = scripted(monkeypatch, factors)
    g = double_transpose()
    planted = planting(monkeypatch, g)
    calls = modeled_as(monkeypatch, program, recipe)
    result = einsat.optimize(g, cost=cpu_model(path=tmp_path / "p.json"), **kwargs)
    return g, result, planted.get("graph"), timed, calls


def test_the_modeled_run_is_returned_when_only_it_is_measured_faster(tmp_path, monkeypatch):
    g, result, alt, timed, calls = run(tmp_path, monkeypatch, {"choice": 1.5, "alternative": 1.2, "run": 0.5})
    r, m = result.report, result.report.modeled_run
    assert timed == ["choice", "alternative", "run"] and is_run(result.graph) and r.kept_input is None
    assert m["kind"] == "modeled run" and m["status"] == "compared" and m["returned"] == "modeled run"
    assert r.alternative["returned"] == "modeled run"  # both records name the candidate returned
    assert m["verdict"]["faster"] and not m["choice"]["faster"] and r.measured_speedup == pytest.approx(2.0)
    assert r.ops_after == result.graph.op_counts() and r.ops_after.get("reshape") == 2
    (options,) = calls  # the default cost, unmeasured, in fp32: what `einsat.optimize(g)` runs
    assert options.model().name.endswith("h100") and options.measuring.not_slower_at == ()
    line = next(ln for ln in str(r).splitlines() if ln.strip().startswith("modeled run"))
    assert "measured 2.000x, faster" in line and "before it 0.667x, not faster" in line
    assert "returned: the MODELED RUN" in line
    assert json.loads(r.to_json())["modeled_run"]["verdict"]["speedup"] == pytest.approx(2.0)
    assert result.contrib  # still written for onnxruntime


def test_the_better_candidate_stays_when_the_modeled_run_gains_less(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {"choice": 0.5, "alternative": 0.8, "run": 0.8})
    m = result.report.modeled_run
    assert timed == ["choice", "alternative", "run"] and not is_run(result.graph) and result.graph is not g
    assert m["returned"] == "measured choice" and result.report.alternative["returned"] == "measured choice"
    assert m["kept_input"] == "measured 1.25x, the measured choice 2.00x"
    assert result.report.measured_speedup == pytest.approx(2.0) and result.report.kept_input is None


def test_the_modeled_run_weighed_against_a_returned_alternative(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {"choice": 1.5, "alternative": 0.5, "run": 0.8})
    m = result.report.modeled_run
    assert result.graph is alt and m["returned"] == "alternative" and result.report.alternative["returned"] == \
        "alternative"
    assert m["kept_input"] == "measured 1.25x, the modeled alternative 2.00x"


def test_the_input_is_returned_when_no_candidate_is_measured_faster(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {"choice": 1.5, "alternative": 1.2, "run": 1.1})
    r = result.report
    assert result.graph is g and timed == ["choice", "alternative", "run"] and r.modeled_run["returned"] == "input"
    assert "the modeled modeled run" not in r.kept_input
    assert "the modeled alternative (h100) was not returned either" in r.kept_input
    assert "the modeled run (h100) was not returned either" in r.kept_input


@pytest.mark.parametrize("same, status", [("choice", "same as the measured choice"),
                                          ("alternative", "same as the measured choice"),
                                          ("input", "same as the input")])
def test_a_modeled_run_already_timed_or_the_input_is_not_timed(tmp_path, monkeypatch, same, status):
    picked = {}

    def program(graph):
        return picked[same]
    fixed_profile(monkeypatch)
    timed = scripted(monkeypatch, {"choice": 0.5, "alternative": 1.2})
    g = double_transpose()
    planted = planting(monkeypatch, g)
    real = phases.check

    def check(state, candidate, what="the result"):  # the candidates as they are made
        picked.update(input=state.graph, choice=state.extraction.graph, alternative=planted.get("graph"))
        return real(state, candidate, what)
    monkeypatch.setattr(phases, "check", check)
    modeled_as(monkeypatch, program)
    result = einsat.optimize(g, cost=cpu_model(path=tmp_path / "p.json"))
    m = result.report.modeled_run
    assert timed == ["choice", "alternative"] and m["status"] == status and m["verdict"] is None
    assert m["returned"] == "measured choice" and result.report.measured_speedup == pytest.approx(2.0)


def test_the_modeled_runs_recipe_is_the_results(tmp_path, monkeypatch):
    """Where the modeled run's program is returned, the new weights are made by its recipe (the
    measured run's e-graph did not make that program)."""
    from einsat.optimize import run as optimize_run
    b = GraphBuilder("made")
    made = b.build(b.relu(b.input("w", (48, 16))))
    fixed_profile(monkeypatch)
    scripted(monkeypatch, {"choice": 1.5, "alternative": 1.2, "run": 0.5})
    g = double_transpose()
    planting(monkeypatch, g)
    calls = modeled_as(monkeypatch, third_form, recipe=made)
    result = optimize_run(g, None, Options.of(cost=cpu_model(path=tmp_path / "p.json")).replace(recipe=True))
    assert is_run(result.graph) and result.recipe is made and calls[0].recipe


def test_no_modeled_run_without_a_measured_model_nor_in_a_piece(tmp_path, monkeypatch):
    calls = modeled_as(monkeypatch, third_form)
    result = einsat.optimize(double_transpose())  # the default cost: that run is this one
    assert result.report.modeled_run is None and calls == []
    assert not any(ln.strip().startswith("modeled run") for ln in str(result.report).splitlines())
    # a piece of a partitioned run is run without `split`: its whole has the modeled run (`modeled_whole`)
    fixed_profile(monkeypatch)
    scripted(monkeypatch, {"choice": 0.5, "alternative": 0.5})
    planting(monkeypatch, double_transpose())
    piece = runner.run(double_transpose(), None, Options.of(cost=cpu_model(path=tmp_path / "p.json")))
    assert piece.report.modeled_run is None and calls == []


def test_a_modeled_run_that_fails_is_dropped_and_says_why(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {"choice": 0.5, "alternative": 1.2}, program=None)
    m = result.report.modeled_run
    assert m["status"] == "dropped" and m["why"] == "its run failed (scripted: the modeled run failed)"
    assert m["returned"] == "measured choice" and timed == ["choice", "alternative"]
    assert "modeled run (h100 cost model): dropped: its run failed" in str(result.report)


def test_a_budget_with_no_room_skips_the_modeled_run_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(phases, "MIN_MODELED_S", 1e9)
    g, result, alt, timed, calls = run(tmp_path, monkeypatch, {"choice": 0.5, "alternative": 1.2}, budget=600)
    m = result.report.modeled_run
    assert calls == [] and m["status"] == "skipped" and m["why"].startswith("the budget (600 s) had no room for it")
    assert "run" not in timed


def test_a_modeled_run_keeps_to_what_the_budget_leaves_beside_its_check(tmp_path, monkeypatch):
    g, result, alt, timed, calls = run(tmp_path, monkeypatch, {"choice": 1.5, "alternative": 1.2, "run": 0.5},
                                       budget=600)
    (options,) = calls
    assert 0 < options.budget < 600 and result.report.modeled_run["returned"] == "modeled run"


def test_the_modeled_run_is_the_program_the_default_cost_returns(tmp_path, monkeypatch):
    """Not scripted: the default cost's run of the program, whose result is what `einsat.optimize`
    returns without `cost=` (the search is deterministic), timed against the input where it is
    neither the input nor a candidate already timed, and verified by its run."""
    g = double_transpose()
    default = einsat.optimize(g)
    fixed_profile(monkeypatch)
    timed = []
    real = measure.check_measured

    def check_measured(model, a, b, reps):
        timed.append(b)
        return real(model, a, b, 3)
    monkeypatch.setattr(measure, "check_measured", check_measured)
    result = einsat.optimize(g, cost=cpu_model(path=tmp_path / "p.json"))
    m = result.report.modeled_run
    assert m["status"] in ("compared", "same as the measured choice", "same as the input"), m
    assert m["ops"] == default.graph.op_counts() and m["model"] == "h100"
    # timed once: as the modeled run's program, or before it as the measured choice or the alternative
    assert sum(phases.checks.same_program(b, default.graph) for b in timed) == (m["status"] != "same as the input")
    assert m["status"] != "compared" or phases.checks.same_program(timed[-1], default.graph)
    if m["returned"] == "modeled run":
        assert phases.checks.same_program(result.graph, default.graph) and result.report.verification
