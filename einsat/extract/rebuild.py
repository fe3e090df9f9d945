"""From a selection back to a program: the chosen e-nodes as an `ir.Graph`.

The graph keeps the source's interface: the same inputs (in order, even unused ones) and the
same output names; weights keep their names. Each needed e-class becomes one value; the
outputs of a multi-output op chosen for several e-classes come from one node. Constant
e-classes (see `Problem`) are evaluated once with the registry's NumPy semantics and become
weights. The `Graph` constructor validates the result (types re-inferred, no cycle).

No weight grows without need: for a target that folds values made from weights alone when it
loads the program (`CostModel.folds_weights_at_load`: onnxruntime, `cost="cpu"`), a constant
that is larger than the source weights it is laid out from (a 1×1 kernel zero-padded to 3×3 so
that it merges with a 3×3 conv, then concatenated: SqueezeNet's fire modules made the optimized
file grow from 5 to 7 MB that way) is not stored as a new weight; the program keeps its
data-movement ops (`LAYOUT_OPS`) over the source weights instead, which that target folds at
load and its cost model charges nothing (`extract.fusion`). einsat's own runtimes (NumPy, the
GPU program) run every node, so for their cost models (the rooflines) the constant is stored:
re-laying it out on every run would cost SqueezeNet a third of its modeled gain.
"""

from __future__ import annotations

import numpy as np

from einsat.egraph.weights import FOLD_PREFIX
from einsat.errors import EinsatError, ExtractionError
from einsat.extract.problem import Problem, Selection, node_key
from einsat.ir.graph import Graph, Node, fresh_name
from einsat.ir.groups import LAYOUT
from einsat.ir.registry import Op, opdef


class _Names:
    def __init__(self, taken):
        self.taken = set(taken)

    def fresh(self, hint: str) -> str:
        return fresh_name(hint, self.taken)


def rebuild(problem: Problem, selection: Selection, name: str = "optimized",
            origins: dict[str, int] | None = None) -> Graph:
    """The `ir.Graph` of `selection` (which must be acyclic and cover every needed e-class).
    `origins`, when given, receives the e-class of every weight the graph holds (by weight name):
    how a caller finds the derivation of a folded weight (`egraph.weights.weight_recipe`)."""
    data = problem.data
    order = problem.order(selection)
    lay_out = problem.model.folds_weights_at_load
    owner: dict[int, str] = {}  # root e-class -> the output name its value takes
    for r, o in zip(data.roots, data.output_names):
        owner.setdefault(r, o)
    names = _Names(set(data.input_types) | set(data.output_names) | set(data.weights))
    value: dict[int, str] = {}
    weights: dict[str, np.ndarray] = {}
    nodes: list[Node] = []
    group_outs: dict[tuple, list[str]] = {}
    users = _group_users(problem, selection, order)
    folder = _Folder(problem)

    def name_for(cid, hint):
        """An output's own name, else the source program's name for the value, else `hint`."""
        if cid in owner:
            return owner[cid]
        return names.fresh(getattr(data.classes[cid], "name", None) or hint)

    compact = _Compact(problem)

    def laid_out(cid) -> str | None:
        """The value of constant `cid` as layout ops over the source weights, when storing it
        would grow the weights (see the module docstring); None otherwise."""
        plan = compact.plan(cid)
        if plan is None:
            return None
        for c, n in plan:  # children first
            if c in value:
                continue
            if n.leaf is not None:
                value[c] = _weight(n.leaf[1], data, weights, names, owner.get(c))
                if origins is not None:
                    origins[value[c]] = c
                continue
            out = name_for(c, f"{n.op.value}_w")
            nodes.append(Node(n.op, [value[k] if k >= 0 else "" for k in n.children], [out], dict(n.attrs)))
            value[c] = out
        return value[cid]

    for cid in order:
        cand = problem.candidates[selection[cid]]
        node = cand.node
        if node.leaf is not None and node.leaf[0] == "input":
            value[cid] = node.leaf[1]
        elif (node.leaf is not None or cand.folded) and cid in value:
            continue  # laid out already, as part of another constant's layout
        elif (node.leaf is not None and node.leaf[1].startswith(FOLD_PREFIX)) or cand.folded:
            if lay_out and laid_out(cid) is not None:
                continue
            if node.leaf is not None:
                value[cid] = _weight(node.leaf[1], data, weights, names, owner.get(cid))
            else:
                value[cid] = name_for(cid, f"{node.op.value}_const")
                weights[value[cid]] = folder.value(cid)
            if origins is not None:
                origins[value[cid]] = cid
        elif node.leaf is not None:
            value[cid] = _weight(node.leaf[1], data, weights, names, owner.get(cid))
            if origins is not None:
                origins[value[cid]] = cid
        elif cand.folded:
            value[cid] = name_for(cid, f"{node.op.value}_const")
            weights[value[cid]] = folder.value(cid)
            if origins is not None:
                origins[value[cid]] = cid
        else:
            key = node_key(node)
            if key not in group_outs:
                outs = []
                for k in range(opdef(node.op).num_outputs(node.attrs)):
                    user = users.get((key, k))
                    outs.append(name_for(user, f"{node.op.value}_{user}") if user is not None
                                else names.fresh(f"{node.op.value}_unused"))
                group_outs[key] = outs
                inputs = [value[c] if c >= 0 else "" for c in node.children]
                nodes.append(Node(node.op, inputs, outs, dict(node.attrs)))
            value[cid] = group_outs[key][node.output]

    for r, o in zip(data.roots, data.output_names):
        if value[r] != o:
            nodes.append(Node(Op.IDENTITY, [value[r]], [o]))
    try:
        return Graph(nodes, data.input_types, list(data.output_names), weights, name)
    except EinsatError as e:
        raise ExtractionError(f"the extracted program is invalid: {e}") from e


