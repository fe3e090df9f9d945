"""Evaluating a program over the field at chosen output positions only.

`evaluate_at(graph, env, {output: positions})` never computes whole tensors unless asked to: a
backward pass computes, for every value, the flat positions that the requested outputs read
(their receptive field: a conv pulls its windows, a transpose permutes coordinates, ...), then a
forward pass computes each value at just those positions. Every op's rule (`fieldops.RULES`)
has two halves: `pull` (which input positions an output position reads) and `compute`.

`evaluate(graph, env)` is the same at every position. All tests share the env's random inputs
(PET's caching optimization): values are a function of position, so the two programs of a pair
see the same inputs however differently they read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod

import numpy as np

from einsat.errors import describe_node
from einsat.ir.graph import Graph
from einsat.verify.field import NotMultilinearError, Source, embed, unique


@dataclass
class FieldEnv:
    """Where the field values of a graph's inputs and weights come from, for `tests` random tests.

    `sources` maps value names to `Source`s; a weight missing there is an exact constant (its
    float values embedded). Batchnorm is the affine map y = x·A[c] + B[c]: with `batchnorm_key`
    None, A and B are the exact embeddings of their float64 values; otherwise each channel's A
    and B are random, keyed by that channel's parameter values (equal parameters, equal A and B).
    """

    sources: dict[str, Source] = field(default_factory=dict)
    batchnorm_key: int | None = None
    tests: int = 1

    def source(self, graph: Graph, name: str) -> Source:
        if name in self.sources:
            return self.sources[name]
        if name in graph.weights:
            return Source(const=embed(graph.weights[name]))
        raise NotMultilinearError(f"graph {graph.name!r}: input {name!r} has no field values in the env")


def fold_constant(graph: Graph, name: str) -> np.ndarray | None:
    """The float value of `name` if it is computed from weights and constants only, else None."""
    if name in graph.weights:
        return np.asarray(graph.weights[name])
    node = graph.producer(name)
    if node is None:
        return None
    if node.op.value == "constant":
        return np.asarray(node.attrs["value"])
    args = [fold_constant(graph, i) if i else None for i in node.inputs]
    if any(a is None for a, i in zip(args, node.inputs) if i):
        return None
    return node.definition.numpy(args, node.attrs)[node.outputs.index(name)]


TABLE_LIMIT = 1 << 25  # tensors up to this size get a position table for reads (int32, 128 MB at most)


class Known:
    """A tensor's field values at some flat positions: `flat` sorted and unique, `vals` (tests, n)."""

    __slots__ = ("_ext", "_table", "flat", "shape", "vals")

    def __init__(self, shape: tuple[int, ...], flat: np.ndarray, vals: np.ndarray):
        self.shape, self.flat, self.vals = shape, flat, vals
        self._ext = np.concatenate([vals, np.zeros((vals.shape[0], 1), np.int64)], axis=1)  # col n reads 0
        self._table = None

    def read(self, idx: np.ndarray) -> np.ndarray:
        """Values at flat positions `idx` (any shape; -1 reads zero): shape (tests, *idx.shape)."""
        idx = np.asarray(idx, dtype=np.int64)
        n, size = len(self.flat), prod(self.shape)
        if n == size:
            pos = np.where(idx >= 0, idx, n)
            return self._ext[:, pos]
        if self._table is None and size <= TABLE_LIMIT and 64 * idx.size > size:
            self._table = np.full(size + 1, n + 1, dtype=np.int32)  # a table pays off: build it once
            self._table[self.flat] = np.arange(n, dtype=np.int32)
            self._table[size] = n  # where index -1 lands
        if self._table is not None:
            pos = self._table[idx]  # -1 reads the last entry: n
            if pos.size and pos.max() > n:
                raise AssertionError(f"a position of {list(self.shape)} was read but not pulled")
        else:
            safe = np.maximum(idx, 0)
            pos = np.minimum(np.searchsorted(self.flat, safe), max(n - 1, 0))
            if n and np.any((self.flat[pos] != safe) & (idx >= 0)):
                raise AssertionError(f"a position of {list(self.shape)} was read but not pulled")
            pos = np.where(idx >= 0, pos, n)
        return self._ext[:, pos]


