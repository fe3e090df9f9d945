"""Where to correct a mutant: on the value of its output reshape/transpose chain with the fewest regions.

A layout mutant ends in a chain of reshapes and transposes that undoes its layout change (PET
Figure 1: conv over pairs of images side by side, then back to a batch). Correcting at the
mutant's output can need many regions where correcting the value before the chain needs one:
the seam columns of all image pairs are one box of the wide conv's output, but one box per
image of the batch. `correct_placed` tries every value of each output's chain (the output, then
back through single-use views), compares the original brought into that value's layout (the
inverse views appended) with the mutant cut there, and corrects where the regions are fewest;
the chain then follows the corrected value. Restricting the original to a region behind the
inverse views goes through them in pieces (`restrict_rules.reshape`).

    placed = correct_placed(original, mutant)
    placed.graph       # the corrected mutant: the mutant's interface, equivalent to `original`
    placed.at          # mutant output -> the chain value its Correct nodes write
    placed.differences # the regions there (keyed by the original's outputs)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from einsat.ir.graph import Graph, Node
from einsat.ir.groups import RELAYOUTS
from einsat.ir.registry import Op
from einsat.verify.correction import correct
from einsat.verify.corrector import Differences, check_pair, find_differences

VIEWS = RELAYOUTS  # reshapes and transposes (the registry's permutes, identity aside)


@dataclass
class Placement:
    graph: Graph
    at: dict[str, str]
    differences: Differences


def chain(graph: Graph, output: str) -> list[str]:
    """`output`, then back through the views producing it: each value produced by a view of one
    input, that input used by that view alone and neither a graph input, weight nor output."""
    uses = graph.consumers()
    values = [output]
    node = graph.producer(output)
    while node is not None and node.op in VIEWS:
        v = node.inputs[0]
        if graph.producer(v) is None or len(uses.get(v, ())) != 1 or v in graph.outputs:
            break
        values.append(v)
        node = graph.producer(v)
    return values


def _inverse(node: Node, graph: Graph, value: str, name: str) -> Node:
    """The view taking `node`'s output back to its input's layout, applied to `value`."""
    if node.op is Op.TRANSPOSE:
        perm = tuple(int(i) for i in np.argsort(node.attrs["perm"]))
        return Node(Op.TRANSPOSE, [value], [name], {"perm": perm})
    return Node(Op.RESHAPE, [value], [name], {"shape": graph.types[node.inputs[0]].shape})


def cut(original: Graph, mutant: Graph, at: dict[str, str]) -> tuple[Graph, Graph]:
    """(original in the layouts of the cut values, mutant ending at them): `at` maps each mutant
    output to a value of its chain."""
    pairs = check_pair(original, mutant)
    extra, outs, dropped = [], [], set()
    for a, b in pairs:
        v, cur = at.get(b, b), a
        for node in _chain_nodes(mutant, b, v):
            dropped.add(id(node))
            extra.append(_inverse(node, mutant, cur, f"placed/{node.inputs[0]}"))
            cur = f"placed/{node.inputs[0]}"
        outs.append(cur)
    o = Graph(list(original.nodes) + extra, original.input_types(), outs, original.weights, original.name)
    m = Graph([n for n in mutant.nodes if id(n) not in dropped], mutant.input_types(),
              [at.get(b, b) for _, b in pairs], mutant.weights, mutant.name)
    return o, m


def _chain_nodes(graph: Graph, output: str, value: str) -> list[Node]:
    """The view nodes from `value` to `output` (output side first)."""
    nodes, v = [], output
    while v != value:
        node = graph.producer(v)
        nodes.append(node)
        v = node.inputs[0]
    return nodes


def correct_placed(original: Graph, mutant: Graph, *, tests: int = 2, seed: int = 0) -> Placement:
    """The mutant corrected on the chain values with the fewest regions (see the module doc)."""
    pairs = check_pair(original, mutant)
    chains = {b: chain(mutant, b) for _, b in pairs}
    best: dict[str, tuple[int, int]] = {}  # mutant output -> (regions, depth)
    found: dict[int, Differences] = {}
    for depth in range(max(len(c) for c in chains.values())):
        at = {b: c[min(depth, len(c) - 1)] for b, c in chains.items()}
        o, m = cut(original, mutant, at)
        found[depth] = diffs = find_differences(o, m, tests=tests, seed=seed)
        for (a, b), oa in zip(pairs, o.outputs):
            if depth < len(chains[b]) and (b not in best or len(diffs.regions[oa]) < best[b][0]):
                best[b] = (len(diffs.regions[oa]), depth)
    depths = {best[b][1] for _, b in pairs}
    at = {b: chains[b][best[b][1]] for _, b in pairs}
    o, m = cut(original, mutant, at)
    diffs = found[depths.pop()] if len(depths) == 1 else find_differences(o, m, tests=tests, seed=seed)
    fixed = correct(o, m, diffs)
    tail = [n for _, b in pairs for n in reversed(_chain_nodes(mutant, b, at[b]))]
    graph = Graph(list(fixed.nodes) + tail, mutant.input_types(), list(mutant.outputs), fixed.weights,
                  name=fixed.name)
    return Placement(graph, at, diffs)
