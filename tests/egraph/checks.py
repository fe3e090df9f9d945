"""Checks on exported e-graphs shared by the egraph and rewrites tests."""

from __future__ import annotations

import numpy as np

import einsat
from einsat.egraph.data import ABSENT, EGraphData
from einsat.ir.graph import Graph
from einsat.ir.registry import opdef


def random_inputs(types, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in types.items():
        if t.dtype == np.bool_:
            out[name] = rng.random(t.shape) < 0.5
        elif np.issubdtype(t.dtype, np.integer):
            out[name] = rng.integers(0, 3, t.shape).astype(t.dtype)
        else:
            out[name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


def class_values(data: EGraphData, inputs) -> dict[int, np.ndarray]:
    """Each e-class's value, computed along its shallowest e-node (an acyclic derivation)."""
    depth = data.heights()
    best = {cid: min(cls.nodes, key=lambda n: 1 + max((depth[c] for c in n.children if c != ABSENT), default=-1))
            for cid, cls in data.classes.items()}
    values: dict[int, np.ndarray] = {}
    for cid in sorted(data.classes, key=lambda c: depth[c]):
        values[cid] = evaluate(best[cid], data, inputs, values)
    return values


def evaluate(node, data: EGraphData, inputs, values) -> np.ndarray:
    if node.leaf is not None:
        kind, name = node.leaf
        return np.asarray(inputs[name] if kind == "input" else data.weights[name])
    args = [None if c == ABSENT else values[c] for c in node.children]
    return np.asarray(opdef(node.op).numpy(args, node.attrs)[node.output])


def assert_consistent(data: EGraphData, seed: int = 0, rtol: float = 1e-9, atol: float = 1e-9) -> int:
    """Every e-node of every e-class computes its e-class's value (and type) on random inputs:
    the e-graph holds only equalities. Returns the number of e-nodes checked."""
    inputs = random_inputs(data.input_types, seed)
    values = class_values(data, inputs)
    checked = 0
    for cid, cls in data.classes.items():
        want = values[cid]
        assert want.shape == cls.type.shape and want.dtype == cls.type.dtype, (cid, cls.type, want.shape)
        for n in cls.nodes:
            got = evaluate(n, data, inputs, values)
            assert got.shape == want.shape, f"e-class {cid}: {n} gives shape {got.shape}, not {want.shape}"
            scale = atol * max(1.0, float(np.abs(want).max(initial=0)))
            np.testing.assert_allclose(got, want, rtol=rtol, atol=scale, err_msg=f"e-class {cid}: {n}")
            checked += 1
    return checked


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


def same_outputs(g1: Graph, g2: Graph, seed: int = 0, rtol: float = 1e-9, atol: float = 1e-9) -> None:
    inputs = random_inputs(g1.input_types(), seed)
    a, b = einsat.run(g1, inputs), einsat.run(g2, inputs)
    for o1, o2 in zip(g1.outputs, g2.outputs):
        scale = atol * max(1.0, float(np.abs(a[o1]).max(initial=0)))
        np.testing.assert_allclose(b[o2], a[o1], rtol=rtol, atol=scale)
