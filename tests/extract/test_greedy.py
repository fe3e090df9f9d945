from hypothesis import given

from einsat.egraph.data import ENode
from einsat.extract.greedy import greedy_dag, greedy_tree, lower_bound
from einsat.extract.local import improve
from einsat.extract.problem import Problem
from einsat.ir.registry import Op
from tests.extract.egraphs import AttrCost, brute_force, leaf, make, node, random_egraphs


def sharing_egraph():
    """R = r1(A1, B) | r2(A2, B) with A1 = a(x) [3], A2 = f(S) [1], B = g(S) [1], S = s(x) [4].

    Tree costs: r1 = 1 + 3 + 5 = 9 < r2 = 1 + 5 + 5 = 11. As DAGs r2 pays S once: 1+1+1+4 = 7."""
    x, s, a1, a2, b, r = range(6)
    return make({x: [leaf("x")], s: [node(4, x)], a1: [node(3, x, x)], a2: [node(1, s)],
                 b: [node(1, s, s)], r: [node(1, a1, b), node(1, a2, b)]}, roots=[r])


def test_dag_greedy_pays_a_shared_value_once():
    problem = Problem(sharing_egraph(), AttrCost())
    tree, _ = greedy_tree(problem)
    dag = greedy_dag(problem)
    assert problem.cost(tree) == 9
    assert problem.cost(dag) == 7 == brute_force(problem)


def test_tree_greedy_is_acyclic_when_the_cycle_is_cheaper():
    # A = a(x) [5] | b(B) [1];  B = c(x) [7] | d(A) [1]: the cheap e-nodes form a cycle
    data = make({0: [leaf("x")], 1: [node(5, 0), node(1, 2)], 2: [node(7, 0), node(1, 1)]}, roots=[1, 2])
    problem = Problem(data, AttrCost())
    for selection in (greedy_tree(problem)[0], greedy_dag(problem)):
        assert problem.is_acyclic(selection)
        assert problem.cost(selection) == 6  # a + d


@given(random_egraphs())
def test_greedy_selections_are_acyclic_and_bounded_below(data):
    problem = Problem(data, AttrCost())
    best = brute_force(problem)
    assert lower_bound(problem) <= best
    for selection in (greedy_tree(problem)[0], greedy_dag(problem)):
        assert problem.is_acyclic(selection)
        assert problem.cost(selection) >= best


def test_local_search_finds_sharing_across_outputs():
    # R1 = r(A) [1] | s(B) [1], R2 = t(A) [1], A = a(x) [5], B = b(x) [4]: alone, R1 prefers B
    # (5 < 6), but A is paid for R2 anyway, so R1 = r(A) gives 7 instead of 11
    x, a, b, r1, r2 = range(5)
    data = make({x: [leaf("x")], a: [node(5, x)], b: [node(4, x, x)], r1: [node(1, a), node(1, b)],
                 r2: [node(1, a, a)]}, roots=[r1, r2])
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    dag = greedy_dag(problem)
    assert problem.cost(tree) == problem.cost(dag) == 11
    better = improve(problem, dag, tree)
    assert problem.cost(better) == 7 == brute_force(problem)


@given(random_egraphs())
def test_local_search_never_worsens_and_stays_acyclic(data):
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    for start in (tree, greedy_dag(problem)):
        better = improve(problem, start, tree)
        assert problem.is_acyclic(better)
        assert brute_force(problem) <= problem.cost(better) <= problem.cost(start)


def test_local_search_switches_all_outputs_of_a_merged_op_together():
    # A = a(x) [3] | M.0,  B = b(x) [3] | M.1,  M a two-output op [5.5]: switching A alone to M
    # costs 5.5 + 3 > 6, switching both gives 5.5
    x, a, b = range(3)
    merged = [ENode(Op.ADD, (x, x, x), {"cost": 5.5}, output=k) for k in range(2)]
    data = make({x: [leaf("x")], a: [node(3, x), merged[0]], b: [node(3, x, x), merged[1]]}, roots=[a, b])
    problem = Problem(data, AttrCost())
    separate = {x: 0, a: 1, b: 3}
    assert problem.cost(separate) == 6
    assert problem.cost(improve(problem, separate, separate)) == 5.5 == brute_force(problem)


def test_local_search_uses_an_unneeded_output_of_a_merged_op():
    # A = a(x) [4] | M.0,  F = f(x) [9] | M.1,  C = c(x) [4] | g(F) [0.5],  M a two-output op [4],
    # outputs A and C. No single switch pays (A to M.0 costs the same, C to g(F) adds M) and the
    # merged op's move has one needed output: only A to M.0 with C to g(M.1) gives 4.5 (ResNet-18's
    # merged shortcut convolution, whose second output replaced a separate convolution)
    x, a, f, c = range(4)
    merged = [ENode(Op.ADD, (x, x, x), {"cost": 4.0}, output=k) for k in range(2)]
    data = make({x: [leaf("x")], a: [node(4, x), merged[0]], f: [node(9, x, x), merged[1]],
                 c: [node(4, x, x, x, x), node(0.5, f)]}, roots=[a, c])
    problem = Problem(data, AttrCost())
    tree, _ = greedy_tree(problem)
    start = {x: 0, a: 1, c: 5}
    assert [problem.candidates[i].cls for i in (1, 5)] == [a, c] and problem.cost(start) == 8
    better = improve(problem, start, tree)
    assert problem.cost(better) == 4.5 == brute_force(problem)
    assert problem.is_acyclic(better)
