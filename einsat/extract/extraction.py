"""`extract`: choose the cheapest program in an e-graph and rebuild it as an `ir.Graph`.

Methods: "greedy-tree"; "greedy": the DAG-aware greedy, then a local search (`local.improve`,
at most `local_evals` switches tried) from the best start; "ilp": HiGHS, warm-started from
that. The starts include the input program's own selection (`selection_of_graph`) when a
`start` graph is given, and the cheapest is kept: extraction never returns a program costlier
than its input (for "greedy-tree" too).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from einsat.budget import Budget
from einsat.cost.model import CostModel
from einsat.cost.models import DEFAULT_COST, cost_model
from einsat.egraph.data import EGraphData
from einsat.errors import ExtractionError
from einsat.extract.from_graph import selection_of_graph
from einsat.extract.greedy import greedy_dag, greedy_tree
from einsat.extract.ilp import MAX_CANDIDATES, solve_ilp
from einsat.extract.local import improve
from einsat.extract.problem import Problem, Selection
from einsat.extract.rebuild import rebuild
from einsat.ir.graph import Graph

METHODS = ("ilp", "greedy", "greedy-tree")


@dataclass
class ExtractionSummary:
    """How a program was chosen: the figures of an `Extraction`, without the program (what the
    optimize report keeps).

    `cost` is the modeled cost of the program (µs for the roofline models), identity nodes that
    name outputs included, and so are the `starts` (the programs each start would rebuild, with
    weight-only subprograms computed once at compile time); `status` says how the method ended
    ("optimal", "time limit", "stopped improving", "interrupted", "heuristic", ...); `gap` is the
    ILP's relative gap to its lower bound (0 when optimal, None for heuristics); `starts` gives
    the cost of each starting point considered ("greedy-tree", "greedy", "input", "local")."""

    cost: float
    method: str
    status: str
    gap: float | None = None
    bound: float | None = None
    seconds: float = 0.0
    starts: dict[str, float] = field(default_factory=dict)
    candidates: int = 0
    classes: int = 0
    ilp_size: tuple[int, int] | None = None  # (columns, rows)

    def summary(self) -> ExtractionSummary:
        return ExtractionSummary(**{f.name: getattr(self, f.name) for f in fields(ExtractionSummary)})


@dataclass
class Extraction(ExtractionSummary):
    """The extracted program (`graph`, from the e-graph's `selection`) and how it was found."""

    graph: Graph = field(kw_only=True)
    selection: Selection = field(kw_only=True)
    weight_classes: dict[str, int] = field(default_factory=dict, kw_only=True)  # weight name -> its e-class


def extract(data: EGraphData, cost: str | CostModel = DEFAULT_COST, method: str = "ilp",
            time_limit: float = 10.0, start: Graph | None = None, fold_constants: bool = True,
            name: str = "optimized", local_evals: int = 20000, budget: Budget | None = None,
            progress=None, ilp_candidates: int | None = MAX_CANDIDATES) -> Extraction:
    """Extract the cheapest program of `data` under `cost` (see the module docstring). The ILP
    also stops when the run's `budget` runs out or is cancelled; `progress(message, cost)` hears
    of its better programs, each costed as the program it rebuilds to (the figure the report
    gives, in the model's unit: not the ILP's objective). Above `ilp_candidates` candidates the ILP
    keeps its start (`ilp.MAX_CANDIDATES`; None: no bound)."""
    if method not in METHODS:
        raise ExtractionError(f"unknown extraction method {method!r}; choose one of {METHODS}")
    t0 = time.perf_counter()
    problem = Problem(data, cost_model(cost), fold_constants=fold_constants)
    starts: dict[str, Selection] = {}
    tree, _ = greedy_tree(problem)
    starts["greedy-tree"] = {c: tree[c] for c in problem.order(tree)}
    if method != "greedy-tree":
        starts["greedy"] = greedy_dag(problem)
    if start is not None:
        own = selection_of_graph(problem, start)
        if own is not None:
            starts["input"] = own
    costs = {k: problem.cost(s) for k, s in starts.items()}
    best = min(costs, key=lambda k: (costs[k], list(costs).index(k)))
    if method != "greedy-tree":
        starts["local"] = improve(problem, starts[best], tree, max_evals=local_evals)
        costs["local"] = problem.cost(starts["local"])
        best = "local" if costs["local"] < costs[best] else best
    selection, found = starts[best], costs[best]
    result = {"method": method, "status": "heuristic" if method != "ilp" else "", "gap": None, "bound": None}
    if method == "ilp":
        def program_cost(chosen: Selection) -> float:
            return problem.model.graph_cost(rebuild(problem, chosen, name=name))

        ilp = solve_ilp(problem, selection, time_limit=time_limit, budget=budget, progress=progress,
                        program_cost=program_cost if progress is not None else None, max_candidates=ilp_candidates)
        selection, found = ilp.selection, ilp.cost
        result.update(status=ilp.status, gap=ilp.gap, bound=ilp.bound, ilp_size=(ilp.columns, ilp.rows))
    origins: dict[str, int] = {}
    graph = rebuild(problem, selection, name=name, origins=origins)
    # the program's own cost: the selection's plus the identity nodes that name outputs whose
    # e-class is an input or another output's (a constant offset for every selection, added to
    # the bound and the starts so that every figure is a program's cost)
    offset = problem.model.graph_cost(graph) - found
    if result["bound"] is not None:
        result["bound"] += offset
    if type(problem.model).graph_cost is CostModel.graph_cost:  # a program costs the sum of its nodes
        costs = {k: v + offset for k, v in costs.items()}
    else:  # a program's cost is more than its e-nodes' (fusion groups, a call's overhead): each start's
        # program is rebuilt and costed as a program, as the input and the result are (issue 31)
        costs = {k: problem.model.graph_cost(rebuild(problem, s, name=name)) for k, s in starts.items()}
    found += offset
    return Extraction(graph=graph, selection=selection, weight_classes=origins, cost=found,
                      seconds=time.perf_counter() - t0, starts=costs, candidates=problem.num_candidates(),
                      classes=len(problem.classes), **result)
