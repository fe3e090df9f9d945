"""`Measure(not_slower_at=)`: a result measured faster at the deployment thread count is timed again
at each other count the file will run at, and returned only if it is not measured slower beyond
noise there (issue #37: a cost="cpu" file chosen at 2 intra-op threads, onnxruntime's Attention
inside, ran 1.08x its input at 2 threads and 0.96x at 1).

Nothing here depends on the clock or the machine: the profiler is a script, the side-by-side
verdicts are scripted per program and per thread count (the model the check is given says the
count), and the modeled alternative is planted (test_alternative's helpers)."""

from __future__ import annotations

import json
import os

import pytest

import einsat
from einsat.cli import parser
from einsat.cli.optimize import options_of
from einsat.cost.target import cpu_model
from einsat.errors import EinsatError
from einsat.pipeline import measure, phases
from einsat.runtime.profiler import judge
from tests.pipeline.test_alternative import double_transpose, fixed_profile, is_alternative, other_form, planting

pytest.importorskip("onnxruntime")


def scripted(monkeypatch, factors: dict):
    """The check as a script: `factors[(which, threads)]` is the candidate's time over the
    input's ("choice" or "alternative"; a missing key: that check must never run); returns the
    checks run, in order, as (which, threads, the verdicts file)."""
    timed = []

    def check_measured(model, a, b, reps):
        which = "alternative" if is_alternative(b) else "choice"
        key = (which, model.threads)
        assert key in factors, f"the {which} was timed at {model.threads} thread(s)"
        timed.append((which, model.threads, measure.verdicts_path(model)))
        base = [1000.0 + k for k in range(15)]
        return judge(base, [v * factors[key] for v in base])

    monkeypatch.setattr(measure, "check_measured", check_measured)
    return timed


def run(tmp_path, monkeypatch, factors, plant=other_form, threads=2, **measure_kwargs):
    fixed_profile(monkeypatch)
    timed = scripted(monkeypatch, factors)
    g = double_transpose()
    planted = planting(monkeypatch, g, plant)
    result = einsat.optimize(g, cost=cpu_model(path=tmp_path / "p.json", threads=threads),
                             measure=einsat.Measure(**measure_kwargs))
    return g, result, planted.get("graph"), [(w, t) for w, t, _ in timed], timed


def test_a_result_slower_at_another_count_is_not_returned(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {("choice", 2): 0.5, ("choice", 1): 1.25,
                                                           ("alternative", 2): 1.5}, not_slower_at=(1,))
    r = result.report
    assert timed == [("choice", 2), ("choice", 1), ("alternative", 2)]
    assert result.graph is g and r.alternative["returned"] == "input"
    assert "slower beyond noise at 1" in r.kept_input and "Measure(not_slower_at=)" in r.kept_input
    measured = next(ln for ln in str(r).splitlines() if ln.strip().startswith("measured on"))
    assert "2.000x measured" in measured and "at 1 intra-op thread: 0.800x, SLOWER (0/15 rounds)" in measured
    other = json.loads(r.to_json())["measured"]["other_threads"]
    assert [(o["threads"], o["slower"]) for o in other] == [(1, True)] and other[0]["speedup"] == pytest.approx(0.8)


def test_the_alternative_not_slower_at_the_other_count_is_returned_instead(tmp_path, monkeypatch):
    """The measured choice gains more at 2 threads but loses at 1; the alternative gains at 2 and
    holds at 1: the alternative is the file."""
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {("choice", 2): 0.4, ("choice", 1): 1.2,
                                                           ("alternative", 2): 0.8, ("alternative", 1): 1.0},
                                   not_slower_at=(1,))
    a = result.report.alternative
    assert timed == [("choice", 2), ("choice", 1), ("alternative", 2), ("alternative", 1)]
    assert result.graph is alt and a["returned"] == "alternative" and result.report.kept_input is None
    assert result.report.measured_speedup == pytest.approx(1.25)
    assert [(o["threads"], o["slower"]) for o in a["verdict"]["other_threads"]] == [(1, False)]
    assert [(o["threads"], o["slower"]) for o in a["choice"]["other_threads"]] == [(1, True)]
    line = next(ln for ln in str(result.report).splitlines() if ln.strip().startswith("alternative"))
    assert "at 1 intra-op thread: 1.000x, not slower" in line and "at 1 intra-op thread: 0.833x, SLOWER" in line


def test_every_count_is_checked_and_the_verdicts_kept_beside_the_profile(tmp_path, monkeypatch):
    g, result, alt, timed, raw = run(tmp_path, monkeypatch, {("choice", 4): 0.5, ("choice", 1): 0.9,
                                                             ("choice", 2): 1.01, ("alternative", 4): 1.5},
                                     threads=4, not_slower_at=(1, 2, 4, 1))
    assert timed == [("choice", 4), ("choice", 1), ("choice", 2), ("alternative", 4)]
    assert result.graph is not g and result.graph is not alt and result.report.kept_input is None
    folders = {os.path.dirname(path) for _, _, path in raw}
    assert folders == {str(tmp_path)} and len({path for _, _, path in raw}) == 3  # one file per count
    assert all(os.path.exists(path) for _, _, path in raw)
    measured = next(ln for ln in str(result.report).splitlines() if ln.strip().startswith("measured on"))
    assert "at 1 intra-op thread: 1.111x, not slower" in measured and "at 2 intra-op threads: 0.990x, not slower" \
        in measured


