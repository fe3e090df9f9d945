"""The program IR: an immutable DAG of nodes over named, typed values.

A value is produced by exactly one of: a graph input, a weight (a constant array the graph
owns, ONNX's initializer) or a node output. Building a `Graph` validates it completely:
names are unique, every use is defined, the nodes are put in topological order (a cycle is
an error naming its nodes), attributes are normalized and every node's output types are
inferred from the registry.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from einsat.errors import GraphError, ShapeError, describe_node
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType


@dataclass(frozen=True, eq=False)
class Node:
    """One op application. `inputs` may contain '' for an absent optional input."""

    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))
        if not self.name:
            object.__setattr__(self, "name", self.outputs[0] if self.outputs else self.op.value)

    def __reduce__(self):  # pickles (to a worker process) with its attributes as a plain dict
        return (Node, (self.op, self.inputs, self.outputs, dict(self.attrs), self.name))

    @property
    def op_name(self) -> str:
        if self.op is Op.OPAQUE:
            return f"opaque {self.attrs.get('op_type', '?')}"
        return self.op.value

    @property
    def definition(self):
        return opdef(self.op)


def fresh_name(base: str, taken: set[str], sep: str = "_") -> str:
    """`base`, or else `base<sep>k` for the smallest k >= 1 not in `taken`; the name is added to
    `taken`."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{sep}{k}"
    taken.add(name)
    return name


def _frozen(array) -> np.ndarray:
    a = np.asarray(array)
    if a.flags.writeable:
        a = a.copy()
        a.setflags(write=False)
    return a


class Graph:
    """An immutable, validated tensor program.

    >>> g = Graph(nodes, inputs={"x": TensorType((1, 3))}, outputs=["y"], weights={"w": w})

    `stripped_weights`: the inputs that stand for weights the model's file does not hold (an
    ONNX model committed without them, `ir.onnx.weights.STRIPPED_KEY`), so that errors about
    them can say so.
    """

    __slots__ = ("name", "inputs", "outputs", "nodes", "weights", "types", "stripped_weights", "_producer",
                 "__weakref__")

    def __init__(self, nodes: Iterable[Node], inputs: Mapping[str, TensorType] | Sequence[tuple[str, TensorType]],
                 outputs: Sequence[str], weights: Mapping[str, np.ndarray] | None = None, name: str = "graph",
                 stripped_weights: Iterable[str] = ()):
        inputs = dict(inputs)
        weights = {k: _frozen(v) for k, v in (weights or {}).items()}
        types: dict[str, TensorType] = {}
        for n, t in inputs.items():
            if not isinstance(t, TensorType):
                raise GraphError(f"graph {name!r}: input {n!r} needs a TensorType, got {t!r}")
            types[n] = t
        for n, a in weights.items():
            if n in types:
                raise GraphError(f"graph {name!r}: {n!r} is both an input and a weight")
            types[n] = TensorType.of(a)

        nodes = list(nodes)
        producer: dict[str, Node] = {}
        for node in nodes:
            for o in node.outputs:
                if not o:
                    raise GraphError(f"graph {name!r}: {describe_node(node)} has an unnamed output")
                if o in types or o in producer:
                    raise GraphError(f"graph {name!r}: value {o!r} is defined twice "
                                     f"(again by {describe_node(node)})")
                producer[o] = node
        for node in nodes:
            for i in node.inputs:
                if i and i not in types and i not in producer:
                    raise GraphError(f"graph {name!r}: {describe_node(node)} uses {i!r}, "
                                     "which no input, weight or node defines")
        for o in outputs:
            if o not in types and o not in producer:
                raise GraphError(f"graph {name!r}: output {o!r} is not defined")

        ordered = _toposort(nodes, producer, name)
        final: list[Node] = []
        for node in ordered:
            in_types = [types[i] if i else None for i in node.inputs]
            node = _typed_node(node, in_types, types)
            final.append(node)
        self.name = name
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.nodes = tuple(final)
        self.weights = MappingProxyType(weights)
        self.types = MappingProxyType(types)
        self.stripped_weights = frozenset(stripped_weights)
        if not self.stripped_weights <= set(inputs):
            raise GraphError(f"graph {name!r}: stripped weights {sorted(self.stripped_weights - set(inputs))} "
                             "are not inputs")
        self._producer = {o: n for n in final for o in n.outputs}

    def __reduce__(self):
        """Pickles as its parts (to a worker process): unpickling validates it again."""
        return (Graph, (self.nodes, self.input_types(), self.outputs, dict(self.weights), self.name,
                        self.stripped_weights))

    # -- queries --------------------------------------------------------------------------
    def producer(self, value: str) -> Node | None:
        return self._producer.get(value)

    def consumers(self) -> dict[str, list[Node]]:
        uses: dict[str, list[Node]] = {}
        for node in self.nodes:
            for i in node.inputs:
                if i:
                    uses.setdefault(i, []).append(node)
        return uses

    def input_types(self) -> dict[str, TensorType]:
        return {n: self.types[n] for n in self.inputs}

    def output_types(self) -> dict[str, TensorType]:
        return {n: self.types[n] for n in self.outputs}

    def node_types(self, node: Node) -> tuple[list[TensorType | None], list[TensorType]]:
        return [self.types[i] if i else None for i in node.inputs], [self.types[o] for o in node.outputs]

    def flops(self) -> int:
        return sum(node.definition.flops(*self.node_types(node), node.attrs) for node in self.nodes)

    def bytes(self) -> int:
        return sum(node.definition.bytes(*self.node_types(node), node.attrs) for node in self.nodes)

    def _repr_svg_(self) -> str:
        """The program as a picture in a notebook (drawn by `einsat.viz.graph`, registered from above)."""
        from einsat.ir.display import draw
        return draw("graph", self)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op_name] = counts.get(node.op_name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def replace(self, **changes) -> "Graph":
        fields = dict(nodes=self.nodes, inputs=self.input_types(), outputs=self.outputs,
                      weights=self.weights, name=self.name)
        fields.update(changes)
        if "stripped_weights" not in fields:  # those still inputs
            fields["stripped_weights"] = self.stripped_weights & set(dict(fields["inputs"]))
        return Graph(**fields)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return (f"<Graph {self.name!r}: {len(self.nodes)} nodes, "
                f"inputs {list(self.inputs)}, outputs {list(self.outputs)}>")

    def __str__(self) -> str:
        return format_graph(self)


def _typed_node(node: Node, in_types, types: dict[str, TensorType]) -> Node:
    """Normalize a node's attributes, infer its output types and record them in `types`."""
    d = opdef(node.op)
    lo, hi = d.arity
    n_in = len(node.inputs)
    if n_in < lo or (hi is not None and n_in > hi):
        want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
        raise ShapeError(f"{describe_node(node, types)}: takes {want} inputs, got {n_in}")
    attrs = normalize_attrs(node.op, node.attrs, in_types, where=describe_node(node, types))
    try:
        outs = d.infer(in_types, attrs)
    except ShapeError as e:
        raise ShapeError(f"{describe_node(node, types)}: {e}") from None
    if len(outs) != len(node.outputs):
        raise ShapeError(f"{describe_node(node, types)}: produces {len(outs)} outputs, "
                         f"the node names {len(node.outputs)}")
    for o, t in zip(node.outputs, outs):
        types[o] = t
    return Node(node.op, node.inputs, node.outputs, attrs, node.name)


def _toposort(nodes: list[Node], producer: dict[str, Node], name: str) -> list[Node]:
    """Kahn's algorithm, stable: among ready nodes the one listed first goes first."""
    index = {id(n): k for k, n in enumerate(nodes)}
    deps = {id(n): {id(producer[i]) for i in n.inputs if i in producer} for n in nodes}
    users: dict[int, list[int]] = {}
    for k, ds in deps.items():
        for d in ds:
            users.setdefault(d, []).append(k)
    missing = {k: len(ds) for k, ds in deps.items()}
    ready = [index[k] for k, c in missing.items() if c == 0]
    heapq.heapify(ready)
    out: list[Node] = []
    while ready:
        n = nodes[heapq.heappop(ready)]
        out.append(n)
        for u in users.get(id(n), ()):
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, index[u])
    if len(out) != len(nodes):
        stuck = [n for n in nodes if missing[id(n)] > 0]
        cycle = _find_cycle(stuck, producer)
        raise GraphError(f"graph {name!r} has a cycle: " + " -> ".join(
            f"{n.name!r} ({n.op_name})" for n in cycle))
    return out


