"""Weight preprocessing (PET §6.3, EinNet §6.3): weight-only subgraphs evaluated at compile time.

A generator: an e-class computable from weights alone (`egraph.weights.weight_only`, asked
without limits: this module picks what to fold) gets a new weight leaf holding its value, e.g. the
concatenated weights of merged matmuls or a batch norm folded into a convolution's weight.
Folded weights are named by their content, so two derivations of one value meet in one e-class.
Memory is bounded: values above `FOLD_BYTES` stay computations (extraction folds the chosen
ones at rebuild), and one round folds at most `ROUND_BYTES` of values and `ROUND_FLOPS` of
work, smallest first.
"""

from __future__ import annotations

import numpy as np

from einsat.egraph.data import ABSENT, EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.weights import FOLD_HINT, weight_only
from einsat.ir.registry import opdef

FOLD_BYTES = 1 << 20
ROUND_BYTES = 16 << 20
ROUND_FLOPS = 1e8  # NumPy work per round (a 1024^3 weight product is 2e9: left to extraction)


def fold_weights(session, data: EGraphData) -> int:
    """Union every weight-only e-class that a computation uses (and that has no weight leaf yet)
    with a new weight holding its value."""
    derivation = weight_only(data)
    values: dict[int, np.ndarray] = {}

    def value(cid: int) -> np.ndarray:
        if cid not in values:
            n = derivation[cid]
            if n.leaf is not None:
                values[cid] = np.asarray(data.weights[n.leaf[1]])
            else:
                args = [None if c == ABSENT else value(c) for c in n.children]
                values[cid] = opdef(n.op).numpy(args, n.attrs)[n.output]
        return values[cid]

    def pending(cid: int, seen: set[int]) -> float:
        """The NumPy work still needed to compute `cid` (flops of its uncomputed derivation)."""
        if cid in values or cid in seen or derivation[cid].leaf is not None:
            return 0.0
        seen.add(cid)
        n = derivation[cid]
        ins = [None if c == ABSENT else data.classes[c].type for c in n.children]
        d = opdef(n.op)
        return d.flops(ins, d.infer(ins, n.attrs), n.attrs) + sum(pending(c, seen) for c in n.children if c != ABSENT)

    unions, budget, work = 0, ROUND_BYTES, ROUND_FLOPS
    used = reachable(data)
    todo = [c for c in frontier(data, derivation) if c in used and data.classes[c].type.nbytes <= FOLD_BYTES
            and not any(n.leaf is not None for n in data.classes[c].nodes)]
    for cid in sorted(todo, key=lambda c: (data.classes[c].type.nbytes, c)):
        cls = data.classes[cid]
        cost = pending(cid, set())
        if cls.type.nbytes > budget or cost > work:
            continue
        budget, work = budget - cls.type.nbytes, work - cost
        # the e-class's shape: np.ascontiguousarray makes a 0-d value [1], which a scalar's readers
        # (an eop's expression reads it with no subscripts) do not take
        v = np.ascontiguousarray(value(cid), dtype=cls.type.dtype).reshape(cls.type.shape)
        session.union(cid, session.add_weight(v, hint=FOLD_HINT))
        unions += 1
    return unions


def frontier(data: EGraphData, const) -> set[int]:
    """The weight-only e-classes that a computation uses (their insides need no leaf)."""
    out = set()
    for cid, cls in data.classes.items():
        if cid not in const:
            out.update(c for n in cls.nodes for c in n.children if c in const)
    return out


def reachable(data: EGraphData, starts=None) -> set[int]:
    """The e-classes reachable from `starts` (default: the roots) through e-nodes' children."""
    seen, stack = set(), list(data.roots if starts is None else starts)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        stack.extend(k for n in data.classes[c].nodes for k in n.children if k != ABSENT)
    return seen


def fold_generator(every: int = 4) -> Generator:
    return Generator("fold-weights", "a weight-only e-class = a weight holding its value", fold_weights, every)