@dataclass
class Context:
    """What a rule may look at: the graph, the env, each value's polynomial degree."""

    graph: Graph
    env: FieldEnv
    degree: dict[str, int]
    cache: dict = field(default_factory=dict)  # rules keep work here between pull and compute

    def constant(self, name: str) -> np.ndarray:
        """The float (or int) value of an input that must be computed from weights only."""
        value = fold_constant(self.graph, name)
        if value is None:
            raise NotMultilinearError(f"graph {self.graph.name!r}: {name!r} must be computed from weights "
                                      "only (it is an index, divisor or normalization parameter)")
        return value


def rule_for(node):
    from einsat.verify.fieldops import RULES
    rule = RULES.get(node.op)
    if rule is None:
        raise NotMultilinearError(f"{describe_node(node)} has no exact meaning over the field "
                                  "(it is not multi-linear or affine)")
    return rule


def _flat_positions(shape, positions) -> np.ndarray:
    """(K, rank) coordinates or (K,) flat indices -> (K,) flat indices."""
    p = np.asarray(positions, dtype=np.int64)
    if p.ndim == 2:
        if p.shape[1] != len(shape):
            raise ValueError(f"positions have {p.shape[1]} coordinates, the tensor has rank {len(shape)}")
        return np.ravel_multi_index(tuple(p.T), shape) if len(shape) else np.zeros(len(p), np.int64)
    return p.reshape(-1)


def degrees(graph: Graph, env: FieldEnv) -> dict[str, int]:
    """The total degree in the random variables of every value's polynomial."""
    deg: dict[str, int] = {}
    for name in graph.inputs:
        deg[name] = env.source(graph, name).degree
    for name in graph.weights:
        deg[name] = env.sources[name].degree if name in env.sources else 0
    for node in graph.nodes:
        d = rule_for(node).degree(node, [deg.get(i, 0) if i else 0 for i in node.inputs], env)
        for o in node.outputs:
            deg[o] = d
    return deg


def evaluate_at(graph: Graph, env: FieldEnv, positions: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Field values of the named values at the given positions: {name: (tests, K)}.

    `positions[name]` is a (K, rank) array of coordinates or a (K,) array of flat indices.
    """
    ctx = Context(graph, env, degrees(graph, env))
    want = {name: _flat_positions(graph.types[name].shape, pos) for name, pos in positions.items()}
    needed: dict[str, list[np.ndarray]] = {name: [f] for name, f in want.items()}
    for node in reversed(graph.nodes):
        outs = [needed.get(o) for o in node.outputs]
        if all(o is None for o in outs):
            continue
        out_flat = [None if o is None else unique(np.concatenate(o)) for o in outs]
        for o, f in zip(node.outputs, out_flat):
            if f is not None:
                needed[o] = [f]
        for name, f in zip(node.inputs, rule_for(node).pull(node, ctx, out_flat)):
            if name and f is not None:
                f = np.asarray(f, dtype=np.int64).reshape(-1)
                needed.setdefault(name, []).append(f[f >= 0])
    known: dict[str, Known] = {}
    for name, parts in needed.items():
        if graph.producer(name) is None:
            flat = unique(np.concatenate(parts))
            src = env.source(graph, name)
            vals = np.stack([src.at(flat, k) for k in range(env.tests)]) if len(flat) else \
                np.zeros((env.tests, 0), np.int64)
            known[name] = Known(graph.types[name].shape, flat, vals)
    for node in graph.nodes:
        if not any(o in needed for o in node.outputs):
            continue
        out_flat = [unique(np.concatenate(needed[o])) if o in needed else None for o in node.outputs]
        ins = [known.get(i) if i else None for i in node.inputs]
        results = rule_for(node).compute(node, ctx, out_flat, ins)
        for o, f, v in zip(node.outputs, out_flat, results):
            if f is not None:
                known[o] = Known(graph.types[o].shape, f, np.asarray(v, dtype=np.int64).reshape(env.tests, -1))
    return {name: known[name].read(f) for name, f in want.items()}


def evaluate(graph: Graph, env: FieldEnv, names=None) -> dict[str, np.ndarray]:
    """Whole tensors over the field: {name: (tests, *shape)} for the outputs (or `names`)."""
    names = list(names or graph.outputs)
    shapes = {n: graph.types[n].shape for n in names}
    res = evaluate_at(graph, env, {n: np.arange(prod(s), dtype=np.int64) for n, s in shapes.items()})
    return {n: v.reshape((env.tests,) + shapes[n]) for n, v in res.items()}
