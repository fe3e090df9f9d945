"""Hand-made e-graphs for extractor tests: a random e-graph strategy and a cost-by-attribute model.

The e-nodes are `add` nodes over [1] tensors whose cost is their `cost` attribute, so an
e-graph's costs can be chosen freely. They are never rebuilt into programs.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from einsat.cost.model import CostModel
from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.errors import ExtractionError
from einsat.extract.problem import Problem
from einsat.ir.registry import Op
from einsat.ir.types import TensorType

T = TensorType((1,))


class AttrCost(CostModel):
    """A node's cost is its `cost` attribute."""

    name = "attr"

    def node_cost(self, op, attrs, ins, outs):
        return float(attrs.get("cost", 0.0))


def node(cost, *children) -> ENode:
    return ENode(Op.ADD, tuple(children), {"cost": cost})


def leaf(name: str) -> ENode:
    return ENode(None, leaf=("input", name))


def make(classes: dict[int, list[ENode]], roots: list[int]) -> EGraphData:
    inputs = {n.leaf[1]: T for nodes in classes.values() for n in nodes if n.leaf}
    return EGraphData({c: EClass(c, nodes, T) for c, nodes in classes.items()}, roots,
                      [f"out{k}" for k in range(len(roots))], inputs, {})


@st.composite
def random_egraphs(draw, max_classes: int = 7, max_nodes: int = 3, max_cost: int = 20):
    """E-graphs with sharing and cycles. Class 0 is an input; every other class's first e-node
    uses lower classes only, so every class is extractable; its other e-nodes use any class."""
    n = draw(st.integers(2, max_classes))
    classes = {0: [leaf("x")]}
    for c in range(1, n):
        nodes = []
        for k in range(draw(st.integers(1, max_nodes))):
            pool = range(c) if k == 0 else range(n)
            kids = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            nodes.append(node(draw(st.integers(1, max_cost)), *kids))
        classes[c] = list(dict.fromkeys(nodes))
    roots = draw(st.lists(st.integers(1, n - 1), min_size=1, max_size=2, unique=True))
    return make(classes, roots)


def brute_force(problem: Problem) -> float:
    """The optimum over every acyclic selection (tiny e-graphs only)."""
    cids = sorted(problem.classes)
    best = float("inf")
    for choice in itertools.product(*(problem.classes[c] for c in cids)):
        selection = dict(zip(cids, choice))
        try:
            best = min(best, problem.cost(selection))
        except ExtractionError:
            continue
    return best
