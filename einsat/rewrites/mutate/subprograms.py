"""Subprograms to mutate (PET §6.1–6.2), taken from one program in the e-graph, not from every e-node.

A *program* is one e-node per needed e-class ({e-class: e-node}): in the first round the source
program (`source_program`), later the session's current best (`Session.best`: PET's Algorithm 2
with K = 1; the e-graph keeps what earlier rounds found). Its multi-linear ops
(`OpDef.is_multilinear`) form regions split at the other ops (§6.1); a subprogram is

- a connected set of at most `depth` ops of one region, at least one of which computes (§6.2,
  d = 4 as in §8.1), or
- a group of 2 to 4 independent convolutions (matmuls) over inputs of one shape (§6.1, the
  branches of an Inception module: Figure 10).

Subprograms are ranked by size (single ops first: every op gets its turn before pairs do), then
by cost, costliest first (the most to gain), then by e-class ids; those done in earlier rounds
are skipped, so a round takes the next ones.

A `Subprogram` is an `ir.Graph` with canonical names (inputs x0.., weights w0.., values v0..),
so that two subprograms with the same structure, shapes and constants share a `key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.errors import EinsatError
from einsat.ir import groups
from einsat.ir.graph import Graph, Node, format_graph
from einsat.ir.registry import Op, opdef
from einsat.ir.types import is_float
from einsat.verify.corrector import content_key

Program = dict[int, ENode]
Mark = tuple  # a subprogram of a program: its e-classes and their e-nodes
GROUPED = groups.STACKS  # ops whose instances stack into one (the registry's stacks fact)
PER_ANCHOR = 32  # connected sets grown from one e-class at most


@dataclass(frozen=True)
class Subprogram:
    graph: Graph
    inputs: dict[str, int]    # graph input -> the e-class it reads
    weights: dict[str, int]   # graph weight -> its e-class (a weight leaf)
    outputs: tuple[int, ...]  # the e-class of each graph output
    cost: float

    @property
    def key(self) -> tuple:
        """Equal for subprograms that differ only in the values of their variable weights."""
        w = self.graph.weights
        constants = tuple((n, content_key(np.asarray(a))) for n, a in w.items() if _constant(np.asarray(a)))
        return format_graph(self.graph), tuple((n, a.shape, a.dtype.str) for n, a in w.items()), constants


def _constant(a: np.ndarray) -> bool:
    """Read as an exact constant by the corrector (uniform, or not floating point)."""
    return not is_float(a.dtype) or a.size <= 1 or bool(np.all(a == a.reshape(-1)[0]))


def source_program(graphs: list[Graph], data: EGraphData) -> Program:
    """The source programs' e-nodes, found through their value names (`EClass.name`)."""
    where = {cls.name: cid for cid, cls in data.classes.items() if cls.name is not None}
    program: Program = {}
    for g in graphs:
        for name in [*g.inputs, *g.weights]:
            cid = where.get(name)
            leaf = next((n for n in data.classes[cid].nodes if n.leaf is not None), None) if cid is not None else None
            if leaf is not None:
                program.setdefault(cid, leaf)
        for node in g.nodes:
            kids = [where.get(i) if i else ABSENT for i in node.inputs]
            while kids and kids[-1] == ABSENT:
                kids.pop()
            if None in kids:
                continue
            for k, out in enumerate(node.outputs):
                if out in where:
                    program.setdefault(where[out], ENode(node.op, tuple(kids), dict(node.attrs), output=k))
    return program


def subprograms(program: Program, data: EGraphData, cost, limit: int, depth: int = 4,
                done: set[Mark] | frozenset = frozenset()) -> list[tuple[Mark, Subprogram]]:
    """The next `limit` subprograms of `program` not in `done`, in rank order (see the module
    doc), each with its mark."""
    users: dict[int, set[int]] = {}
    for cid, node in program.items():
        for c in node.children:
            users.setdefault(c, set()).add(cid)
    linear = sorted(c for c, n in program.items() if _mutable(n))
    near = {c: {k for k in program[c].children if k in linear} | (users.get(c, set()) & set(linear)) for c in linear}
    sets = {s for s in _connected(linear, near, depth) + _independent_groups(program, data, linear)
            if any(_computes(program[c]) for c in s)}
    own: dict[int, float] = {}

    def cost_of(c: int) -> float:
        if c not in own:
            n, types = program[c], data.classes
            ins = [types[k].type if k != ABSENT else None for k in n.children]
            own[c] = cost.node_cost(n.op, n.attrs, ins, [types[c].type])
        return own[c]

    ranked = sorted(sets, key=lambda s: (len(s), -sum(cost_of(c) for c in s), sorted(s)))
    out = []
    for members in ranked:
        mark = (members, tuple(program[c] for c in sorted(members)))
        if mark in done:
            continue
        sub = _build(program, data, members, users, cost)
        if sub is not None:
            out.append((mark, sub))
            if len(out) == limit:
                break
    return out


