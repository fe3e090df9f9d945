"""The extraction problem: an exported e-graph with a cost on every e-node.

`Problem(data, model)` prepares `EGraphData` for the extractors:

- every e-node becomes a `Candidate` with its cost from the `CostModel` (inputs: its child
  e-classes' types; outputs: its e-class's type, or all of a multi-output op's outputs);
- the outputs of one multi-output application (split) form a *group* that is paid once;
- only e-classes reachable from the roots and extractable (some e-node whose children are all
  extractable) are kept; e-nodes with an unextractable child or their own e-class as a child
  are dropped;
- with `fold_constants`, an e-class computable from weights alone (`egraph.weights.weight_only`,
  values up to `FOLD_BYTES`, each op up to `FOLD_FLOPS`, never through a broadcast,
  `OpDef.repeats_input`: larger ones are left to the program, where they cost their run time) is
  a *constant*: it becomes a source of cost 0, and `rebuild`
  evaluates it once at compile time (TASO's and PET's weight preprocessing). Its derivation is
  chosen level by level, so it is acyclic.

A *selection* maps e-classes to candidate indices: one e-node per needed e-class. Its cost is
the sum over the distinct groups reachable from the roots (a shared value is paid once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from einsat.cost.model import CostModel
from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.egraph.weights import closure, output_types, parents, weight_only
from einsat.errors import ExtractionError
from einsat.ir.registry import opdef
from einsat.ir.types import TensorType

FOLD_BYTES = 64 << 20  # constants larger than this stay computations
FOLD_FLOPS = 1e10      # and so do weight-only ops costlier than this to evaluate once in NumPy

Selection = dict[int, int]  # e-class id -> candidate index


def freeze(value):
    """A hashable stand-in for an attribute value (arrays by dtype, shape and bytes)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def node_key(node: ENode) -> tuple:
    """What identifies one application of an op (all outputs of a split share it)."""
    return (node.op, node.children, freeze(dict(node.attrs)), node.leaf)


@dataclass(frozen=True)
class Candidate:
    """One e-node of e-class `cls`, costed. `children` are e-class ids (-1: absent input)."""

    index: int
    cls: int
    node: ENode
    cost: float
    group: int
    folded: bool = False

    @property
    def children(self) -> tuple[int, ...]:
        return () if self.folded else tuple(c for c in self.node.children if c >= 0)


