"""Symbolic programs at given sizes: bind the symbols from actual shapes, and instantiate.

    sizes = bind_sizes(graph, {"input_ids": (2, 7), ...})   # {"batch": 2, "sequence": 7}
    static = instantiate(graph, sizes)                      # the static program at those sizes

A program imported with its ONNX `dim_param`s (`load_onnx(..., symbolic=True)`) has types whose
dims are `SymDim`s, and attributes that may hold them (a Reshape target `[batch, sequence, 12,
64]`, an opaque node's output types). `bind_sizes` reads each symbol's value off the inputs'
actual shapes: a dim that is a bare symbol names it; every other dim (`past_sequence + 1`) is
checked against the values found, so inputs that disagree are an `InputError`. `instantiate`
substitutes the values in every input type and attribute and builds the static `Graph` again
(types re-inferred from the ops' rules), which every backend runs as today.
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping

from einsat.errors import InputError, ShapeError, describe_node
from einsat.ir.dims import SymDim, evaluate, symbols_of
from einsat.ir.graph import Graph, Node
from einsat.ir.types import TensorType

_STATIC: "weakref.WeakKeyDictionary[Graph, bool]" = weakref.WeakKeyDictionary()


def is_static(graph: Graph) -> bool:
    """No value of the graph has a symbolic dim (memoized per graph: `einsat.run` asks every call)."""
    known = _STATIC.get(graph)
    if known is None:
        known = _STATIC[graph] = all(t.is_static for t in graph.types.values())
    return known


def graph_symbols(graph: Graph) -> list[str]:
    return sorted(set().union(*(t.symbols for t in graph.types.values())))


def bind_sizes(graph: Graph, shapes: Mapping[str, tuple]) -> dict[str, int]:
    """Each symbol of the graph's input types, from the actual `shapes` of its inputs; an
    InputError when a rank differs, a static dim differs, a symbol is given two values, a derived
    dim (`past_sequence + 1`) disagrees with them, or a symbol appears in no bare dim."""
    sizes: dict[str, int] = {}
    derived = []
    for name in graph.inputs:
        want, got = graph.types[name], tuple(int(d) for d in shapes[name])
        if len(got) != want.rank:
            raise InputError(f"graph {graph.name!r}: input {name!r} must be {want}, got shape {list(got)}")
        for k, (d, v) in enumerate(zip(want.shape, got)):
            s = _bare(d)
            if s is not None:
                if sizes.setdefault(s, v) != v:
                    raise InputError(f"graph {graph.name!r}: input {name!r} has {s} = {v} at axis {k}, but another "
                                     f"input has {s} = {sizes[s]}")
            elif isinstance(d, SymDim):
                derived.append((name, k, d, v))
            elif d != v:
                raise InputError(f"graph {graph.name!r}: input {name!r} must be {want}, got shape {list(got)}")
    for name, k, d, v in derived:
        missing = symbols_of(d) - set(sizes)
        if missing:
            raise InputError(f"graph {graph.name!r}: input {name!r} has the dim {d} at axis {k}; no input gives "
                             f"{sorted(missing)} alone, so einsat cannot read {'their' if len(missing) > 1 else 'its'} "
                             f"size off the inputs")
        if evaluate(d, sizes) != v:
            raise InputError(f"graph {graph.name!r}: input {name!r} has {d} = {evaluate(d, sizes)} at axis {k} "
                             f"(with {', '.join(f'{s} = {sizes[s]}' for s in sorted(symbols_of(d)))}), got {v}")
    return sizes


def _bare(d) -> str | None:
    """The symbol's name when `d` is exactly one symbol (coefficient 1, power 1)."""
    if not isinstance(d, SymDim) or len(d.terms) != 1:
        return None
    (m, c), = d.terms.items()
    if c != 1 or len(m) != 1 or m[0][1] != 1 or not isinstance(m[0][0], str):
        return None
    return m[0][0]


def concrete_value(v: Any, sizes: Mapping[str, int]) -> Any:
    """An attribute value with symbols replaced: dims, tuples of them, tensor types."""
    if isinstance(v, SymDim):
        return evaluate(v, sizes)
    if isinstance(v, TensorType):
        return TensorType([evaluate(d, sizes) if isinstance(d, SymDim) else d for d in v.shape], v.dtype)
    if isinstance(v, (tuple, list)):
        return type(v)(concrete_value(x, sizes) for x in v)
    if isinstance(v, Graph) and not is_static(v):
        return instantiate(v, sizes)
    return v


def instantiate(graph: Graph, sizes: Mapping[str, int]) -> Graph:
    """The static program at `sizes` (which names every symbol of the graph)."""
    if is_static(graph):
        return graph
    nodes = [Node(n.op, n.inputs, n.outputs, {k: concrete_value(v, sizes) for k, v in n.attrs.items()}, n.name)
             for n in graph.nodes]
    inputs = {n: concrete_value(graph.types[n], sizes) for n in graph.inputs}
    shown = ", ".join(f"{s} = {v}" for s, v in sorted(sizes.items()))
    try:
        static = Graph(nodes, inputs, graph.outputs, graph.weights, name=graph.name,
                       stripped_weights=graph.stripped_weights)
    except ShapeError as e:
        raise InputError(f"graph {graph.name!r} does not run at {shown}: {e}") from None
    # the guard of a symbolic program's preconditions (a slice end kept symbolic holds where it is
    # within its dim): every value must have its symbolic type at these sizes
    for node in static.nodes:
        for o in node.outputs:
            want = concrete_value(graph.types[o], sizes)
            if static.types[o] != want:
                raise InputError(f"graph {graph.name!r} holds at sizes where {describe_node(node, graph.types)} "
                                 f"gives {graph.types[o]}; at {shown} it gives {static.types[o]}, not {want}")
    return static
