"""GraphBuilder: write programs by hand.

    b = GraphBuilder("block")
    x = b.input("x", (1, 3, 224, 224))
    w = b.weight("w", (64, 3, 7, 7))            # random (seeded) weights, or pass an array
    y = b.relu(b.conv(x, w, stride=2, padding=3))
    g = b.build(y)

Every registry op is a method named like the op (`b.conv`, `b.matmul`, `b.reduce_sum`, ...):
positional arguments are the tensor inputs (None for an absent optional input), keyword
arguments the attributes. Types are inferred at once, so a bad shape fails on the line that
wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from einsat.errors import GraphError
from einsat.ir.graph import Graph, Node, _typed_node
from einsat.ir.registry import Op
from einsat.ir.types import TensorType


@dataclass(frozen=True)
class Tensor:
    """A value being built: its name and type, and the builder it belongs to."""

    name: str
    type: TensorType
    builder: "GraphBuilder"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.type})"


class GraphBuilder:
    def __init__(self, name: str = "graph", seed: int = 0):
        self.name = name
        self._inputs: dict[str, TensorType] = {}
        self._weights: dict[str, np.ndarray] = {}
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._rng = np.random.default_rng(seed)
        self._counter = 0

    # -- sources ---------------------------------------------------------------------------
    def input(self, name: str, shape, dtype=np.float32) -> Tensor:
        self._claim(name)
        t = TensorType(shape, dtype)
        self._inputs[name] = t
        self._types[name] = t
        return Tensor(name, t, self)

    def weight(self, name: str | None, value_or_shape, dtype=np.float32, scale: float | None = None) -> Tensor:
        """A constant the graph owns. Pass an array, or a shape for seeded random values
        (normal, scaled by 1/sqrt(fan-in) unless `scale` is given)."""
        name = self._claim(name or self._fresh("w"))
        if isinstance(value_or_shape, np.ndarray) or np.isscalar(value_or_shape):
            value = np.asarray(value_or_shape)
        else:
            shape = tuple(value_or_shape)
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else max(shape[0] if shape else 1, 1)
            s = scale if scale is not None else 1 / np.sqrt(max(fan_in, 1))
            value = (self._rng.standard_normal(shape) * s).astype(dtype)
        self._weights[name] = value
        self._types[name] = TensorType.of(value)
        return Tensor(name, self._types[name], self)

    def const(self, value, dtype=np.float32, name: str | None = None) -> Tensor:
        """A small constant tensor (a weight with a given value)."""
        return self.weight(name, np.asarray(value, dtype=dtype))

    # -- ops ---------------------------------------------------------------------------------
    def op(self, op: Op, *inputs: Tensor | None, name: str | None = None, outputs: int | None = None,
           **attrs: Any) -> Tensor | tuple[Tensor, ...]:
        """Apply any registry op; returns one Tensor, or a tuple for multi-output ops."""
        in_names = []
        for t in inputs:
            if t is None:
                in_names.append("")
            elif not isinstance(t, Tensor) or t.builder is not self:
                raise GraphError(f"{op.value}: input {t!r} is not a tensor of this builder")
            else:
                in_names.append(t.name)
        base = name or self._fresh(op.value)
        from einsat.ir.registry import normalize_attrs, opdef
        in_types = [self._types[n] if n else None for n in in_names]
        n_out = outputs or opdef(op).num_outputs(normalize_attrs(op, attrs, in_types, where=f"{base} ({op.value})"))
        outs = [self._claim(base if n_out == 1 else f"{base}_{k}") for k in range(n_out)]
        node = _typed_node(Node(op, in_names, outs, attrs, base), in_types, self._types)
        self._nodes.append(node)
        result = tuple(Tensor(o, self._types[o], self) for o in outs)
        return result[0] if n_out == 1 else result

    def __getattr__(self, attr: str):
        try:
            op = Op(attr)
        except ValueError:
            raise AttributeError(f"GraphBuilder has no op or method {attr!r}") from None
        return lambda *inputs, **kw: self.op(op, *inputs, **kw)

    # -- result ------------------------------------------------------------------------------
    def build(self, *outputs: Tensor, names: list[str] | None = None) -> Graph:
        """The graph computing `outputs`. `names` renames them (through identity nodes if needed)."""
        if not outputs:
            raise GraphError(f"graph {self.name!r}: build() needs at least one output")
        nodes = list(self._nodes)
        out_names = []
        for k, t in enumerate(outputs):
            want = names[k] if names else t.name
            if want != t.name:
                nodes.append(Node(Op.IDENTITY, [t.name], [want], {}, want))
            out_names.append(want)
        used = {i for n in nodes for i in n.inputs} | set(out_names)
        weights = {k: v for k, v in self._weights.items() if k in used}
        return Graph(nodes, self._inputs, out_names, weights, self.name)

    # -- names -------------------------------------------------------------------------------
    def _fresh(self, hint: str) -> str:
        while True:
            self._counter += 1
            name = f"{hint}{self._counter}"
            if name not in self._types:
                return name

    def _claim(self, name: str) -> str:
        if name in self._types:
            raise GraphError(f"graph {self.name!r}: the name {name!r} is already used")
        self._types[name] = None  # reserved until typed
        return name