class Problem:
    """Candidates by e-class, group costs and constant e-classes, ready for an extractor."""

    def __init__(self, data: EGraphData, model: CostModel, fold_constants: bool = True):
        self.data = data
        self.model = model
        missing = [r for r in data.roots if r not in data.classes]
        if missing:
            raise ExtractionError(f"root e-class(es) {missing} are not in the e-graph")
        self.types = _class_types(data)
        self._parents = parents(data)
        self.constants = (weight_only(data, FOLD_BYTES, FOLD_FLOPS, self.types, self._parents)
                          if fold_constants else {})
        self.candidates: list[Candidate] = []
        self.group_cost: list[float] = []
        self.group_size: list[int] = []
        self.classes: dict[int, list[int]] = {}
        self._build()

    # -- construction ------------------------------------------------------------------------
    def _build(self) -> None:
        data, keep = self.data, _extractable(self.data, self._parents, self.constants)
        unextractable = [r for r in self.data.roots if r not in keep]
        if unextractable:
            raise ExtractionError(f"output e-class(es) {unextractable} have no finite term: every "
                                  "e-node depends on itself")
        groups: dict[tuple, int] = {}
        memo: dict[tuple, float] = {}
        for cid in self._reachable(keep):
            cls = data.classes[cid]
            if cid in self.constants:
                nodes = [(self.constants[cid], True)]
            else:
                nodes = [(n, False) for n in cls.nodes
                         if all(c in keep for c in n.children if c >= 0) and cid not in n.children]
            idx = []
            for node, folded in nodes:
                key = node_key(node) if not folded else ("folded", cid)
                if key not in groups:
                    groups[key] = len(self.group_cost)
                    self.group_cost.append(0.0 if folded else self._cost(node, cls, memo))
                    self.group_size.append(0)
                g = groups[key]
                self.group_size[g] += 1
                cand = Candidate(len(self.candidates), cid, node, self.group_cost[g], g, folded)
                self.candidates.append(cand)
                idx.append(cand.index)
            self.classes[cid] = idx

    def _reachable(self, keep: set[int]) -> list[int]:
        seen, order, stack = set(), [], list(self.data.roots)
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen.add(cid)
            order.append(cid)
            if cid in self.constants:
                continue
            for node in self.data.classes[cid].nodes:
                if all(c in keep for c in node.children if c >= 0):
                    stack.extend(c for c in node.children if c >= 0 and c not in seen)
        return sorted(order)

    def _cost(self, node: ENode, cls: EClass, memo: dict) -> float:
        if node.op is None or opdef(node.op).source:
            return 0.0
        ins = tuple(self.types.get(c) if c >= 0 else None for c in node.children)
        outs = output_types(node, ins, self.types[cls.id])
        key = (node.op, freeze(dict(node.attrs)), ins, outs)
        if key not in memo:
            cost = float(self.model.node_cost(node.op, node.attrs, ins, outs))
            if not math.isfinite(cost) or cost < 0:
                raise ExtractionError(f"cost model {self.model.name!r} gave {cost} for "
                                      f"{node.op.value} on {list(ins)}: costs must be finite and >= 0")
            memo[key] = cost
        return memo[key]

    # -- selections --------------------------------------------------------------------------
    def share(self, index: int) -> float:
        """A candidate's share of its group's cost (heuristics charge each output this much)."""
        c = self.candidates[index]
        return self.group_cost[c.group] / self.group_size[c.group]

    def order(self, selection: Selection) -> list[int]:
        """The e-classes the selection needs, children before parents; raises on a cycle."""
        state: dict[int, int] = {}  # 1: on the stack, 2: done
        out: list[int] = []
        for root in self.data.roots:
            stack = [(root, False)]
            while stack:
                cid, leaving = stack.pop()
                if leaving:
                    state[cid] = 2
                    out.append(cid)
                    continue
                if state.get(cid) == 2:
                    continue
                if state.get(cid) == 1:
                    raise ExtractionError(f"the selection has a cycle through e-class {cid}")
                if cid not in selection:
                    raise ExtractionError(f"the selection has no e-node for needed e-class {cid}")
                state[cid] = 1
                stack.append((cid, True))
                for child in reversed(self.candidates[selection[cid]].children):
                    if state.get(child) != 2:
                        if state.get(child) == 1:
                            raise ExtractionError(f"the selection has a cycle through e-class {child}")
                        stack.append((child, False))
        return out

    def is_acyclic(self, selection: Selection) -> bool:
        try:
            self.order(selection)
        except ExtractionError:
            return False
        return True

    def cost(self, selection: Selection) -> float:
        """The DAG cost: each distinct group reachable from the roots paid once."""
        groups = {self.candidates[selection[c]].group for c in self.order(selection)}
        return sum(self.group_cost[g] for g in sorted(groups))

    def num_candidates(self) -> int:
        return len(self.candidates)


def _class_types(data: EGraphData) -> dict[int, TensorType]:
    """E-class types, inferring through the registry where the export left one out."""
    types = {cid: c.type for cid, c in data.classes.items() if c.type is not None}
    changed = True
    while changed and len(types) < len(data.classes):
        changed = False
        for cid, cls in data.classes.items():
            if cid in types:
                continue
            for node in cls.nodes:
                t = _infer_one(node, types, data)
                if t is not None:
                    types[cid] = t
                    changed = True
                    break
    return types


def _infer_one(node: ENode, types, data: EGraphData) -> TensorType | None:
    if node.leaf is not None:
        kind, name = node.leaf
        if kind == "input":
            return data.input_types.get(name)
        return TensorType.of(data.weights[name]) if name in data.weights else None
    if any(c >= 0 and c not in types for c in node.children):
        return None
    ins = [types[c] if c >= 0 else None for c in node.children]
    return opdef(node.op).infer(ins, node.attrs)[node.output]


def _extractable(data: EGraphData, users, constants) -> set[int]:
    """E-classes with a finite term (fixpoint from the sources)."""
    seeds = dict(constants)
    for cid, cls in data.classes.items():
        for node in cls.nodes:
            if cid not in seeds and not any(c >= 0 for c in node.children):
                seeds[cid] = node
    return set(closure(users, seeds, lambda cid, node: True))
