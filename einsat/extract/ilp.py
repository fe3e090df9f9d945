"""Exact DAG extraction as a 0-1 integer program, solved by HiGHS.

Variables (Tensat's formulation, "Equality Saturation for Tensor Graph Superoptimization" §4):
x_n ∈ {0, 1} per candidate e-node, y_g ∈ {0, 1} per multi-output group (paid once), and an
order t_c ∈ [0, N-1] per e-class of a non-trivial strongly connected component of the e-class
graph (N: the component's size).

    minimize   Σ cost(n) x_n  (+ Σ cost(g) y_g for groups)
    subject to Σ_{n ∈ root} x_n = 1                    every output is computed
               Σ_{n ∈ c} x_n ≤ 1                       one e-node per e-class
               Σ_{n ∈ c uses d} x_n ≤ Σ_{m ∈ d} x_m     a chosen e-node's children are computed
               y_g ≥ x_n  (n ∈ g)                      a used group is paid
               t_c - t_d - N x_n ≥ 1 - N               chosen edges inside a component go down

The child constraint is aggregated over the e-nodes of one e-class that use the same child
e-class (valid since at most one of them is chosen): the per-e-node form lets the LP
relaxation halve its flow at every e-class with two e-nodes over one child, and its bound
decays geometrically with depth (2.9 µs for a 70 µs SqueezeNet optimum).

Order variables are only needed inside strongly connected components: edges between
components can never close a cycle, so every incumbent (even one cut short by the time
limit) is a valid DAG. Candidates dominated inside their e-class (a cheaper or equal
candidate using a subset of its children) are dropped first; this keeps an optimum.

The solve starts from a given selection (HiGHS `setSolution`) and the result is the better of
the two, so the ILP is never worse than its start. What it returns is bounded by work, never by the
clock: it is not solved above `MAX_CANDIDATES` candidates (the start is kept), and it stops when
optimal (relative gap `REL_GAP`), after `MAX_NODES` branch-and-bound nodes,
or when no better program came for a number of nodes, or of HiGHS's checks while still at the
root node, or while its root bound stayed flat below `lower_bound`'s (an LP too weak to prove
anything: "stopped: LP bound weak") (`ilp_watch.IlpWatch`): the same e-graph gives the same program whatever the
machine's load. The time limit and the run's budget only stop it early, and then the status
says "time limit" (or "interrupted"). When it stops short of optimal the relative gap
(cost - bound) / cost is reported, with the better of HiGHS's bound and `lower_bound`'s.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from einsat.budget import Budget
from einsat.errors import ExtractionError
from einsat.extract import ilp_watch
from einsat.extract.greedy import lower_bound
from einsat.extract.ilp_watch import STALL_NODES, IlpWatch
from einsat.extract.problem import Problem, Selection

MAX_DOMINANCE_CLASS = 64  # larger e-classes skip the O(k^2) dominance check
REL_GAP = 1e-6             # proved optimal at this relative gap
MAX_NODES = 20_000         # branch-and-bound nodes at most: the search's work bound
# Candidate e-nodes above which no ILP is solved: the start (greedy, local search) is kept. On the
# speed benchmark (benchmarks/results/speed.md) no ILP above it improved on its start within its
# 5 s clock (17 models, 3,300-46,000 candidates), and far from the clock the roots alone took
# 25 s (GPT-2, 3,295 candidates) to 55 s (Llama, 22,752) without a better program; below it,
# BERT's (2,607) improved 5% in 3.3 s. A bound on work, not time: the same e-graph is treated alike
# everywhere.
MAX_CANDIDATES = 3_000


@dataclass
class IlpResult:
    selection: Selection
    cost: float
    status: str            # "optimal", "time limit", "start kept" (the solver found nothing better), ...
    gap: float             # (cost - bound) / cost: 0 when optimal
    bound: float           # a lower bound on the optimum (HiGHS's, or `lower_bound`'s if better)
    seconds: float
    columns: int
    rows: int


def _dominated(problem: Problem, ids: list[int]) -> set[int]:
    if len(ids) > MAX_DOMINANCE_CLASS:
        return set()
    out = set()
    cands = [problem.candidates[i] for i in ids]
    for a in cands:
        if problem.group_size[a.group] > 1:
            continue
        ka = set(a.children)
        for b in cands:
            if b is a or b.index in out or problem.group_size[b.group] > 1:
                continue
            if set(b.children) <= ka and (b.cost < a.cost or (b.cost == a.cost and
                                                              (set(b.children) < ka or b.index < a.index))):
                out.add(a.index)
                break
    return out


def _components(problem: Problem, ids: dict[int, list[int]]) -> dict[int, int]:
    """E-class -> component number, for e-classes in non-trivial SCCs (Tarjan, iterative)."""
    succ = {c: sorted({k for i in idx for k in problem.candidates[i].children}) for c, idx in ids.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    comp: dict[int, int] = {}
    ncomp = 0

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        return v, iter(succ[v])

    for start in sorted(succ):
        if start in index:
            continue
        work = [visit(start)]
        while work:
            v, kids = work[-1]
            for w in kids:
                if w not in index:
                    work.append(visit(w))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    members = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        members.append(w)
                        if w == v:
                            break
                    if len(members) > 1:
                        for w in members:
                            comp[w] = ncomp
                        ncomp += 1
    return comp


def solve_ilp(problem: Problem, start: Selection, time_limit: float = 10.0, budget: Budget | None = None,
              progress=None, stall_nodes: int | None = STALL_NODES, max_nodes: int = MAX_NODES,
              program_cost=None, max_candidates: int | None = MAX_CANDIDATES) -> IlpResult:
    """The cheapest acyclic selection, or the best found in `max_nodes` branch-and-bound nodes or
    when no better one came for `stall_nodes` nodes (or `ilp_watch.ROOT_STALL_CHECKS` checks at the
    root: `IlpWatch`; None: never), work bounds that make it deterministic; `time_limit` seconds
    (and the run's `budget`) only stop it early. `program_cost(selection)`: what `progress` shows
    of a better incumbent (its program's cost; default: the objective)."""
    t0 = time.perf_counter()
    start_cost = problem.cost(start)
    n = problem.num_candidates()
    if max_candidates is not None and n > max_candidates:  # `MAX_CANDIDATES`: the start is kept, by work
        bound = min(lower_bound(problem), start_cost)
        return IlpResult(start, start_cost, f"start kept: {n:,} candidates, above the ILP's {max_candidates:,}",
                         (start_cost - bound) / start_cost if start_cost > 0 else 0.0, bound,
                         time.perf_counter() - t0, 0, 0)
    import highspy  # here, not at import: cost models and greedy extraction run without HiGHS
    drop = set()
    for idx in problem.classes.values():
        drop |= _dominated(problem, idx) - set(start.values())
    ids = {c: [i for i in idx if i not in drop] for c, idx in problem.classes.items()}
    col = {}
    for c in sorted(ids):
        for i in ids[c]:
            col[i] = len(col)
    groups = sorted({problem.candidates[i].group for i in col if problem.group_size[problem.candidates[i].group] > 1})
    gcol = {g: len(col) + k for k, g in enumerate(groups)}
    comp = _components(problem, ids)
    sizes = np.bincount(list(comp.values())) if comp else np.zeros(0, int)
    tcol = {c: len(col) + len(gcol) + k for k, c in enumerate(sorted(comp))}
    ncol = len(col) + len(gcol) + len(tcol)

    cost = np.zeros(ncol)
    upper = np.ones(ncol)
    for i, j in col.items():
        if problem.group_size[problem.candidates[i].group] == 1:
            cost[j] = problem.candidates[i].cost
    for g, j in gcol.items():
        cost[j] = problem.group_cost[g]
    for c, j in tcol.items():
        upper[j] = sizes[comp[c]] - 1

    rows_lo, rows_hi, starts, index, value = [], [], [], [], []

    def row(lo, hi, entries):
        starts.append(len(index))
        rows_lo.append(lo)
        rows_hi.append(hi)
        for j, v in entries:
            index.append(j)
            value.append(v)

    roots = set(problem.data.roots)
    for c in sorted(ids):
        row(1.0 if c in roots else -np.inf, 1.0, [(col[i], 1.0) for i in ids[c]])
    for c in sorted(ids):
        users: dict[int, list[int]] = {}
        for i in ids[c]:
            cand = problem.candidates[i]
            for d in sorted(set(cand.children)):
                users.setdefault(d, []).append(i)
                if c in comp and comp.get(d) == comp[c]:
                    n = float(sizes[comp[c]])
                    row(1.0 - n, np.inf, [(tcol[c], 1.0), (tcol[d], -1.0), (col[i], -n)])
            if cand.group in gcol:
                row(0.0, np.inf, [(gcol[cand.group], 1.0), (col[i], -1.0)])
        for d in sorted(users):  # aggregated over c's e-nodes: at most one of them is chosen
            row(0.0, np.inf, [(col[m], 1.0) for m in ids[d]] + [(col[i], -1.0) for i in users[d]])

    h = _silent_solver(highspy)
    h.setOptionValue("time_limit", float(max(time_limit, 0.01)))
    h.setOptionValue("mip_rel_gap", REL_GAP)
    h.setOptionValue("mip_max_nodes", int(max_nodes))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncol, len(rows_lo)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, np.zeros(ncol), upper
    lp.row_lower_, lp.row_upper_ = np.array(rows_lo, float), np.array(rows_hi, float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(starts + [len(index)], np.int32)
    lp.a_matrix_.index_ = np.array(index, np.int32)
    lp.a_matrix_.value_ = np.array(value, float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * (len(col) + len(gcol)) + \
        [highspy.HighsVarType.kContinuous] * len(tcol)
    h.passModel(lp)
    h.setSolution(_start_vector(problem, start, col, gcol, tcol, comp, ncol))
    price = None
    if program_cost is not None:
        def price(values):
            chosen = _selection(problem, ids, col, np.asarray(values))
            return program_cost(chosen) if chosen is not None and problem.is_acyclic(chosen) else None
    combinatorial = lower_bound(problem)
    watch = IlpWatch(budget, progress, math.inf if stall_nodes is None else stall_nodes,
                     math.inf if stall_nodes is None else ilp_watch.ROOT_STALL_CHECKS, price=price,
                     unit=getattr(problem.model, "unit", "") if program_cost is not None else "",
                     weak_bound=-math.inf if stall_nodes is None else combinatorial)
    watch.attach(h)
    h.run()

    status = h.getModelStatus()
    info = h.getInfo()
    bound = combinatorial
    if np.isfinite(info.mip_dual_bound):
        bound = max(bound, float(info.mip_dual_bound))
    selection, found = start, start_cost
    if info.primal_solution_status == 2:  # feasible
        x = np.asarray(h.getSolution().col_value)
        chosen = _selection(problem, ids, col, x)
        if chosen is not None and problem.is_acyclic(chosen):
            c = problem.cost(chosen)
            if c < start_cost - 1e-9 * max(1.0, abs(start_cost)):
                selection, found = chosen, c
    if status == highspy.HighsModelStatus.kOptimal:
        text, gap, bound = "optimal", 0.0, found
    else:
        text = watch.reason or {highspy.HighsModelStatus.kSolutionLimit: "node limit",  # MAX_NODES
                                highspy.HighsModelStatus.kTimeLimit: "time limit"}.get(
            status, h.modelStatusToString(status).lower())
        bound = min(bound, found)
        gap = (found - bound) / found if found > 0 else 0.0
    if selection is start and status != highspy.HighsModelStatus.kOptimal:
        text += ", start kept"
    return IlpResult(selection, found, text, gap, bound, time.perf_counter() - t0, ncol, len(rows_lo))


def _silent_solver(highspy):
    """A solver that prints nothing. highspy 1.16 prints its banner on the process's stdout (fd 1,
    past Python's `sys.stdout`) when the first solver is made, before any option can be set: fd 1
    points at /dev/null while one is made, then `output_flag` silences the solver itself."""
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (a daemon): nothing to protect
        saved = None
    if saved is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    try:
        h = highspy.Highs()
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def _start_vector(problem: Problem, start: Selection, col, gcol, tcol, comp, ncol):
    import highspy

    x = np.zeros(ncol)
    order = problem.order(start)
    for rank, c in enumerate(order):
        i = start[c]
        x[col[i]] = 1.0
        g = problem.candidates[i].group
        if g in gcol:
            x[gcol[g]] = 1.0
    per_comp: dict[int, int] = {}
    for c in order:  # children first: ranks increase upwards inside each component
        if c in tcol:
            x[tcol[c]] = per_comp.get(comp[c], 0)
            per_comp[comp[c]] = x[tcol[c]] + 1
    sol = highspy.HighsSolution()
    sol.col_value = list(x)
    sol.value_valid = True
    return sol


def _selection(problem: Problem, ids, col, x) -> Selection | None:
    chosen: Selection = {}
    for c, idx in ids.items():
        best = max(idx, key=lambda i: x[col[i]], default=None)
        if best is not None and x[col[best]] > 0.5:
            chosen[c] = best
    try:
        needed = problem.order(chosen)
    except ExtractionError:
        return None
    return {c: chosen[c] for c in needed}
