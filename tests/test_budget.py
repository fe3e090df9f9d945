"""A run's time budget and its cancellation: the library stops early and keeps the best program."""

import importlib
import os
import signal
import time

import numpy as np
import pytest

import einsat
from einsat.budget import Budget
from einsat.egraph import Limits, Session, StopReason
from einsat.extract.ilp_watch import FLAT_CHECKS, IlpWatch
from einsat.ir import GraphBuilder
from einsat.rewrites.schedule import default_schedule


def block():
    b = GraphBuilder("block")
    x = b.input("x", (8, 16))
    w1, w2 = b.weight("w1", (16, 16)), b.weight("w2", (16, 16))
    return b.build(b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2))))


def test_a_budget_counts_down_and_cancels():
    b = Budget(0.2)
    assert 0 < b.remaining() <= 0.2 and not b.exhausted
    b.cancel()
    assert b.exhausted and b.remaining() == 0
    assert Budget().remaining() == float("inf")
    with pytest.raises(ValueError):
        Budget(0)


def test_first_ctrl_c_cancels_the_budget_second_raises():
    b = Budget()
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a job a non-interactive shell started in the background
    with b.interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs between bytecodes
        assert b.cancelled
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_cancelled_budget_stops_saturation_before_its_next_phase():
    s = Session(Limits(nodes=5000, iterations=10, time_s=30))
    s.add_graph(block())
    b = Budget()
    b.cancel()
    report = s.run(default_schedule(), budget=b)
    assert report.stop_reason is StopReason.INTERRUPTED and not report.phases


def test_an_interrupted_optimize_returns_the_best_program_verified(monkeypatch):
    """Ctrl-C during saturation (here: the budget cancelled by the first phase's progress)."""
    optimize_module = importlib.import_module("einsat.pipeline.phases")  # the run's phases
    budget = Budget()
    real = optimize_module.saturate

    def saturate(graph, rules, limits, model, notify, run):
        def cancel_after_first(event):
            if event.step is not None:
                budget.cancel()
            notify(event)
        return real(graph, rules, limits, model, cancel_after_first, run)

    monkeypatch.setattr(optimize_module, "saturate", saturate)
    g = block()
    result = einsat.optimize(g, budget=budget)
    r = result.report
    assert r.interrupted and r.verified and r.saturation.stop_reason == "interrupted"
    assert len(r.saturation.phases) == 1
    assert "interrupted" in str(r) and r.cost_after <= r.cost_before
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(einsat.run(result.graph, {"x": x})[g.outputs[0]],
                               einsat.run(g, {"x": x})[g.outputs[0]], rtol=1e-5, atol=1e-5)


def test_a_whole_run_budget_bounds_saturation_and_extraction():
    result = einsat.optimize(block(), budget=1.0)
    # no phase starts once saturation's share (0.5 s) is spent: the phases before the last one ran
    # within it. (Its wall seconds also hold the session's set-up, which took 2-3 s under a loaded
    # make test, #27 item 5: the clock says how busy the machine was, not what the budget did.)
    sat = result.report.saturation
    assert sum(p["time_s"] for p in sat.phases[:-1]) <= 0.5
    assert sat.stop_reason in ("time limit", "saturated", "iteration limit"), sat.stop_reason
    assert result.report.verified


class Event:
    """What HiGHS hands a callback: its outputs, and an interrupt flag."""

    class Out:
        objective_function_value = mip_primal_bound = 10.0
        mip_dual_bound = 5.0

    def __init__(self, nodes: int = 0):
        self.data_out = self.Out()
        self.data_out.mip_node_count = nodes  # branch-and-bound nodes so far
        self.interrupted = False

    def interrupt(self):
        self.interrupted = True


def test_the_ilp_watch_stops_when_no_better_program_comes():
    messages = []
    watch = IlpWatch(progress=lambda m, c: messages.append(m), stall_nodes=50)
    watch._on_solution(Event(nodes=0))
    e = Event(nodes=50)
    watch._on_interrupt(e)
    assert not e.interrupted and messages == ["better program found: 10.00"]
    time.sleep(0.12)  # the clock decides nothing: 50 nodes without a better program is not a stall
    watch._on_interrupt(e)
    assert not e.interrupted
    e = Event(nodes=51)
    watch._on_interrupt(e)
    assert e.interrupted and watch.reason == "stopped improving"


def test_the_ilp_watch_waits_as_many_nodes_as_the_incumbent_took():
    watch = IlpWatch(stall_nodes=50)
    better = Event(nodes=300)
    better.data_out.objective_function_value = 9.0
    watch._on_solution(better)
    for nodes, stops in [(600, False), (601, True)]:
        e = Event(nodes=nodes)
        watch._on_interrupt(e)
        assert e.interrupted == stops


def bound_event(dual: float, nodes: int = 0) -> "Event":
    e = Event(nodes)
    e.data_out.mip_dual_bound = dual
    return e


