"""The EinNet generator: every derived program of an operator unioned into the operator's e-class.

For each value of the source program computed by an operator with an expression that is
compute-intensive (conv, conv_transpose, g2bmm, gbmm, ...), the generator builds the expression
from the e-class's input types and attributes, runs the distance-guided search (`search`),
and enters each candidate program with `Session.add_subgraph`, its output unioned with the
operator's e-class. Inputs that are weights (computable from weights alone, `post.fold`) are
marked constant, so that their layouts may be anything (they fold) and kernel splits apply to
them. Only instantiated programs enter the e-graph; derivation states stay in Python.

Bounds: the search's own (`SearchLimits`: states, deadline, candidates per operator; the depth
is the session's `Limits.derive_depth`, EinNet's MaxDepth), at
most `max_ops` operators per round, each distinct operator (its expression, input types and
weights) searched once per process (results are memoized by fingerprint: ResNet's repeated
convolutions are one search). Deterministic: operators in e-class order, candidates ranked by
`rank` (default: `Candidate.key`; pass a cost model's `graph_cost` to rank by it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.egraph.rules import Generator
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.printer import fingerprint
from einsat.ir.graph import Graph
from einsat.ir.registry import Op, opdef
from einsat.rewrites.derive.search import Candidate, SearchLimits, SearchReport, derive
from einsat.rewrites.post.fold import weight_only

DERIVED = frozenset({Op.CONV, Op.CONV_TRANSPOSE, Op.G2BMM, Op.GBMM})
_MEMO: dict[tuple, SearchReport] = {}
_MEMO_LIMIT = 256


def derivable(node: ENode, data: EGraphData) -> bool:
    return node.op in DERIVED and all(c != ABSENT for c in node.children)


def search_node(node: ENode, data: EGraphData, const_classes, limits: SearchLimits) -> SearchReport | None:
    """The search for one operator e-node (memoized by its expression, types and weights)."""
    types = [data.classes[c].type for c in node.children]
    d = opdef(node.op)
    e = d.expression(types, node.attrs)
    if e is None or is_memory_bound(e, [t.shape for t in types]):
        return None
    const = frozenset(k for k, c in enumerate(node.children) if c in const_classes)
    key = (fingerprint(e), tuple(types), const, limits)
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        outs = d.infer(types, node.attrs)
        _MEMO[key] = derive(e, types, const, limits, flops=d.flops(types, outs, node.attrs))
    return _MEMO[key]


def derive_programs(session, data: EGraphData, limits: SearchLimits, rank: Callable[[Graph], float] | None,
                    max_ops: int) -> int:
    limits = replace(limits, max_depth=session.limits.derive_depth)
    const_classes = weight_only(data)
    unions, done = 0, 0
    for cid in sorted(data.classes):
        cls = data.classes[cid]
        if cls.name is None or done >= max_ops:  # only values of the source program
            continue
        node = next((n for n in cls.nodes if derivable(n, data)), None)
        if node is None:
            continue
        report = search_node(node, data, const_classes, limits)
        done += 1
        if report is None:
            continue
        candidates = report.candidates
        if rank is not None:
            candidates = sorted(candidates, key=lambda c: (rank(c.graph), Candidate.key(c)))
        for cand in candidates[:limits.max_candidates]:
            inputs = {f"in{k}": child for k, child in enumerate(node.children)}
            session.add_subgraph(cand.graph, inputs, outputs=[cid])
            unions += 1
    return unions


def derive_generator(limits: SearchLimits | None = None, rank: Callable[[Graph], float] | None = None,
                     max_ops: int = 64, every: int = 1, first_steps: int | None = 1) -> Generator:
    """EinNet's derivations as a generator (by default in the first step only: one search per
    operator)."""
    lim = limits or SearchLimits()
    return Generator("einnet-derive", "op = an instantiated derivation of its expression (EinNet §4–§6)",
                     lambda session, data: derive_programs(session, data, lim, rank, max_ops),
                     every=every, first_steps=first_steps)
