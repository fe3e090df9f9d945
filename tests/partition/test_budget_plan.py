"""The plan of a partitioned run under a budget (issue #39 item 4, the budget kept): the whole
input's verification runs before the pieces and the stitched result's is held back, the copies'
checks are held back too, no piece runs past the pieces' share wherever it starts, and a copy
the deadline leaves no time to check stays the piece it was. Each test moves the clock itself
(a deadline set in the past) or reads the plan: nothing here depends on the machine's speed."""

import time

import pytest

import einsat
from einsat.budget import Budget
from einsat.egraph import Limits
from einsat.partition import Partitioning
from einsat.pipeline import plan
from einsat.pipeline.verification import same_program
from tests.partition.common import assert_same_function, stacked

LIMITS = Limits(nodes=6000, iterations=3, time_s=120, extract_s=60)
SERIAL = Partitioning(above=0, piece_nodes=64, executor="serial")


@pytest.fixture(scope="module")
def graph():
    return stacked(layers=4, softmax=True)


def test_the_verification_and_the_copies_checks_are_held_before_the_pieces_share_the_budget(graph, monkeypatch):
    from einsat.pipeline import verification as checks
    log, prepared = [], []
    hold, seconds, prepare = plan.Planner.hold, plan.Planner.seconds, checks.prepare_reference
    monkeypatch.setattr(plan.Planner, "hold",
                        lambda self, phase, s: log.append(("hold", phase, s)) or hold(self, phase, s))
    monkeypatch.setattr(plan.Planner, "seconds",
                        lambda self, phase, rounds=1: log.append(("grant", phase, rounds))
                        or seconds(self, phase, rounds))
    monkeypatch.setattr(checks, "prepare_reference",
                        lambda reference, *a, **k: prepared.append(reference) or prepare(reference, *a, **k))
    result = einsat.optimize(graph, limits=LIMITS, budget=60.0, partition=SERIAL)
    steps = [(kind, phase) for kind, phase, _ in log]
    pieces = steps.index(("grant", "pieces"))
    assert steps.index(("hold", "verify")) < pieces and steps.index(("hold", "rebind")) < pieces
    held = {phase: s for kind, phase, s in log[:pieces] if kind == "hold"}
    assert held["verify"] > 0 and held["rebind"] > 0  # three of the four layers are copies, checked
    assert prepared[0] is result.input  # the whole input's runs, reused by the stitched result's verification
    assert result.report.verification is not None and result.report.partition.cache_hits == 3


def test_without_copies_nothing_is_held_for_their_checks(graph):
    from einsat.partition import partition
    from einsat.partition.driver import rebind_estimate
    from einsat.pipeline.verification import prepare_reference
    pieces, _ = partition(graph, SERIAL)
    runs, _ = prepare_reference(graph)
    assert rebind_estimate(graph, pieces, list(range(len(pieces))), runs) == 0.0
    assert rebind_estimate(graph, pieces, [0] * len(pieces), None) == 0.0  # nothing is checked without verify
    copied = rebind_estimate(graph, pieces, [0] * len(pieces), runs)
    share = sum(len(p.graph.nodes) for p in pieces[1:]) / len(graph.nodes)
    assert copied == pytest.approx(plan.VERIFY_MARGIN * 3 * runs.typical_seconds * share)


def test_a_piece_that_starts_after_the_pieces_share_ended_is_returned_unsearched(graph):
    from einsat.optimize import Options
    from einsat.partition import partition
    from einsat.partition.executors import optimize_piece
    piece = partition(graph, SERIAL)[0][0].graph
    options = Options.of(limits=LIMITS, budget=30.0, partition=False)
    late = optimize_piece((piece, options, time.time() - 1.0))
    assert same_program(piece, late.graph)  # the input itself
    assert "too little for any search" in (late.report.kept_input or "")
    on_time = optimize_piece((piece, options, time.time() + 30.0))
    assert on_time.report.kept_input is None and on_time.report.cost_after < on_time.report.cost_before


def test_a_copy_the_deadline_leaves_no_time_to_check_stays_the_piece_it_was(graph, monkeypatch):
    from einsat.partition import driver
    budget = Budget(60.0)
    real = driver.run_jobs

    def then_the_deadline_passes(*args, **kwargs):
        results = real(*args, **kwargs)
        budget.start -= 3600.0  # the pieces took the whole budget
        return results

    monkeypatch.setattr(driver, "run_jobs", then_the_deadline_passes)
    result = einsat.optimize(graph, limits=LIMITS, budget=budget, partition=SERIAL)
    part = result.report.partition
    assert [p.template for p in part.pieces] == [0, 1, 2, 3]
    assert all("not rebound" in p.fallback for p in part.pieces[1:])
    assert all(p.cost_after == p.cost_before for p in part.pieces[1:])
    assert part.pieces[0].cost_after < part.pieces[0].cost_before  # the template itself is kept
    assert result.report.verification is not None  # the stitched result is verified all the same
    assert_same_function(graph, result.graph)