def _weight(leaf: str, data, weights, names: _Names, output: str | None) -> str:
    """A source weight's value name: its own, unless that is another value's output name."""
    if leaf not in data.weights:
        raise ExtractionError(f"weight {leaf!r} is used but the e-graph has no array for it")
    name = leaf
    if leaf in data.output_names and leaf != output:
        name = names.fresh(leaf + "_w")
    weights[name] = data.weights[leaf]
    return name


def _group_users(problem: Problem, selection: Selection, order) -> dict[tuple, int]:
    """(group key, output index) -> the e-class that uses it (the first one, in order)."""
    users: dict[tuple, int] = {}
    for cid in order:
        cand = problem.candidates[selection[cid]]
        if cand.node.leaf is None and not cand.folded:
            users.setdefault((node_key(cand.node), cand.node.output), cid)
    return users


# ops that only move or pad data (the registry's layout-only ops with one output, which is what a
# laid-out step emits): a constant made by them is laid out at load time, not stored
LAYOUT_OPS = LAYOUT


class _Compact:
    """Derivations of constant e-classes by layout ops from source weights (not folded ones)."""

    def __init__(self, problem: Problem):
        self.data = problem.data
        self.types = problem.types
        self.memo: dict[int, list | None] = {}

    def _derive(self, cid: int, visiting: set[int]) -> list | None:
        """[(e-class, e-node)] children first, ending with `cid`, or None."""
        if cid in self.memo:
            return self.memo[cid]
        if cid in visiting:
            return None
        visiting.add(cid)
        found = None
        nodes = self.data.classes[cid].nodes
        leaf = next((n for n in nodes if n.leaf is not None and n.leaf[0] == "weight"
                     and not n.leaf[1].startswith(FOLD_PREFIX) and n.leaf[1] in self.data.weights), None)
        if leaf is not None:
            found = [(cid, leaf)]
        else:
            for n in nodes:
                if n.op not in LAYOUT_OPS or not n.children:
                    continue
                parts = [self._derive(c, visiting) for c in n.children if c >= 0]
                if all(p is not None for p in parts):
                    found = [step for p in parts for step in p] + [(cid, n)]
                    break
        visiting.discard(cid)
        self.memo[cid] = found
        return found

    def plan(self, cid: int) -> list | None:
        """The layout derivation of `cid` when its value is larger than the distinct source
        weights it reads (storing it would grow the weights), else None."""
        steps = self._derive(cid, set())
        if steps is None or len(steps) < 2:
            return None
        sources = {n.leaf[1] for _, n in steps if n.leaf is not None}
        source_bytes = sum(np.asarray(self.data.weights[w]).nbytes for w in sources)
        if self.types[cid].nbytes <= source_bytes:
            return None
        seen, out = set(), []
        for c, n in steps:
            if c not in seen:
                seen.add(c)
                out.append((c, n))
        return out


class _Folder:
    """Evaluates constant e-classes along their derivations (memoized)."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.memo: dict[int, np.ndarray] = {}

    def value(self, cid: int) -> np.ndarray:
        if cid in self.memo:
            return self.memo[cid]
        stack = [cid]
        while stack:
            c = stack[-1]
            node = self.problem.constants[c]
            todo = [k for k in node.children if k >= 0 and k not in self.memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if c in self.memo:
                continue
            if node.leaf is not None:
                out = np.asarray(self.problem.data.weights[node.leaf[1]])
            else:
                args = [self.memo[k] if k >= 0 else None for k in node.children]
                out = opdef(node.op).numpy(args, node.attrs)[node.output]
            want = self.problem.types[c]
            out = np.array(out)  # a private copy, read-only: the Graph keeps it without copying
            out.setflags(write=False)
            if out.shape != want.shape or out.dtype != want.dtype:
                raise ExtractionError(f"folding {node.op.value if node.op else node.leaf} gave "
                                      f"{out.shape} {out.dtype}, its e-class is {want}")
            self.memo[c] = out
        return self.memo[cid]
