"""Checks on exported e-graphs shared by the egraph and rewrites tests.

Running programs and e-graphs on NumPy (`random_inputs`, `same_outputs`, `class_values`,
`evaluate`, `assert_consistent`) is public, in `einsat.testing.egraphs`; re-exported here.
"""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import Graph
from einsat.testing.egraphs import (  # noqa: F401  (re-exported for the egraph and rewrites tests)
    assert_consistent,
    class_values,
    evaluate,
    random_inputs,
    same_outputs,
)


def canonical(graph: Graph) -> tuple[frozenset, tuple]:
    """A name-free form of a program: the set of the values its outputs need, as nested
    (op, attrs, inputs) keys, and its outputs' keys. Equal for programs that differ only in value
    names, in sharing equal nodes, and in dead code."""
    key: dict[str, object] = {n: ("input", n) for n in graph.inputs}
    key.update({n: ("weight", n) for n in graph.weights})
    for node in graph.nodes:
        attrs = tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items()))
        base = (node.op, attrs, tuple(key[i] if i else None for i in node.inputs))
        for k, o in enumerate(node.outputs):
            key[o] = base + (k,)
    outs = tuple(key[o] for o in graph.outputs)
    needed, stack = set(), list(outs)
    while stack:
        k = stack.pop()
        if k is None or k in needed:
            continue
        needed.add(k)
        if k[0] not in ("input", "weight"):
            stack.extend(k[2])
    return frozenset(needed), outs


def _freeze(v):
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    return v
