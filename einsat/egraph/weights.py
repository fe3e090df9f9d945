"""Weight-only e-classes: the values of an exported e-graph computable from weights alone.

`weight_only(data, max_bytes, max_flops)` is the one derivation of which e-classes are
weight-only (PET §6.3, EinNet §6.3: such a value can be evaluated once, at compile time). Its
callers choose their limits deliberately:

- `rewrites.post.fold` folds weight-only values into new weights during saturation: it asks
  for every weight-only e-class (no limits) and decides itself which to fold (small values
  first, under a memory and work budget per round);
- `rewrites.algebra.merge` merges siblings only over weight-only operands (no limits: a large
  weight is still a weight);
- `extract.problem` turns weight-only e-classes into cost-free constants that `rebuild`
  evaluates: there a value larger than `max_bytes`, or an op costlier than `max_flops` to
  evaluate once in NumPy, stays a computation (and so do the values above it).

An e-class is weight-only when some e-node of it is a weight leaf (with its array in
`data.weights`), a source op (`OpDef.source`: constant), or a foldable op (`OpDef.foldable`:
not opaque nodes or control flow; not a broadcast, `OpDef.repeats_input`) whose input e-classes
are all weight-only. Each gets the first
e-node found by a breadth-first search from the weights up, so its derivation is acyclic and as
shallow as the search allows.
"""

from __future__ import annotations

from typing import Callable, Mapping

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.errors import EinsatError
from einsat.ir.graph import Graph, Node, fresh_name
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType

FOLD_HINT = "fold"  # the name hint `rewrites.post.fold` gives the weights it folds during saturation
FOLD_PREFIX = f"{FOLD_HINT}_"  # and the prefix of their names (`Session.add_weight`: hint_hash)

Parents = dict[int, list[tuple[int, ENode]]]


def parents(data: EGraphData) -> Parents:
    """Child e-class -> the (e-class, e-node) pairs that use it."""
    out: Parents = {}
    for cid, cls in data.classes.items():
        for node in cls.nodes:
            for c in set(node.children):
                if c != ABSENT:
                    out.setdefault(c, []).append((cid, node))
    return out


def closure(parents: Parents, seeds: Mapping[int, ENode], accept: Callable[[int, ENode], bool]) -> dict[int, ENode]:
    """The e-classes reachable bottom-up from `seeds` through e-nodes that `accept` allows and
    whose children are all in the set; each with the first e-node that put it there (so the
    chosen e-nodes form an acyclic derivation)."""
    found = dict(seeds)
    queue = list(seeds)
    head = 0
    while head < len(queue):
        cid = queue[head]
        head += 1
        for parent, node in parents.get(cid, ()):
            if parent not in found and accept(parent, node) and \
                    all(c in found for c in node.children if c != ABSENT):
                found[parent] = node
                queue.append(parent)
    return found


def output_types(node: ENode, ins, own: TensorType) -> tuple[TensorType, ...]:
    """All output types of `node`'s op, given its input types (its e-class holds output
    `node.output`, of type `own`)."""
    d = opdef(node.op)
    if d.num_outputs(node.attrs) == 1:
        return (own,)
    return tuple(d.infer(list(ins), node.attrs))


