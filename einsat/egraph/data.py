"""The whole e-graph as plain Python data: what extraction reads.

This is the contract between `einsat.egraph` (which exports it from egglog) and
`einsat.extract` (which chooses one e-node per needed e-class and rebuilds an `ir.Graph`).
It holds no egglog objects, so it pickles and can be built by hand in tests.

What `Session.export()` guarantees (einsat.egraph.session):
- e-class ids are 0..n-1, numbered deterministically (the same input and rules give the same
  ids, e-nodes and order); only tensor e-classes appear (egglog's helper sorts are flattened:
  a variadic op's input list becomes its `children`, a multi-output op read through `Get`
  becomes e-nodes with `output` set, one per e-class that holds an output);
- `children` lists every input slot of the op up to the last present one; an absent optional
  input in between is `ABSENT` (-1), trailing absent inputs are left out (so `conv(x, w)` has
  two children, like the `ir.Node` it came from);
- `attrs` are the op's full normalized attributes (every registry attribute present, arrays and
  other non-primitive values restored from the session's reference table);
- every e-class has its `type`, inferred with the registry from its e-nodes;
- `EClass.name` is the source program's value name for e-classes that hold one (a hint for
  readable rebuilt programs), else None;
- constants made by rules (e.g. the kernel of a pooling rewritten as a convolution) are
  weight leaves whose arrays are in `weights`, like the source weights (named
  `fill_<value>_<shape>_<dtype>`; folded weight-only values are named `fold_<content hash>`);
- with `Limits(acyclic=True)` (the default) no e-node closes a cycle of e-classes
  (`einsat.egraph.cycles`); every e-class keeps its shallowest term.

`EGraphData.heights()` gives each e-class's shallowest term height (shared by cycle filtering,
generators and tests).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping

from einsat.ir.registry import Op
from einsat.ir.types import TensorType

ABSENT = -1  # a child slot whose optional input is absent


@dataclass(frozen=True)
class ENode:
    """One e-node: an op with static attributes over child e-classes.

    Leaves: `Op.INPUT`-like sources are encoded with `op=None` and `leaf` set:
    `("input", name)` for a graph input, `("weight", name)` for a weight of the source graph
    (its array lives in `EGraphData.weights`).
    `output` picks one output of a multi-output op (split): the e-class holds that output.
    """

    op: Op | None
    children: tuple[int, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    leaf: tuple[str, str] | None = None
    output: int = 0

    def __hash__(self):
        return hash((self.op, self.children, self.leaf, self.output))


@dataclass
class EClass:
    id: int
    nodes: list[ENode]
    type: TensorType | None
    name: str | None = None  # the source program's name for this value, if it has one


@dataclass
class EGraphData:
    """E-classes by id, the root e-classes (one per graph output, in order) and the weights."""

    classes: dict[int, EClass]
    roots: list[int]
    output_names: list[str]
    input_types: dict[str, TensorType]
    weights: dict[str, Any]

    def num_nodes(self) -> int:
        return sum(len(c.nodes) for c in self.classes.values())

    def heights(self) -> dict[int, float]:
        """Each e-class's height: that of its shallowest term (a leaf is 0, an e-node is 1 + its
        highest child). Knuth's generalization of Dijkstra, O(e-nodes log e-classes); an e-class
        with no finite term gets inf."""
        parents: dict[int, list[ENode]] = {}
        owner: dict[int, int] = {}
        missing: dict[int, int] = {}
        height = {c: float("inf") for c in self.classes}
        heap: list[tuple[float, int]] = []
        for cid, cls in self.classes.items():
            for node in cls.nodes:
                kids = {c for c in node.children if c != ABSENT}
                owner[id(node)], missing[id(node)] = cid, len(kids)
                for c in kids:
                    parents.setdefault(c, []).append(node)
                if not kids:
                    heap.append((0, cid))
        heapq.heapify(heap)
        done: set[int] = set()
        while heap:
            h, cid = heapq.heappop(heap)
            if cid in done:
                continue
            done.add(cid)
            height[cid] = h
            for node in parents.get(cid, ()):
                missing[id(node)] -= 1
                if missing[id(node)] == 0:
                    p = owner[id(node)]
                    nh = 1 + max(height[c] for c in node.children if c != ABSENT)
                    if p not in done and nh < height[p]:
                        height[p] = nh
                        heapq.heappush(heap, (nh, p))
        return height
