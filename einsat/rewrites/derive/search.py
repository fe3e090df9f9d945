"""Distance-guided derivation search (EinNet §6.1–6.2): from an operator's expression to programs.

1. **Explorative derivation**: breadth-first, the rules that change a scope's structure
   (summation splitting, iterator splitting, traversal merging) at every compute-intensive
   scope (`steps`; a memory-bound scope becomes an eOperator as it is), up to `max_depth`
   derivations, with a per-path budget per rule (EinNet's counters: one summation split, two
   kernel splits, ...) and in a fixed order of rules (traversal splits by a stride or a
   dilation of the source, summation splits by a kernel factor, summation splitting, traversal
   merging: orders that commute reach the same states);
2. **Converging derivation**: from every explored state, variable substitutions that lower
   the expression distance (`match.mismatch` summed over the
   compute-intensive scopes), until it is 0 and every compute-intensive scope matches an
   operator. Substitutions are taken here only: they are what moves a scope toward an operator.
3. **Instantiation** of every state at distance 0 (`instantiate.instantiations`).

Fingerprints (the canonical print, §6.2) deduplicate states across both stages; without them
(`fingerprints=False`, for the ablation of EinNet Fig. 19) every path is walked. Bounds: at most
`max_states` derived states and `deadline_s` seconds per expression; the report says which
stopped the search. Everything is deterministic: rules and candidates are enumerated in a fixed
order and the candidates are ranked by a key that ends with their fingerprint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from einsat.ir.expr.measure import is_memory_bound, own_flops
from einsat.ir.expr.nodes import Expr, all_scopes, scopes
from einsat.ir.expr.printer import fingerprint
from einsat.ir.graph import Graph
from einsat.ir.groups import MATCHED, RESHAPES
from einsat.ir.types import TensorType
from einsat.rewrites.derive.instantiate import NotInstantiable, instantiations
from einsat.rewrites.derive.match import mismatch
from einsat.rewrites.derive.rules import normalize
from einsat.rewrites.derive.steps import Step, steps

BUDGET = {"split-summation": 1, "split-sum": 2, "split-loop": 1, "substitute": 3, "inline": 1}
EXPLORATIVE_RULES = ("split-summation", "split-sum", "split-loop", "inline")
PHASE = {"split-loop": 0, "split-sum": 1, "split-summation": 2, "inline": 3}  # explorative paths go in this order
CONVERGING_RULES = ("substitute",)
FAR = 1 << 20


@dataclass(frozen=True)
class SearchLimits:
    """Bounds of one derivation search (EinNet's MaxDepth is `Limits.derive_depth` in a session)."""

    max_depth: int = 4
    max_states: int = 20_000
    deadline_s: float = 10.0
    fingerprints: bool = True
    converging: bool = True
    ordered: bool = True        # explorative paths in `PHASE` order (False: any order, for ablations)
    max_candidates: int = 8    # programs per operator that enter the e-graph
    flops_factor: float = 2.5  # a candidate's operators may do this many times the source's FLOPs


@dataclass(frozen=True)
class Candidate:
    graph: Graph
    expr: Expr
    path: tuple[Step, ...]
    const: frozenset[str] = frozenset()  # graph inputs holding weights

    def key(self) -> tuple:
        """Rank: fewest memory-bound nodes on activations (weight-only ones fold away), then the
        fewest FLOPs, the fewest bytes moved by those nodes, the shortest path, the fingerprint."""
        fixed = set(self.const)
        moving = []
        for n in self.graph.nodes:
            if all(i in fixed for i in n.inputs if i):
                fixed.update(n.outputs)
            elif n.op not in OPERATORS and n.op not in VIEWS:
                moving.append(n)
        moved = sum(n.definition.bytes(*self.graph.node_types(n), n.attrs) for n in moving)
        return len(moving), self.graph.flops(), moved, len(self.path), fingerprint(self.expr)

    def signature(self) -> tuple:
        """The operators it runs (op, attributes, shapes) and how many other nodes: candidates
        that differ only in how they lay out weights share it."""
        g = self.graph
        ops = tuple((n.op.value, tuple(sorted(n.attrs.items())), tuple(g.types[i].shape for i in n.inputs if i))
                    for n in g.nodes if n.op in OPERATORS)
        return ops, sum(1 for n in g.nodes if n.op not in OPERATORS and n.op not in VIEWS)


OPERATORS = frozenset(MATCHED)  # the operators an instantiation runs (the registry's `matched`)
VIEWS = RESHAPES  # reshapes cost nothing: they do not count against a candidate


@dataclass
class SearchReport:
    states: int = 0          # states derived (each rule application, before deduplication)
    unique: int = 0          # distinct fingerprints among them
    explored: int = 0        # states expanded by explorative derivation
    converged: int = 0       # states reached by converging derivation
    instantiated: int = 0    # states that became programs
    depth: int = 0           # the deepest explorative level reached
    stop: str = "exhausted"  # exhausted | state limit | deadline
    time_s: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)  # ranked; one per operator signature


class _Stop(Exception):
    pass


_DISTANCE: dict = {}


