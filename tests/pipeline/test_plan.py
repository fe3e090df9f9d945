"""The budget planner (`einsat.pipeline.plan`): every phase of a run takes its seconds from one
place, profiling and the measured choice included, and a small budget holds for all of them.

The measured run here uses scripted timings (a profiler that "takes" `PER_SIG` seconds per
signature, and a side-by-side check that takes `CHECK_S`): real onnxruntime timings on a loaded
machine would make the seconds, not the planner, decide what the test sees."""

from __future__ import annotations

import sys
import time

import pytest

import einsat
from einsat.budget import Budget
from einsat.cost.target import cpu_model
from einsat.egraph import Limits
from einsat.ir import GraphBuilder
from einsat.pipeline import Options, Planner, measure
from einsat.pipeline.plan import CHOICE_S, EXTRACT_S, FLOORS, PROFILE_S, SHARES
from einsat.runtime.profiler import Comparison, ProfileRun

PER_SIG = 0.15   # seconds the scripted profiler takes per signature
CHECK_S = 0.2    # seconds the scripted side-by-side check takes


def block():
    b = GraphBuilder("block", seed=1)
    x = b.input("x", (32, 64))
    h = b.relu(b.add(b.matmul(x, b.weight("w1", (64, 64))), b.matmul(x, b.weight("w2", (64, 64)))))
    y = b.sigmoid(b.matmul(b.transpose(b.transpose(h, perm=(1, 0)), perm=(1, 0)), b.weight("w3", (64, 32))))
    return b.build(b.mul(y, b.tanh(y)))


CALLERS = {"profile_input": "profile", "profile_candidates": "profile", "choose": "choose", "check": "check",
           "check_alternative": "alternative"}  # the modeled alternative's check (#37): the check's second grant


def caller() -> str | None:
    """The planner's phase whose code called the profiler (the nearest on the stack; "modeled":
    the modeled run's check, `phases.modeled_whole`, the check's last grant)."""
    frame = sys._getframe(2)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    if "modeled_whole" in names:
        return "modeled"
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in CALLERS:
            return CALLERS[frame.f_code.co_name]
        frame = frame.f_back
    return None


def scripted_profiler(calls: list):
    """`runtime.profiler.profile_signatures` as a script: each signature takes PER_SIG seconds
    (a modeled figure as its time), checked against the budget before each, as the real loop
    checks before each batch. `calls` gets (phase, budget_s, seconds, timed, left) per call."""
    def profile_signatures(sigs, reps=15, budget_s=None, progress=None, **kwargs):
        phase = caller()
        start, run = time.monotonic(), ProfileRun()
        todo = list(sigs)
        while todo:
            if budget_s is not None and time.monotonic() - start > budget_s:
                run.left = todo
                break
            sig = todo.pop(0)
            time.sleep(PER_SIG)
            run.entries[sig.key] = {"us": 1.0 if len(sig.key) % 2 else 1000.0}  # fast rates: optimism pays
        run.seconds = time.monotonic() - start
        calls.append((phase, budget_s, run.seconds, len(run.entries), len(run.left)))
        return run
    return profile_signatures


def verdict(*args, **kwargs) -> Comparison:
    time.sleep(CHECK_S)
    return Comparison(1.0, 0.9, (0.9, 1.1), (0.8, 1.0), 15, 12, 0.01, (0, 0), True, "onnxruntime")


def test_without_a_budget_every_phase_gets_its_cap():
    p = Planner.of(Options())
    assert [p.seconds(x) for x in ("profile", "saturate", "extract", "choose", "check", "pieces")] == \
        [PROFILE_S, Limits().time_s, EXTRACT_S, CHOICE_S, None, None]
    p = Planner.of(Options.of(measure=einsat.Measure(profile_s=7), limits=Limits(time_s=3, extract_s=2)))
    assert (p.seconds("profile"), p.seconds("extract"), p.seconds("saturate")) == (7, 2, 3)
    assert p.hold("verify", 10) == 0.0 and p.budget.remaining() == float("inf")