def test_the_ilp_watch_stops_at_the_root_when_the_lp_bound_stays_below_the_lower_bound():
    """HiGHS's root bound flat below the combinatorial lower bound (`weak_bound`) for
    `FLAT_CHECKS` checks, no better program than the start: the solve stops, by work (checks)."""
    watch = IlpWatch(weak_bound=8.0)
    watch._on_solution(Event())  # the start, handed to HiGHS

    def check(w, dual, nodes=0):
        e = bound_event(dual, nodes)
        w._on_interrupt(e)
        return e.interrupted

    assert not check(watch, float("-inf"))  # no LP yet
    assert not any(check(watch, 6.0 + k / 100) for k in range(FLAT_CHECKS + 5))  # still rising: cut rounds at work
    assert [check(watch, 6.5) for _ in range(FLAT_CHECKS + 1)] == [False] * FLAT_CHECKS + [True]  # a rise, then flat
    assert watch.reason == "stopped: LP bound weak"

    strong = IlpWatch(weak_bound=8.0)  # flat at or above the lower bound: the LP can prove something
    strong._on_solution(Event())
    assert not any(check(strong, 8.0) for _ in range(3 * FLAT_CHECKS))
    better = IlpWatch(weak_bound=8.0)  # a better program than the start came at the root: solved on
    better._on_solution(Event())
    check(better, 6.5)
    found = Event()
    found.data_out.objective_function_value = 9.5
    better._on_solution(found)
    assert not any(check(better, 6.5) for _ in range(3 * FLAT_CHECKS)) and better.reason is None
    off_root = IlpWatch(weak_bound=8.0)  # past the root the node bounds decide
    off_root._on_solution(Event())
    assert not any(check(off_root, 6.5, nodes=1) for _ in range(3 * FLAT_CHECKS))
    unbounded = IlpWatch()  # no lower bound given: never
    unbounded._on_solution(Event())
    assert not any(check(unbounded, -1e9) for _ in range(3 * FLAT_CHECKS))


@pytest.mark.parametrize("cancel,reason", [(True, "interrupted"), (False, "time limit")])
def test_the_ilp_watch_stops_on_the_runs_budget(cancel, reason):
    b = Budget(0.01)
    if cancel:
        b.cancel()
    time.sleep(0.02)
    e = Event()
    watch = IlpWatch(b)
    watch._on_interrupt(e)
    assert e.interrupted and watch.reason == reason


def test_reserved_seconds_count_as_spent_until_released():
    b = Budget(100.0)
    before = b.remaining()
    held = b.reserve(30.0)
    assert held == 30.0 and before - 31 < b.remaining() <= before - 30
    b.reserve(-5)  # nothing held for a negative estimate
    b.release(held)
    assert b.remaining() > before - 1 and b.reserved == 0
    unbounded = Budget()
    unbounded.reserve(10)
    assert unbounded.remaining() == float("inf")


def test_a_budgeted_run_runs_the_input_for_its_verification_before_the_search(monkeypatch):
    """With a deadline, the input program's verification runs come first (the "reference" phase),
    their time is held back from the search, and the verification at the end runs only the result."""
    numeric = importlib.import_module("einsat.verify.numeric")
    optimize_module = importlib.import_module("einsat.pipeline.phases")  # the run's phases
    g = block()
    calls = []
    real_run = numeric.run
    monkeypatch.setattr(numeric, "run", lambda graph, draw, keep=(): calls.append(graph is g) or
                        real_run(graph, draw, keep=keep))
    held = []
    real_saturate = optimize_module.saturate

    def saturate(graph, rules, limits, model, notify, run):
        held.append(run.reserved)
        assert calls == [True, True]  # both draws of the input ran before saturation
        return real_saturate(graph, rules, limits, model, notify, run)

    monkeypatch.setattr(optimize_module, "saturate", saturate)
    budget = Budget(60.0)
    r = einsat.optimize(g, budget=budget).report
    assert held and held[0] > 0 and budget.reserved == 0
    assert "reference" in r.times and r.verification.proved
    assert calls == [True, True, False, False]  # the verification reused them: only the result ran


def test_an_unbudgeted_run_has_no_reference_phase():
    r = einsat.optimize(block()).report
    assert "reference" not in r.times and r.verification.proved


def test_a_failed_run_gives_its_held_seconds_back(monkeypatch):
    optimize_module = importlib.import_module("einsat.pipeline.phases")  # the run's phases

    def broken(*args, **kwargs):
        raise RuntimeError("saturation broke")

    monkeypatch.setattr(optimize_module, "saturate", broken)
    budget = Budget(60.0)
    with pytest.raises(RuntimeError, match="saturation broke"):
        einsat.optimize(block(), budget=budget)
    assert budget.reserved == 0


def test_a_budget_too_small_for_any_search_returns_the_input_at_once(monkeypatch):
    """Issue #39: a budget that leaves less than MIN_SEARCH_S after loading searches nothing: the
    input comes back, unsearched and unverified-but-identical, the report saying why; no phase of
    the search runs (saturation would raise here)."""
    from einsat.pipeline import phases, runner

    def no_search(state):
        raise AssertionError("the search ran on a budget too small for it")

    monkeypatch.setattr(phases, "saturate_phase", no_search)
    g = block()
    result = einsat.optimize(g, budget=runner.MIN_SEARCH_S / 2)
    report = result.report
    assert str(result.graph) == str(g)
    assert "too little for any search" in report.kept_input and report.speedup == 1.0
    assert report.extraction.method == "none" and report.verification.status == "identical"
    assert "too little for any search" in str(report)


def test_a_run_asked_for_its_weight_recipe_on_a_budget_too_small_returns_none(monkeypatch):
    """A partitioned half-precision run asks each piece for its weight recipe (`Options(recipe=True)`);
    a piece whose budget was spent loading has no e-graph to read weights from, and made none: its
    recipe is None, as for any returned input (it raised AttributeError on the missing e-graph)."""
    from einsat.optimize import run
    from einsat.pipeline import Options, phases, runner

    monkeypatch.setattr(phases, "saturate_phase", lambda state: pytest.fail("searched on a spent budget"))
    g = block()
    result = run(g, None, Options(budget=runner.MIN_SEARCH_S / 2, recipe=True))
    assert "too little for any search" in result.report.kept_input
    assert result.recipe is None and str(result.graph) == str(g)