def _find_cycle(stuck: list[Node], producer: dict[str, Node]) -> list[Node]:
    stuck_ids = {id(n) for n in stuck}
    node = stuck[0]
    seen: dict[int, int] = {}
    path: list[Node] = []
    while id(node) not in seen:
        seen[id(node)] = len(path)
        path.append(node)
        node = next(producer[i] for i in node.inputs if i in producer and id(producer[i]) in stuck_ids)
    cycle = path[seen[id(node)]:]
    return list(reversed(cycle)) + [cycle[-1]]


def _fmt_attr(v) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor{list(v.shape)}" if v.size > 4 else np.array2string(v, separator=",")
    if isinstance(v, tuple):
        return "(" + ",".join(map(str, v)) + ")"
    if isinstance(v, bytes):  # an opaque node's serialized ONNX node
        return f"<{len(v)} bytes>"
    if isinstance(v, Graph):  # a loop or branch body: its listing, indented under the node
        return "{\n" + "\n".join("      " + line for line in str(v).splitlines()) + "\n    }"
    return repr(v) if isinstance(v, str) else str(v)


def format_graph(g: Graph, max_nodes: int | None = None) -> str:
    """A readable listing: one line per node, attributes that differ from defaults, types."""
    lines = [f"graph {g.name}(" + ", ".join(f"{i}: {g.types[i]}" for i in g.inputs) + ")"]
    if g.weights:
        total = sum(a.nbytes for a in g.weights.values())
        lines.append(f"  # {len(g.weights)} weights, {total / 1e6:.2f} MB")
    nodes = g.nodes if max_nodes is None else g.nodes[:max_nodes]
    for node in nodes:
        d = node.definition
        shown = {k: v for k, v in node.attrs.items()
                 if k not in d.attrs or not _equal(v, d.attrs[k].default)}
        args = [i or "_" for i in node.inputs] + [f"{k}={_fmt_attr(v)}" for k, v in shown.items()]
        outs = ", ".join(node.outputs)
        types = ", ".join(str(g.types[o]) for o in node.outputs)
        lines.append(f"  {outs} = {node.op_name}({', '.join(args)})  # {types}")
    if max_nodes is not None and len(g.nodes) > max_nodes:
        lines.append(f"  ... {len(g.nodes) - max_nodes} more nodes")
    lines.append("  return " + ", ".join(f"{o}: {g.types[o]}" for o in g.outputs))
    return "\n".join(lines)


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    return a == b