def test_with_a_budget_a_phase_gets_its_share_of_what_is_left():
    p = Planner.of(Options(budget=150))
    assert p.seconds("saturate") == Limits().time_s  # the cap binds: 60 < 75
    left = p.budget.remaining()
    assert p.seconds("profile") == pytest.approx(SHARES["profile"] * left, abs=0.05)
    assert p.seconds("pieces", rounds=4) == pytest.approx(SHARES["pieces"] * left / 4, abs=0.05)
    held = p.hold("verify", 60)
    assert held == 60 and p.seconds("extract") == pytest.approx(min(EXTRACT_S, 0.8 * (left - 60)), abs=0.05)
    assert p.seconds("choose") == pytest.approx(SHARES["choose"] * (left - 60), abs=0.05)
    p.release("verify")
    assert p.budget.reserved == 0 and p.budget.remaining() > 149
    p.budget.cancel()  # nothing left: the floors, so that a phase can still return its best
    assert [p.seconds(x) for x in ("saturate", "extract", "pieces", "profile")] == \
        [FLOORS["saturate"], FLOORS["extract"], FLOORS["pieces"], 0.0]
    assert p.grants["extract"] == [pytest.approx(min(EXTRACT_S, 0.8 * (left - 60)), abs=0.05), FLOORS["extract"]]


def test_the_measured_choice_keeps_to_its_seconds(tmp_path, monkeypatch):
    """`measure.choose` times what the extraction chose within `seconds`; without them, its own
    ways' 60 s (here 1.5 s) are its only bound."""
    from einsat.ir import Op, TensorType
    from einsat.ir.signature import signature_of
    calls = []
    monkeypatch.setattr(measure, "profile_signatures", scripted_profiler(calls))
    monkeypatch.setattr(measure, "PROFILE_REPS", 1)
    pool = iter([signature_of(Op.RELU, {}, [TensorType((k, 8))]) for k in range(1, 1000)])

    class Chosen:  # each extraction chooses 4 ops the profile has not seen yet
        graph = None

        def __init__(self):
            self.sigs = [next(pool) for _ in range(4)]

    monkeypatch.setattr(measure, "signatures_of_graph", lambda graph: extracted[-1].sigs)
    extracted = []

    def extract():
        extracted.append(Chosen())
        return extracted[-1]

    def choose(seconds):  # the seconds its timing took (the scripted profiler's), and its summary
        model = cpu_model(path=tmp_path / f"{seconds}.json")
        summary = measure.ProfileSummary("onnxruntime", model.path, 40, 0, 0, 0, 40, 0.0, 0.0, 0.0)
        calls.clear()
        _, after = measure.choose(model, extract, summary, budget_s=1.5, seconds=seconds)
        return sum(c[2] for c in calls), after

    bounded, summary = choose(0.4)
    assert 0 < summary.chosen and bounded <= 0.4 + PER_SIG + 0.1
    free, summary = choose(None)
    assert free >= 1.5 > bounded + PER_SIG  # each way's own 1.5 s: the bound above was the phase's


