"""Programs as (trivial) e-graphs, and a program's own selection inside an e-graph.

`egraph_data_from_graph(g)` is the e-graph of `g` before any rewrite: one e-class per value,
one e-node per node output. Extraction from it gives `g` back (the rebuild round trip), and it
lets extractors be tested without egglog.

`selection_of_graph(problem, g)` finds `g`'s nodes among an e-graph's e-nodes (the e-graph of a
program always contains it), giving a selection whose cost is at most `g`'s cost; extraction
uses it as a starting point, so the result is never worse than the input.
"""

from __future__ import annotations

from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.errors import ExtractionError
from einsat.extract.problem import Problem, Selection, freeze
from einsat.ir.graph import Graph


def egraph_data_from_graph(graph: Graph) -> EGraphData:
    """One e-class per value of `graph`; e-class ids follow the order values are defined in."""
    cid: dict[str, int] = {}
    classes: dict[int, EClass] = {}

    def new(value: str, node: ENode) -> None:
        cid[value] = len(classes)
        classes[cid[value]] = EClass(cid[value], [node], graph.types[value])

    for name in graph.inputs:
        new(name, ENode(None, leaf=("input", name)))
    for name in graph.weights:
        new(name, ENode(None, leaf=("weight", name)))
    for node in graph.nodes:
        children = tuple(cid[i] if i else -1 for i in node.inputs)
        for k, out in enumerate(node.outputs):
            new(out, ENode(node.op, children, dict(node.attrs), output=k))
    return EGraphData(classes, [cid[o] for o in graph.outputs], list(graph.outputs),
                      graph.input_types(), dict(graph.weights))


def _key(node: ENode) -> tuple:
    if node.leaf is not None:
        return ("leaf", node.leaf)
    return (node.op, node.children, freeze(dict(node.attrs)), node.output)


def selection_of_graph(problem: Problem, graph: Graph) -> Selection | None:
    """`graph`'s own program as a selection in `problem`, or None if `graph` is not in it."""
    where: dict[tuple, int] = {}      # e-node key -> its e-class, over the whole e-graph
    for c, cls in problem.data.classes.items():
        for node in cls.nodes:
            where.setdefault(_key(node), c)
    candidate = {(_key(problem.candidates[i].node), c): i
                 for c, ids in problem.classes.items() for i in ids}
    value_class: dict[str, int | None] = {}
    selection: Selection = {}

    def visit(name: str, key: tuple) -> None:
        value_class[name] = where.get(key)
        _choose(problem, selection, candidate, value_class[name], key)

    for name in graph.inputs:
        visit(name, ("leaf", ("input", name)))
    for name in graph.weights:
        visit(name, ("leaf", ("weight", name)))
    for node in graph.nodes:
        children = tuple(value_class.get(i) if i else -1 for i in node.inputs)
        if None in children:
            return None
        for k, out in enumerate(node.outputs):
            visit(out, (node.op, children, freeze(dict(node.attrs)), k))
    if [value_class.get(o) for o in graph.outputs] != list(problem.data.roots):
        return None
    try:
        needed = problem.order(selection)
    except ExtractionError:
        return None
    return {c: selection[c] for c in needed}


def _choose(problem: Problem, selection: Selection, candidate, c: int | None, key) -> None:
    """Select the e-node `key` for e-class `c`, unless `c` already has an (earlier) choice.

    Values are visited in definition order, so an earlier choice only uses earlier e-classes:
    keeping it keeps the selection acyclic (two values of `graph` proved equal share one)."""
    if c is None or c in selection or c not in problem.classes:
        return
    first = problem.classes[c][0]
    if problem.candidates[first].folded:
        selection[c] = first
    elif (key, c) in candidate:
        selection[c] = candidate[(key, c)]
