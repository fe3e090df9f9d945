"""A planted wrong rewrite: does a verification catch a program that is slightly wrong?

    wrong = perturb(graph)                   # one computing node's output times 1.05, mid-graph
    wrong = perturb(graph, node="conv7", factor=1 + 1e-3)

Verification must fail on `wrong`: a test that plants it after extraction (in place of a
buggy rewrite rule) and sees `VerificationError` shows that the comparison on that model could
have failed (`einsat.verify.informative` says why it might not). The node chosen by default is
the middle one, by topological position, of the model's accumulating nodes (each output
element a sum of products: conv, matmul, gemm, fused or not) that compute on computed values
and whose outputs are not graph outputs: a change there has to travel through the rest of the
network to be seen.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import Graph, Node, fresh_name
from einsat.ir.registry import Op


def _accumulates(graph: Graph, node: Node) -> bool:
    ins, outs = graph.node_types(node)
    size = sum(t.size for t in outs)
    try:
        return size > 0 and node.definition.flops(ins, outs, node.attrs) >= 4 * size
    except NotImplementedError:
        return False


def planting_site(graph: Graph) -> Node:
    """The default node `perturb` changes (see the module docstring)."""
    inner = [n for n in graph.nodes if n.outputs and not set(n.outputs) & set(graph.outputs)]
    heavy = [n for n in inner if _accumulates(graph, n) and any(graph.producer(i) for i in n.inputs if i)]
    candidates = heavy or inner
    if not candidates:
        raise ValueError(f"{graph.name!r}: no node to perturb that is not an output")
    return candidates[len(candidates) // 2]


def perturb(graph: Graph, node: str | None = None, factor: float = 1.05) -> Graph:
    """`graph` with the first output of `node` (default `planting_site`) multiplied by `factor`
    before any of its consumers sees it: a program that is wrong by a little, in one place."""
    site = planting_site(graph) if node is None else next((n for n in graph.nodes if n.name == node), None)
    if site is None:
        raise ValueError(f"{graph.name!r} has no node {node!r}")
    value = site.outputs[0]
    taken = set(graph.types) | {n.name for n in graph.nodes}
    scaled, scale = fresh_name(f"{value}_planted", taken), fresh_name("planted_factor", taken)
    dtype = graph.types[value].dtype
    nodes = []
    for n in graph.nodes:
        if n is not site:
            n = Node(n.op, tuple(scaled if i == value else i for i in n.inputs), n.outputs, n.attrs, n.name)
        nodes.append(n)
        if n is site:
            nodes.append(Node(Op.MUL, (value, scale), (scaled,), name=scaled))
    weights = dict(graph.weights, **{scale: np.asarray(factor, dtype=dtype)})
    return Graph(nodes, graph.input_types(), graph.outputs, weights, graph.name)
