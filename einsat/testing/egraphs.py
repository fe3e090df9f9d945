"""Checks on programs and exported e-graphs by running them on NumPy.

    same_outputs(g1, g2, seed=0)        # both programs, one random input set, outputs allclose
    assert_consistent(session.export()) # every e-node computes its e-class's value

`assert_consistent` is the e-graph invariant ("everything in one e-class is fully equivalent")
tested directly: each e-class gets a value from its shallowest e-node, then every e-node of
every e-class is evaluated on those values and compared. A rule that unions two unequal terms
shows up here as the e-class and e-node it broke.
"""

from __future__ import annotations

import numpy as np

from einsat.egraph.data import ABSENT, EGraphData
from einsat.ir.graph import Graph
from einsat.ir.registry import opdef
from einsat.runtime import random_arrays, random_inputs, run


def same_outputs(g1: Graph, g2: Graph, seed: int = 0, rtol: float = 1e-9, atol: float = 1e-9) -> None:
    """Assert `g1` and `g2` give the same outputs (in order) on one seeded random input set;
    `atol` is scaled by the largest magnitude of `g1`'s output."""
    inputs = random_inputs(g1, seed)
    a, b = run(g1, inputs), run(g2, inputs)
    for o1, o2 in zip(g1.outputs, g2.outputs):
        scale = atol * max(1.0, float(np.abs(a[o1]).max(initial=0)))
        np.testing.assert_allclose(b[o2], a[o1], rtol=rtol, atol=scale,
                                   err_msg=f"output {o1!r} of {g1.name!r} vs {o2!r} of {g2.name!r}")


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
    """One e-node's value, given its children's e-class values."""
    if node.leaf is not None:
        kind, name = node.leaf
        return np.asarray(inputs[name] if kind == "input" else data.weights[name])
    args = [None if c == ABSENT else values[c] for c in node.children]
    return np.asarray(opdef(node.op).numpy(args, node.attrs)[node.output])


def assert_consistent(data: EGraphData, seed: int = 0, rtol: float = 1e-9, atol: float = 1e-9) -> int:
    """Every e-node of every e-class computes its e-class's value (and type) on random inputs:
    the e-graph holds only equalities. Returns the number of e-nodes checked."""
    inputs = random_arrays(data.input_types, seed)
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