def test_a_kept_verdict_at_the_other_count_is_used_again(tmp_path, monkeypatch):
    factors = {("choice", 2): 0.5, ("choice", 1): 1.25, ("alternative", 2): 1.5}
    run(tmp_path, monkeypatch, factors, not_slower_at=(1,))
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, factors, not_slower_at=(1,))
    assert timed == [] and result.graph is g
    other = result.report.measured["other_threads"]
    assert other[0]["slower"] and other[0]["measured_at"]


def test_without_other_counts_only_the_deployment_count_is_timed(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {("choice", 2): 0.5, ("alternative", 2): 1.5})
    assert timed == [("choice", 2), ("alternative", 2)] and result.graph is not g
    assert not result.report.measured.get("other_threads")
    assert "intra-op thread:" not in str(result.report)


def test_a_result_not_faster_is_not_timed_at_other_counts(tmp_path, monkeypatch):
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {("choice", 2): 1.0, ("alternative", 2): 1.5},
                                   not_slower_at=(1,))
    assert timed == [("choice", 2), ("alternative", 2)] and result.graph is g


def test_the_not_slower_rule_of_pieces_times_no_other_count(tmp_path, monkeypatch):
    """keep="not slower" is what a partitioned run gives its pieces: their stitched whole is the
    one checked at the other counts, not each piece."""
    g, result, alt, timed, _ = run(tmp_path, monkeypatch, {("choice", 2): 0.5, ("alternative", 2): 1.5},
                                   not_slower_at=(1,), keep="not slower")
    assert timed == [("choice", 2), ("alternative", 2)] and result.graph is not g


def test_other_counts_at_another_thread_count_keep_to_the_profile_folder(tmp_path):
    model = cpu_model(path=tmp_path / "deep" / "p.json", threads=2)
    one = measure.at_threads(model, 1)
    assert one.threads == 1 and os.path.dirname(one.path) == str(tmp_path / "deep") and one.path != model.path
    assert {k: v for k, v in one.machine.items() if k != "threads"} == \
        {k: v for k, v in model.machine.items() if k != "threads"}
    assert measure.at_threads(model, 2) is model


@pytest.mark.parametrize("value", [0, -1, "1", (1, 0), (True,), 1.5, None])
def test_bad_thread_counts_are_clear_errors(value):
    with pytest.raises(EinsatError, match=r"not_slower_at="):
        einsat.Measure(not_slower_at=value)


def test_thread_counts_are_normalized():
    assert einsat.Measure(not_slower_at=1).not_slower_at == (1,)
    assert einsat.Measure(threads=2, not_slower_at=[1, 2, 1, 4]).not_slower_at == (1, 2, 4)  # 2 skipped at the check


def test_a_model_that_does_not_measure_onnxruntime_refuses_them():
    with pytest.raises(EinsatError, match="does not measure onnxruntime"):
        einsat.optimize(double_transpose(), cost="h100", measure=einsat.Measure(not_slower_at=(1,)))


def test_the_command_line_flag():
    parse = parser().parse_args
    args = parse(["optimize", "m.onnx", "-o", "o.onnx", "--cost", "cpu", "--threads", "2", "--not-slower-at", "1,4"])
    assert options_of(args).measuring.not_slower_at == (1, 4)
    assert options_of(parse(["optimize", "m.onnx", "-o", "o.onnx"])).measure is None
    for bad in ("0", "1,x", ""):
        args = parse(["optimize", "m.onnx", "-o", "o.onnx", "--not-slower-at", bad])
        with pytest.raises(EinsatError, match="--not-slower-at takes positive thread counts"):
            options_of(args)


def test_a_budget_holds_seconds_for_the_checks_at_the_other_counts(tmp_path):
    """The planner holds, for a check, its rounds at the deployment count and at each other count,
    a program taking up to twice as long at 1 thread as at 2."""
    from einsat.pipeline.plan import check_estimate
    model = cpu_model(path=tmp_path / "p.json", threads=2)
    plain = einsat.pipeline.Options(cost=model)
    guarded = einsat.pipeline.Options(cost=model, measure=einsat.Measure(not_slower_at=(1, 2, 4)))
    reps = measure.CHECK_REPS
    assert phases.measured_check_estimate(model, plain, 50_000) == check_estimate(50_000, reps)
    assert phases.measured_check_estimate(model, guarded, 50_000) == pytest.approx(
        check_estimate(50_000, reps) + check_estimate(100_000, reps) + check_estimate(50_000, reps))