def weight_only(data: EGraphData, max_bytes: int | None = None, max_flops: float | None = None,
                types: Mapping[int, TensorType] | None = None, users: Parents | None = None) -> dict[int, ENode]:
    """E-class -> an e-node computing it from weights alone (see the module docstring).

    `max_bytes` bounds each weight-only value's size and `max_flops` each op's work (None: no
    bound). `types` are the e-classes' types (default: `data.classes[c].type`); an e-node with
    an untyped child is not followed when a bound needs the types. `users` is `parents(data)`
    when the caller has it already."""
    if types is None:
        types = {cid: cls.type for cid, cls in data.classes.items() if cls.type is not None}

    def small(cid: int) -> bool:
        return max_bytes is None or (cid in types and types[cid].nbytes <= max_bytes)

    def cheap(node: ENode, cid: int) -> bool:
        if max_flops is None:
            return True
        ins = [types.get(c) if c != ABSENT else None for c in node.children]
        if cid not in types or any(t is None for t, c in zip(ins, node.children) if c != ABSENT):
            return False
        d = opdef(node.op)
        try:
            flops = d.flops(ins, output_types(node, ins, types[cid]), node.attrs)
        except NotImplementedError:
            flops = 0
        return flops <= max_flops

    seeds: dict[int, ENode] = {}
    for cid, cls in data.classes.items():
        for node in cls.nodes:
            weight = node.leaf is not None and node.leaf[0] == "weight" and node.leaf[1] in data.weights
            if small(cid) and (weight or (node.leaf is None and opdef(node.op).source)):
                seeds[cid] = node
                break

    def accept(cid: int, node: ENode) -> bool:
        if node.leaf is not None:
            return False
        d = opdef(node.op)
        # a broadcast stays one: folding it would store the repetition (`OpDef.repeats_input`)
        return d.foldable and not d.repeats_input and small(cid) and cheap(node, cid)

    return closure(users if users is not None else parents(data), seeds, accept)


def weight_recipe(data: EGraphData, weights: Mapping[str, int], sources: Mapping[str, TensorType],
                  name: str = "recipe") -> Graph:
    """The weights of an extracted program as a program over its source weights.

    `weights`: each weight of the extracted program and its e-class (`Extraction.weight_classes`);
    `sources`: the source program's weights (their types). The recipe's inputs are the source
    weights it reads (sorted by name), its outputs the extracted weights (sorted by name); what
    it computes is derived bottom-up from the source weights alone (never from a weight folded
    during saturation, which is a value, not a derivation), through foldable ops; constants
    made by rules (`fill_*`) are the recipe's own weights. Running it on other arrays for the
    source weights gives the extracted program's weights for them: how a piece optimized once
    is applied to its copies (`einsat.partition`). Raises `EinsatError` if a weight has no
    derivation from the source weights.
    """
    seeds: dict[int, ENode] = {}
    for cid, cls in data.classes.items():
        for node in cls.nodes:
            leaf = node.leaf
            if leaf is not None and leaf[0] == "weight" and (
                    leaf[1] in sources or (leaf[1] in data.weights and not leaf[1].startswith(FOLD_PREFIX))):
                seeds[cid] = node
                break
            if leaf is None and opdef(node.op).source:
                seeds[cid] = node
                break

    def accept(cid: int, node: ENode) -> bool:
        return node.leaf is None and opdef(node.op).foldable

    derivation = closure(parents(data), seeds, accept)
    taken = set(sources) | set(weights)
    value: dict[int, str] = {}
    nodes: list[Node] = []
    inputs: dict[str, TensorType] = {}
    constants: dict[str, object] = {}

    def emit(cid: int) -> str:
        stack = [cid]
        while stack:
            c = stack[-1]
            if c in value:
                stack.pop()
                continue
            if c not in derivation:
                raise EinsatError(f"weight recipe: e-class {c} ({data.classes[c].type}) has no derivation "
                                  "from the source weights")
            node = derivation[c]
            todo = [k for k in node.children if k != ABSENT and k not in value]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if node.leaf is not None:
                leaf = node.leaf[1]
                if leaf in sources:
                    inputs[leaf] = sources[leaf]
                else:
                    constants[leaf] = data.weights[leaf]
                value[c] = leaf
                continue
            outs = [fresh_name(f"{node.op.value}_{c}_{k}", taken)
                    for k in range(opdef(node.op).num_outputs(node.attrs))]
            nodes.append(Node(node.op, [value[k] if k != ABSENT else "" for k in node.children], outs,
                              dict(node.attrs)))
            value[c] = outs[node.output]
        return value[cid]

    outputs = sorted(weights)
    for out in outputs:
        nodes.append(Node(Op.IDENTITY, [emit(weights[out])], [out]))
    return Graph(nodes, dict(sorted(inputs.items())), outputs, constants, name)
