import random

import pytest
from hypothesis import given

from einsat.extract.greedy import greedy_dag, greedy_tree
from einsat.extract.ilp import solve_ilp
from einsat.extract.problem import Problem
from tests.extract.egraphs import AttrCost, brute_force, leaf, make, node, random_egraphs


@given(random_egraphs())
def test_ilp_is_optimal_and_never_worse_than_greedy(data):
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    dag = greedy_dag(problem)
    start = min((tree, dag), key=problem.cost)
    result = solve_ilp(problem, start, time_limit=20)
    assert result.status == "optimal"
    assert problem.is_acyclic(result.selection)
    assert result.cost == problem.cost(result.selection)
    assert abs(result.cost - brute_force(problem)) < 1e-9
    assert result.cost <= problem.cost(tree) and result.cost <= problem.cost(dag)
    assert result.gap == 0.0


def test_ilp_breaks_a_cycle_that_would_be_cheaper():
    # class 1 = a(x) [10] | b(class 2) [1];  class 2 = c(x) [12] | d(class 1) [1]
    # choosing b and d is cheapest (2) but cyclic: the optimum is a + d = 11
    data = make({0: [leaf("x")], 1: [node(10, 0), node(1, 2)], 2: [node(12, 0), node(1, 1)]},
                roots=[1, 2])
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    result = solve_ilp(problem, tree)
    assert result.cost == 11 and problem.is_acyclic(result.selection)


def test_ilp_finds_sharing_that_greedy_misses():
    # two outputs; each can use its own cheap private class (3 each) or one shared class (4)
    data = make({0: [leaf("x")], 1: [node(3, 0)], 2: [node(3, 0, 0)], 3: [node(4, 0)],
                 4: [node(1, 1), node(1, 3)], 5: [node(1, 2), node(1, 3, 3)]}, roots=[4, 5])
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    assert problem.cost(tree) == 8
    result = solve_ilp(problem, tree)
    assert result.cost == 6 == brute_force(problem)


def big_random_egraph(classes=1500, seed=0):
    rnd = random.Random(seed)
    table = {0: [leaf("x")], 1: [leaf("y")]}
    for c in range(2, classes):
        nodes = [node(rnd.randint(1, 50), *rnd.sample(range(c), min(c, 2)))]
        for _ in range(rnd.randint(0, 4)):
            nodes.append(node(rnd.randint(1, 50), *rnd.sample(range(classes), 2)))
        table[c] = list(dict.fromkeys(nodes))
    return make(table, roots=list(range(classes - 20, classes)))


def test_time_limit_reports_a_gap():
    problem = Problem(big_random_egraph(), AttrCost())
    tree, _ = greedy_tree(problem)
    result = solve_ilp(problem, tree, time_limit=0.2, max_candidates=None)
    assert "time limit" in result.status
    assert result.bound is not None and result.gap is not None
    assert 0.0 <= result.gap <= 1.0
    assert result.bound <= result.cost <= problem.cost(tree)
    assert abs(result.gap - (result.cost - result.bound) / result.cost) < 1e-9
    assert problem.is_acyclic(result.selection)


def test_an_egraph_above_the_size_bound_keeps_its_start_without_a_solve(monkeypatch):
    """Above `max_candidates` no ILP is built (HiGHS is never made): the start is kept, the status
    says why, and the gap is against the lower bound; at the bound the ILP runs."""
    import highspy

    problem = Problem(big_random_egraph(), AttrCost())
    tree, _ = greedy_tree(problem)
    n = problem.num_candidates()
    made = []
    monkeypatch.setattr(highspy, "Highs", lambda *a, **k: made.append(1) or (_ for _ in ()).throw(AssertionError))
    result = solve_ilp(problem, tree, max_candidates=n - 1)
    assert not made and result.selection == tree and result.cost == problem.cost(tree)
    assert result.status == f"start kept: {n:,} candidates, above the ILP's {n - 1:,}"
    assert result.bound <= result.cost and result.gap == pytest.approx((result.cost - result.bound) / result.cost)
    monkeypatch.undo()
    assert "start kept: " not in solve_ilp(problem, tree, max_candidates=n, time_limit=0.2).status


def test_the_solver_prints_nothing_on_stdout(monkeypatch, capfd):
    """highspy 1.16 prints a banner ("Running HiGHS 1.16.0 ... Copyright ...") on fd 1 when the
    first solver of a process is made, before any option can turn output off: a solver that does
    the same, on a real solve, must leave stdout as it was."""
    import os

    import highspy

    class Announcing(highspy.Highs):
        def __init__(self):
            os.write(1, b"Running HiGHS 1.16.0 (git hash: f3f113d): Copyright (c) 2026 under MIT licence terms\n")
            super().__init__()

    monkeypatch.setattr(highspy, "Highs", Announcing)
    data = make({0: [leaf("x")], 1: [node(10, 0), node(1, 2)], 2: [node(12, 0), node(1, 1)]}, roots=[1, 2])
    problem = Problem(data, AttrCost())
    print("before", flush=True)
    result = solve_ilp(problem, greedy_tree(problem)[0])
    print("after", flush=True)
    assert result.cost == 11
    assert capfd.readouterr().out == "before\nafter\n"


def test_progress_shows_the_incumbents_program_cost_not_the_objective():
    """#41: with cost="cpu" the live line said "better program found: 15.47" (the ILP's objective)
    where the report said 25.34 µs. Given `program_cost`, what progress shows of each better
    incumbent is that program's cost, in the model's unit; the bound moves by the same amount."""
    data = make({0: [leaf("x")], 1: [node(3, 0)], 2: [node(3, 0, 0)], 3: [node(4, 0)],
                 4: [node(1, 1), node(1, 3)], 5: [node(1, 2), node(1, 3, 3)]}, roots=[4, 5])
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    seen = []
    result = solve_ilp(problem, tree, progress=lambda message, cost: seen.append((message, cost)),
                       program_cost=lambda selection: 100.0 + 2 * problem.cost(selection))
    assert result.cost == 6  # the objective; the program it rebuilds to costs 112 here
    better = [(m, c) for m, c in seen if m.startswith("better program found")]
    assert better and better[-1] == ("better program found: 112.00 µs", 112.0)
    assert all(c >= 112.0 for _, c in seen)  # never the objective's 6 or 8
    unpriced = []
    solve_ilp(problem, tree, progress=lambda message, cost: unpriced.append(message))
    assert unpriced[-1] == "better program found: 6.00"  # no program_cost: the objective, no unit
