"""PET's correction (§5.2 step 3): the original program on just the wrong regions, then `correct`.

`restrict(graph, value, region)` emits nodes computing `value[region]` from as little of the
inputs as it can: each op maps its output region to the input regions it reads (`restrict_rules`)
— a conv reads the window rows of its output rows with the padding adjusted at the borders, a
matmul the rows and columns, a concat only the pieces that overlap, a reshape the boxes of its
input that the region is cut into (then concatenated) — and an op without a rule is computed
whole and sliced (weights too: folding slices of weights is a later pass's job, and the verifier
recognizes the original weight only whole). Regions may be strided (every other row behind a
parity reordering); a transpose that moves only dims of size 1 is emitted as a reshape.
`correct(original, mutant)` is the mutant with every region the corrector reported overwritten
by the restricted original:

    out = correct(... correct(mutant_out, fix_1, region_1) ..., fix_k, region_k)
"""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op
from einsat.verify.regions import Region


class Emitter:
    """Builds the nodes of restricted copies of `graph`'s values into a new graph."""

    def __init__(self, graph: Graph, prefix: str, shared: dict[str, str] | None = None):
        self.g, self.prefix = graph, prefix
        self.shared = shared or {}  # weights of `graph` that the target graph already holds
        self.nodes: list[Node] = []
        self.weights: dict[str, np.ndarray] = {}
        self.memo: dict[tuple, str] = {}
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def emit(self, op: Op, inputs: list[str], attrs: dict, hint: str) -> str:
        out = self.fresh(hint)
        self.nodes.append(Node(op, inputs, [out], attrs, out))
        return out

    def value(self, name: str, region: Region | None = None) -> str:
        """A value of the new graph equal to `name[region]` in `graph` (the whole value if None)."""
        if not name:
            return ""
        shape = self.g.types[name].shape
        if region is not None and region.unit and region.starts == (0,) * len(shape) and region.ends == shape:
            region = None
        key = (name, region)
        if key not in self.memo:
            self.memo[key] = self._whole(name) if region is None else self._part(name, region)
        return self.memo[key]

    def _whole(self, name: str) -> str:
        if name in self.g.inputs:
            return name
        if name in self.g.weights:
            if name in self.shared:
                return self.shared[name]
            new = self.prefix + name
            self.weights[new] = self.g.weights[name]
            return new
        node = self.g.producer(name)
        ins = [self.value(i) for i in node.inputs]
        outs = [self.prefix + o for o in node.outputs]
        self.nodes.append(Node(node.op, ins, outs, dict(node.attrs), self.prefix + node.name))
        for o, new in zip(node.outputs, outs):
            self.memo[(o, None)] = new
        return self.prefix + name

    def _part(self, name: str, region: Region) -> str:
        from einsat.verify.restrict_rules import RESTRICT, STRIDED, Pieces
        node = self.g.producer(name)
        plan = None
        if node is not None and (region.unit or node.op in STRIDED):
            rule = RESTRICT.get(node.op)
            plan = rule(node, node.outputs.index(name), region, self.g) if rule else None
        if plan is None and not region.unit:  # the plain box around it, then every step-th
            box = self.value(name, region.bounds())
            return self.emit(Op.SLICE, [box], {"starts": (0,) * len(region.starts), "ends": region.bounds().shape,
                                               "steps": region.steps}, name)
        if plan is None:
            whole = self.value(name)
            return self.emit(Op.SLICE, [whole], {"starts": region.starts, "ends": region.ends}, name)
        if isinstance(plan, Pieces):
            return self._pieces(node.inputs[0], plan, name)
        op, inputs, attrs = plan
        if op is None:  # an alias: the value is a region of an input
            return self.value(*inputs[0])
        if op is Op.TRANSPOSE and _keeps_order(attrs["perm"], inputs[0][1].shape):
            op, attrs = Op.RESHAPE, {"shape": region.shape}  # it moves only dims of size 1
        return self.emit(op, [self.value(i, r) for i, r in inputs], attrs, name)

    def _pieces(self, source: str, plan, name: str) -> str:
        """A reshape's region from its `Pieces`: boxes of `source` reshaped, then concatenated."""
        if plan.axis is None:
            piece = self.value(source, plan.source)
            if plan.source.shape != plan.shape:
                piece = self.emit(Op.RESHAPE, [piece], {"shape": plan.shape}, name)
            return piece
        parts = [self._pieces(source, p, name) for p in plan.parts]
        return self.emit(Op.CONCAT, parts, {"axis": plan.axis}, name)


def _keeps_order(perm, shape) -> bool:
    """Whether transposing `shape` by `perm` keeps its elements in order (a reshape)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


def restrict(graph: Graph, value: str, region: Region, name: str | None = None) -> Graph:
    """A graph computing `value[region]` of `graph` (same inputs)."""
    em = Emitter(graph, "r/")
    out = em.value(value, region)
    outs = name or f"{value}_region"
    nodes = em.nodes + [Node(Op.IDENTITY, [out], [outs], {}, outs)]
    return Graph(nodes, graph.input_types(), [outs], em.weights, name=f"{graph.name}_restricted")


def correct(original: Graph, mutant: Graph, differences=None, **kwargs) -> Graph:
    """The mutant with every region where it differs from `original` recomputed by the original.

    `differences` comes from `find_differences(original, mutant)` (computed when omitted, with
    `kwargs`). The result has the mutant's inputs and output names and is equivalent to
    `original`.
    """
    from einsat.verify.corrector import check_pair, find_differences
    pairs = check_pair(original, mutant)
    diffs = differences if differences is not None else find_differences(original, mutant, **kwargs)
    taken = set(mutant.types)
    prefix = "fix/"
    while any(n.startswith(prefix) for n in taken):
        prefix = "_" + prefix
    shared = {n: n for n, a in original.weights.items()
              if n in mutant.weights and mutant.weights[n].shape == a.shape and np.array_equal(mutant.weights[n], a)}
    em = Emitter(original, prefix, shared)
    rename = {b: f"{prefix}mutant/{b}" for _, b in pairs if diffs.regions[_]}
    nodes = [Node(n.op, [rename.get(i, i) for i in n.inputs], [rename.get(o, o) for o in n.outputs],
                  dict(n.attrs), n.name) for n in mutant.nodes]
    for b, new in rename.items():
        if mutant.producer(b) is None:  # the output is an input or weight of the mutant
            nodes.append(Node(Op.IDENTITY, [b], [new], {}, new))
    for a, b in pairs:
        regions = diffs.regions[a]
        cur = rename.get(b, b)
        for k, region in enumerate(regions):
            fix = em.value(a, region)
            out = b if k == len(regions) - 1 else f"{prefix}{b}_corrected{k}"
            nodes.append(Node(Op.CORRECT, [cur, fix], [out], {"region": region.attr}, out))
            cur = out
    weights = dict(mutant.weights)
    weights.update(em.weights)
    return Graph(nodes + em.nodes, mutant.input_types(), list(mutant.outputs), weights,
                 name=f"{mutant.name}_corrected")
