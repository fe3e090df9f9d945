"""Greedy extractors: tree cost (exact for trees) and DAG-aware (a shared value is paid once).

`greedy_tree` is Knuth's generalization of Dijkstra's algorithm: e-classes are finalized in
order of their cheapest *tree* cost (an e-node's own cost plus its children's tree costs,
counted once per use); an e-node is costed once all its children are final. The result is
optimal for tree cost and acyclic by construction: every chosen e-node points at e-classes
finalized before its own.

`greedy_dag` starts from that order and repeatedly re-chooses each e-class by the cost of the
union of its children's sub-programs (extraction-gym's "greedy-dag"), with sub-programs kept as
bitsets over e-classes (Python ints) so that unions are cheap. An e-node whose children's
sub-programs already contain its own e-class would close a cycle and is skipped. Costs in the
sets go stale as choices change, so this is a heuristic; any cycle left at the end is repaired
by falling back to tree choices.
"""

from __future__ import annotations

import heapq

from einsat.egraph.data import EGraphData, ENode
from einsat.extract.problem import Problem, Selection


def greedy_tree(problem: Problem) -> tuple[Selection, list[int]]:
    """The minimum-tree-cost selection and the order in which e-classes were finalized."""
    choice, _, order = _knuth(problem, sum)
    return choice, order


def lower_bound(problem: Problem) -> float:
    """A lower bound on the DAG cost of any acyclic selection.

    lb(c) = min over e-nodes n of c of cost(n) + max over children d of lb(d): a program that
    computes c contains n and, disjoint from n, the whole sub-program of each child."""
    _, cost, _ = _knuth(problem, lambda costs: max(costs, default=0.0))
    return max(cost[r] for r in problem.data.roots)


def _knuth(problem: Problem, combine) -> tuple[Selection, dict[int, float], list[int]]:
    parents: dict[int, list[int]] = {}
    waiting: list[int] = []
    heap: list[tuple[float, int, int]] = []
    for cand in problem.candidates:
        kids = set(cand.children)
        waiting.append(len(kids))
        for k in kids:
            parents.setdefault(k, []).append(cand.index)
        if not kids:
            heapq.heappush(heap, (problem.share(cand.index), cand.cls, cand.index))
    cost: dict[int, float] = {}
    choice: Selection = {}
    order: list[int] = []
    while heap:
        c, cid, idx = heapq.heappop(heap)
        if cid in choice:
            continue
        choice[cid], cost[cid] = idx, c
        order.append(cid)
        for p in parents.get(cid, ()):
            waiting[p] -= 1
            if waiting[p] == 0:
                cand = problem.candidates[p]
                if cand.cls not in choice:
                    total = problem.share(p) + combine([cost[k] for k in cand.children])
                    heapq.heappush(heap, (total, cand.cls, p))
    return choice, cost, order


def greedy_dag(problem: Problem, max_passes: int = 8) -> Selection:
    """A DAG-aware greedy selection (see the module docstring)."""
    tree, order = greedy_tree(problem)
    bit = {cid: k for k, cid in enumerate(order)}
    own = [0.0] * len(order)          # own cost of each e-class's current choice, by bit
    sets: dict[int, int] = {}         # e-class -> bitset of its sub-program (itself included)
    totals: dict[int, float] = {}
    choice: Selection = {}

    def union_cost(kids) -> tuple[int, float] | None:
        kids = sorted(set(kids), key=lambda k: -totals.get(k, -1.0))
        if any(k not in sets for k in kids):
            return None
        if not kids:
            return 0, 0.0
        u, total = sets[kids[0]], totals[kids[0]]
        for k in kids[1:]:
            new = sets[k] & ~u
            if new:
                u |= new
                while new:
                    low = new & -new
                    total += own[low.bit_length() - 1]
                    new ^= low
        return u, total

    for _ in range(max_passes):
        changed = False
        for cid in order:
            me = 1 << bit[cid]
            best = None
            for idx in problem.classes[cid]:
                got = union_cost(problem.candidates[idx].children)
                if got is None or got[0] & me:
                    continue
                total = got[1] + problem.share(idx)
                if best is None or total < best[0] - 1e-12 or (idx == choice.get(cid) and total <= best[0]):
                    best = (total, idx, got[0])
            if best is None:
                continue
            total, idx, u = best
            if choice.get(cid) != idx or totals.get(cid) != total:
                changed |= choice.get(cid) != idx
                choice[cid], totals[cid], sets[cid] = idx, total, u | me
                own[bit[cid]] = problem.share(idx)
        if not changed:
            break
    return repair(problem, choice, tree)


def repair(problem: Problem, selection: Selection, fallback: Selection) -> Selection:
    """Make `selection` acyclic by taking `fallback`'s (acyclic) choice on each cycle found."""
    selection = dict(selection)
    for cid, idx in fallback.items():
        selection.setdefault(cid, idx)
    while True:
        cycle = find_cycle(problem, selection)
        if not cycle:
            return selection
        for cid in cycle:
            selection[cid] = fallback[cid]


def find_cycle(problem: Problem, selection: Selection) -> list[int]:
    """The e-classes of one cycle among the needed e-classes, or [] if there is none."""
    state: dict[int, int] = {}
    for root in problem.data.roots:
        if state.get(root):
            continue
        path: list[int] = []
        stack = [(root, iter(problem.candidates[selection[root]].children))]
        state[root] = 1
        path.append(root)
        while stack:
            cid, kids = stack[-1]
            child = next(kids, None)
            if child is None:
                stack.pop()
                path.pop()
                state[cid] = 2
                continue
            if state.get(child) == 1:
                return path[path.index(child):]
            if not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(problem.candidates[selection[child]].children)))
    return []


def greedy_program(data: EGraphData, model) -> dict[int, ENode]:
    """The DAG-aware greedy program of an e-graph, as {e-class: e-node} (weights as leaves): what
    a generator working on the current best program reads (`Session.best`)."""
    problem = Problem(data, model, fold_constants=False)
    selection = greedy_dag(problem)
    return {c: problem.candidates[selection[c]].node for c in problem.order(selection)}