@pytest.mark.slow  # make test stays within 6 minutes (its time moved to make test-slow)
def test_a_measured_run_keeps_every_phase_inside_a_small_budget(tmp_path, monkeypatch):
    """cost="cpu" with a 5 s budget: profiling (the input's ops, then the candidates', at most
    `profile_budget`), saturation, extraction, the measured choice and the check each get a share
    of what is left when they start, never more, and keep to it: the scripted timings by the
    seconds they took, saturation by its phases (egglog's set-up and one phase cannot be cut,
    and on a loaded machine the set-up alone took seconds: the clock would say how busy the
    machine was, not what the planner did)."""
    budget_s = 5.0
    calls, planners = [], []
    monkeypatch.setattr(measure, "profile_signatures", scripted_profiler(calls))
    monkeypatch.setattr(measure, "check_measured", verdict)
    real_of = Planner.of.__func__
    monkeypatch.setattr(Planner, "of", classmethod(lambda cls, *a, **k: planners.append(real_of(cls, *a, **k))
                                                   or planners[-1]))
    model = cpu_model(path=tmp_path / "p.json")
    result = einsat.optimize(block(), cost=model, budget=budget_s, limits=Limits(nodes=3000, iterations=3),
                             measure=einsat.Measure(profile_s=1.2), partition=False)
    r, plan = result.report, planners[0]  # the run's own (the modeled run, a run of its own, has the next)
    took, granted = plan.took, plan.granted
    assert set(took) >= {"load", "reference", "profile", "saturate", "extract", "choose", "verify", "check"}
    # a modeled alternative other than the measured choice (#37) is checked too: a second grant of the check's,
    # and the default cost's run of the whole (its own budget: what was left less a check's seconds) a third
    alternative, modeled = r.alternative["status"] == "compared", r.modeled_run["status"] == "compared"
    assert r.alternative["status"] in ("compared", "same as the measured choice", "same as the input"), r.alternative
    assert r.modeled_run["status"] in ("compared", "same as the measured choice", "same as the input", "skipped"), \
        r.modeled_run
    assert len(planners) == 1 + (r.modeled_run["status"] != "skipped")
    assert [phase for phase, *_ in plan.log if phase != "extract"] == \
        ["profile", "saturate", "choose", "check"] + ["check"] * alternative + ["check"] * modeled
    # each phase was given a share of what was left then (what later phases need held back), never more
    for phase, given, left in plan.log:
        assert given <= max(left, 0.0) * SHARES[phase] + FLOORS.get(phase, 0.0) + 1e-9, (phase, given, left)
    assert granted["profile"] <= 1.2 and plan.held == {} and plan.budget.reserved == 0
    # profiling left signatures to the roofline, and the measured choice timed some of them
    assert r.profile["left"] > 0 and r.profile["chosen"] > 0, (calls, r.profile)
    grants = {**granted, "check": plan.grants["check"][0], "alternative": plan.grants["check"][1] if alternative
              else 0.0, "modeled": plan.grants["check"][-1] if modeled else 0.0}
    # the scripted timings: each phase's profiling took at most its grant
    for phase in ("profile", "choose", "check", "alternative", "modeled"):
        spent = sum(seconds for p, _, seconds, *_ in calls if p == phase)
        assert spent <= (grants[phase] or 0.0) + PER_SIG + 0.1, (phase, spent, grants[phase], calls)
    assert all(b is not None and b <= granted["profile"] + 1e-9 for p, b, *_ in calls if p == "profile")
    assert took["choose"] > 0 and took["check"] >= CHECK_S and "measure" in r.times  # the check ran
    # saturation starts no phase once its share is spent: all but the last ran within it
    assert sum(p["time_s"] for p in r.saturation.phases[:-1]) <= granted["saturate"]
    assert all(0 < g <= EXTRACT_S for g in plan.grants["extract"]) and r.verified
    # the same run without a budget: the phases get their caps, and the scripted profiler times everything
    calls.clear()
    planners.clear()
    free = einsat.optimize(block(), cost=cpu_model(path=tmp_path / "q.json"), limits=Limits(nodes=3000, iterations=3),
                           partition=False)
    assert planners[0].granted["profile"] == PROFILE_S and planners[0].granted["check"] is None
    assert free.report.profile["left"] == 0 and free.report.profile["chosen"] == 0 == planners[0].took["choose"]


def test_a_cli_run_holds_the_writing_back_and_writes_within_its_budget(tmp_path, monkeypatch):
    from einsat.cli import main
    from tests.cli.test_optimize import small_model
    planners = []
    real_init = Planner.__init__

    def recording(self, *a, **k):
        real_init(self, *a, **k)
        planners.append(self)
    monkeypatch.setattr(Planner, "__init__", recording)
    small_model(tmp_path / "m.onnx")
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q", "--budget", "30"]) == 0
    command = planners[0]  # the command's own: reading and writing; the run's is the next one
    assert "write" in command.took and command.budget.reserved == 0 and command.held == {}
    assert isinstance(command.budget, Budget) and command.budget.seconds == 30