def _mutable(node: ENode) -> bool:
    if node.leaf is not None or node.op is None:
        return False
    d = opdef(node.op)
    return d.num_outputs(node.attrs) == 1 and d.is_multilinear(node.attrs)


def _computes(node: ENode) -> bool:
    return not opdef(node.op).layout_only and node.op not in (Op.CONSTANT, Op.PAD, Op.SLICE)


def _connected(nodes: list[int], near: dict[int, set[int]], depth: int) -> list[frozenset[int]]:
    """Connected sets of at most `depth` nodes, each grown from its smallest node over larger
    neighbours only (breadth first, `PER_ANCHOR` sets per node at most)."""
    out: list[frozenset[int]] = []
    seen: set[frozenset[int]] = set()
    for v in nodes:
        frontier, grown = [frozenset([v])], 0
        while frontier and grown < PER_ANCHOR:
            s = frontier.pop(0)
            if s in seen:
                continue
            seen.add(s)
            out.append(s)
            grown += 1
            if len(s) < depth:
                grow = sorted({u for c in s for u in near[c] if u > v} - s)
                frontier += [s | {u} for u in grow]
    return out


def _independent_groups(program: Program, data: EGraphData, linear: list[int]) -> list[frozenset[int]]:
    """Neighbouring pairs, and whole groups of up to 4, of independent convs (matmuls) over
    inputs of one shape."""
    kinds: dict[tuple, list[int]] = {}
    for c in linear:
        n = program[c]
        if n.op in GROUPED and len(n.children) == 2:
            kinds.setdefault((n.op, data.classes[n.children[0]].type.shape), []).append(c)
    ancestors = _ancestors(program)
    out = []
    for members in kinds.values():
        runs = [members[k:k + 2] for k in range(len(members) - 1)] + ([members] if 2 < len(members) <= 4 else [])
        for run in runs:
            if all(a not in ancestors[b] and b not in ancestors[a] for a, b in combinations(run, 2)):
                out.append(frozenset(run))
    return out


def _ancestors(program: Program) -> dict[int, set[int]]:
    """E-class -> every e-class its program node depends on."""
    memo: dict[int, set[int]] = {}
    for root in sorted(program):
        stack = [(root, False)]
        while stack:
            c, done = stack.pop()
            if c in memo:
                continue
            kids = [k for k in program[c].children if k in program] if c in program else []
            if done:
                memo[c] = set(kids).union(*(memo[k] for k in kids))
            else:
                stack.append((c, True))
                stack += [(k, False) for k in kids if k not in memo]
    return memo


def _build(program: Program, data: EGraphData, members: frozenset[int], users, cost) -> Subprogram | None:
    names: dict[int, str] = {}
    inputs: dict[str, int] = {}
    weights: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    nodes: list[Node] = []
    for c in _order(program, members):
        n = program[c]
        ins = []
        for k in n.children:
            if k != ABSENT and k not in names:
                leaf = program.get(k)
                if leaf is not None and leaf.leaf is not None and leaf.leaf[0] == "weight":
                    names[k] = f"w{len(weights)}"
                    weights[names[k]], arrays[names[k]] = k, data.weights[leaf.leaf[1]]
                else:
                    names[k] = f"x{len(inputs)}"
                    inputs[names[k]] = k
            ins.append(names[k] if k != ABSENT else "")
        names[c] = f"v{len(nodes)}"
        nodes.append(Node(n.op, ins, [names[c]], dict(n.attrs)))
    outputs = tuple(c for c in sorted(members) if c in data.roots or users.get(c, set()) - members)
    try:
        g = Graph(nodes, {x: data.classes[c].type for x, c in inputs.items()}, [names[c] for c in outputs],
                  arrays, name="subprogram")
    except EinsatError:
        return None
    total = sum(cost.node_cost(n.op, n.attrs, *g.node_types(n)) for n in g.nodes)
    return Subprogram(g, inputs, weights, outputs, total)


def _order(program: Program, members: frozenset[int]) -> list[int]:
    """`members` children first (a depth-first post-order from the smallest e-class)."""
    out: list[int] = []
    done: set[int] = set()
    for root in sorted(members):
        stack = [(root, False)]
        while stack:
            c, leaving = stack.pop()
            if leaving:
                if c not in done:
                    done.add(c)
                    out.append(c)
                continue
            if c in done:
                continue
            stack.append((c, True))
            stack += [(k, False) for k in reversed(program[c].children) if k in members and k not in done]
    return out
