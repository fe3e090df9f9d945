"""Structural fingerprints: programs equal up to value names and parameter values.

Two pieces with one fingerprint compute the same function of their inputs and *parameters*:
the same ops with the same attributes over the same wiring and types. Parameters are the
floating-point weights of more than one element (a layer's matrices, biases, norms): the
fingerprint keeps only their type, so layer 3 and layer 7 of a transformer match. Every other
weight (scalars such as 1/sqrt(d) or an epsilon, integer shapes and indices, masks) is a
*constant*: its value is part of the fingerprint, because rewrites may depend on it.

`canonical(graph)` gives the fingerprint and the program's interface in canonical order:
inputs as the program lists them (a piece lists them in order of first use), outputs in order
of production, weights in order of first use. Pieces with equal keys correspond position by
position, which is how one piece's optimized program is rebound to another (`partition.rebind`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from einsat.ir.graph import Graph
from einsat.ir.types import is_float


@dataclass(frozen=True)
class Canonical:
    key: str                       # the fingerprint (a SHA-256, hex)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...]        # rebindable weights, in order of first use
    constants: tuple[str, ...]     # weights fingerprinted by value, in order of first use


def is_param(array: np.ndarray) -> bool:
    """Whether a weight is a parameter (fingerprinted by type) rather than a constant (by value)."""
    return is_float(array.dtype) and array.size > 1


def _array_key(a: np.ndarray) -> tuple:
    a = np.ascontiguousarray(a)
    return ("array", str(a.dtype), a.shape, hashlib.sha256(a.tobytes()).hexdigest())


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return _array_key(v)
    if isinstance(v, Graph):
        return ("graph", canonical(v).key)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_attr_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _attr_key(x)) for k, x in v.items())))
    if isinstance(v, (np.generic,)):
        return ("scalar", str(v.dtype), v.item())
    return (type(v).__name__, repr(v))


def canonical(graph: Graph) -> Canonical:
    """The fingerprint of `graph` and its interface in canonical order (see the module docstring)."""
    ref: dict[str, tuple] = {}
    for k, i in enumerate(graph.inputs):
        ref[i] = ("in", k)
    params: list[str] = []
    constants: list[str] = []
    for node in graph.nodes:
        for i in node.inputs:
            if i in graph.weights and i not in ref:
                group = params if is_param(graph.weights[i]) else constants
                ref[i] = ("param" if group is params else "const", len(group))
                group.append(i)
    parts: list = [("inputs", tuple(str(graph.types[i]) for i in graph.inputs)),
                   ("params", tuple(str(graph.types[p]) for p in params)),
                   ("constants", tuple(_array_key(graph.weights[c]) for c in constants))]
    for k, node in enumerate(graph.nodes):
        for j, o in enumerate(node.outputs):
            ref[o] = ("node", k, j)
        parts.append((node.op.value, tuple(ref[i] if i else ("absent",) for i in node.inputs),
                      tuple(sorted((a, _attr_key(v)) for a, v in node.attrs.items())),
                      tuple(str(graph.types[o]) for o in node.outputs)))
    outputs = tuple(graph.outputs)
    parts.append(("outputs", tuple(ref[o] for o in outputs)))
    key = hashlib.sha256(repr(parts).encode()).hexdigest()
    return Canonical(key, tuple(graph.inputs), outputs, tuple(params), tuple(constants))