def scope_distance(s: Expr, shapes, const: frozenset[int]) -> int:
    """A scope's distance to the operators: 0 when memory-bound (an eOperator), else its mismatch."""
    key = (s, tuple(map(tuple, shapes)), const)
    if key not in _DISTANCE:
        if len(_DISTANCE) > 1 << 16:
            _DISTANCE.clear()
        _DISTANCE[key] = 0 if is_memory_bound(s, shapes) else FAR if scopes(s) else mismatch(s, const)
    return _DISTANCE[key]


def distance(state: Expr, shapes, const: frozenset[int]) -> int:
    """Σ over the scopes (EinNet's expression distance): 0 when the state instantiates."""
    return sum(scope_distance(s, shapes, const) for s in all_scopes(state))


def derive(e: Expr, types: Sequence[TensorType], const: frozenset[int] = frozenset(),
           limits: SearchLimits | None = None, flops: float | None = None) -> SearchReport:
    """Search programs equal to `e` over inputs of `types` (`const`: positions of weights);
    `flops`, the source operator's FLOPs, bounds the candidates' work (`flops_factor` times)."""
    return _Search(e, types, const, limits or SearchLimits(), flops).run()


class _Search:
    def __init__(self, e: Expr, types, const, limits: SearchLimits, flops: float | None):
        self.budget = None if flops is None else limits.flops_factor * flops
        self.types = list(types)
        self.shapes = [t.shape for t in types]
        self.const = frozenset(const)
        self.limits = limits
        self.root = normalize(e, self.shapes)
        self.seen: set[str] = set()
        self.found: dict[str, Candidate] = {}
        self.report = SearchReport()
        self.t0 = time.perf_counter()

    def run(self) -> SearchReport:
        frontier = [(self.root, ())]
        self.seen.add(fingerprint(self.root))
        try:
            for depth in range(self.limits.max_depth + 1):
                self.report.depth = depth
                for state, path in frontier:
                    self.consider(state, path)
                if depth == self.limits.max_depth:
                    break
                nxt = []
                heavy = lambda s: not is_memory_bound(s, self.shapes)  # noqa: E731
                for state, path in frontier:
                    self.report.explored += 1
                    for step in steps(state, self.shapes, EXPLORATIVE_RULES, where=heavy, const=self.const):
                        if _spent(path, step.rule, self.limits.ordered):
                            continue
                        if self.admit(step):
                            nxt.append((step.expr, path + (step,)))
                frontier = nxt
        except _Stop as stop:
            self.report.stop = str(stop)
        best: dict[tuple, Candidate] = {}
        for c in sorted(self.found.values(), key=Candidate.key):
            best.setdefault(c.signature(), c)
        self.report.candidates = list(best.values())
        self.report.time_s = time.perf_counter() - self.t0
        return self.report

    def admit(self, step: Step) -> bool:
        """Count a derived state; False when fingerprints show it was seen."""
        self.report.states += 1
        if self.report.states > self.limits.max_states:
            raise _Stop("state limit")
        if time.perf_counter() - self.t0 > self.limits.deadline_s:
            raise _Stop("deadline")
        fp = fingerprint(step.expr)
        if fp in self.seen:
            return not self.limits.fingerprints
        self.seen.add(fp)
        self.report.unique += 1
        return True

    def consider(self, state: Expr, path: tuple[Step, ...]) -> None:
        d = distance(state, self.shapes, self.const)
        if d == 0:
            self.instantiate(state, path)
        elif self.limits.converging and d < FAR:
            self.converge(state, path, d)

    def converge(self, state: Expr, path, d: int) -> None:
        far = lambda s: scope_distance(s, self.shapes, self.const) > 0  # noqa: E731
        for raw in steps(state, self.shapes, CONVERGING_RULES, where=far, normal=False):
            if distance(raw.expr, self.shapes, self.const) >= d:  # judged before normalizing: cheaper
                continue
            step = Step(raw.rule, raw.where, normalize(raw.expr, self.shapes))
            nd = distance(step.expr, self.shapes, self.const)
            if nd >= d or not self.admit(step):
                continue
            self.report.converged += 1
            if nd == 0:
                self.instantiate(step.expr, path + (step,))
            else:
                self.converge(step.expr, path + (step,), nd)

    def instantiate(self, state: Expr, path) -> None:
        if not path:
            return  # the source itself
        if self.budget is not None:
            work = sum(own_flops(s) for s in all_scopes(state) if not is_memory_bound(s, self.shapes))
            if work > self.budget:
                return
        try:
            graphs = instantiations(state, self.types, self.const)
        except NotInstantiable:
            return
        self.report.instantiated += 1
        for g in graphs:
            key = "|".join(f"{n.op.value}{sorted(n.attrs.items())}{n.inputs}" for n in g.nodes)
            if key not in self.found:
                self.found[key] = Candidate(g, state, path, frozenset(f"in{k}" for k in self.const))


def _spent(path: tuple[Step, ...], rule: str, ordered: bool = True) -> bool:
    """The rule's budget on this path is used up, or the rule comes too late (`PHASE`: the
    orders that commute are walked once)."""
    if ordered and path and PHASE.get(rule, 0) < PHASE.get(path[-1].rule, 0):
        return True
    return sum(1 for s in path if s.rule == rule) >= BUDGET.get(rule, 1)
