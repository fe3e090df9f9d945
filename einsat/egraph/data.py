"""The whole e-graph as plain Python data: what extraction reads.

This is the contract between `einsat.egraph` (which exports it from egglog) and
`einsat.extract` (which chooses one e-node per needed e-class and rebuilds an `ir.Graph`).
It holds no egglog objects, so it pickles and can be built by hand in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from einsat.ir.registry import Op
from einsat.ir.types import TensorType


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
