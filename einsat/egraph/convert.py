"""Terms -> ir: a program from chosen e-nodes of an exported e-graph.

`to_graph(data)` is the inverse of inserting a program (`Session.add_graph`): on an e-graph no
rule has touched, every e-class has one e-node and the program comes back with its inputs,
weights, outputs, ops, attributes and value names. With `choice` (e-class -> e-node index) it
rebuilds any acyclic selection; extraction (`einsat.extract.rebuild`) is the cost-aware version.
"""

from __future__ import annotations

from typing import Mapping

from einsat.egraph.data import ABSENT, EGraphData
from einsat.errors import GraphError
from einsat.ir.graph import Graph, Node, fresh_name
from einsat.ir.registry import Op, opdef


def to_graph(data: EGraphData, choice: Mapping[int, int] | None = None, name: str = "graph") -> Graph:
    choice = choice or {}
    value: dict[int, str] = {}
    taken = set(data.input_types) | set(data.output_names) | set(data.weights)
    owner = {}
    for r, o in zip(data.roots, data.output_names):
        owner.setdefault(r, o)
    nodes: list[tuple] = []  # (op, inputs, outputs (filled in as e-classes use them), attrs)
    weights = {}
    applied: dict[tuple, list[str]] = {}

    def fresh(hint: str) -> str:
        return fresh_name(hint, taken)

    def visit(cid: int, path: frozenset) -> str:
        if cid in value:
            return value[cid]
        if cid in path:
            raise GraphError(f"the chosen e-nodes form a cycle through e-class {cid}")
        cls = data.classes[cid]
        node = cls.nodes[choice.get(cid, 0)]
        if node.leaf is not None:
            kind, leaf = node.leaf
            if kind == "weight":
                weights[leaf] = data.weights[leaf]
            value[cid] = leaf
            return leaf
        ins = [visit(c, path | {cid}) if c != ABSENT else "" for c in node.children]
        key = (node.op, tuple(ins), repr(sorted(node.attrs.items())))
        if key not in applied:
            n_out = opdef(node.op).num_outputs(node.attrs)
            applied[key] = [None] * n_out
            nodes.append((node.op, ins, applied[key], dict(node.attrs)))
        outs = applied[key]
        if outs[node.output] is None:
            outs[node.output] = owner.get(cid) or fresh(cls.name or f"{node.op.value}{cid}")
        value[cid] = outs[node.output]
        return value[cid]

    for r in data.roots:
        visit(r, frozenset())
    final = []
    for op, ins, outs, attrs in nodes:
        final.append(Node(op, ins, [o or fresh(f"{op.value}_unused") for o in outs], attrs))
    for r, o in zip(data.roots, data.output_names):
        if value[r] != o:
            final.append(Node(Op.IDENTITY, [value[r]], [o]))
    return Graph(final, data.input_types, list(data.output_names), weights, name)
