"""Evaluating a program over the field at chosen output positions only.

`evaluate_at(graph, env, {output: positions})` never computes whole tensors unless asked to: a
backward pass computes, for every value, the flat positions that the requested outputs read
(their receptive field: a conv pulls its windows, a transpose permutes coordinates, ...), then a
forward pass computes each value at just those positions. Every op's rule (`field.table.RULES`)
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

from einsat.ir.graph import Graph
from einsat.verify.field import NotMultilinearError, Source, embed_constant, unique
from einsat.verify.field.table import rule_for


@dataclass
class FieldEnv:
    """Where the field values of a graph's inputs and weights come from, for `tests` random tests.

    `sources` maps value names to `Source`s; a weight missing there is an exact constant (its
    float values embedded by `embed_constant`). Batchnorm is the affine map y = x·A[c] + B[c]: with `batchnorm_key`
    None, A and B are the exact embeddings of their float64 values; otherwise each channel's A
    and B are random, keyed by that channel's parameter values (equal parameters, equal A and B).
    """

    sources: dict[str, Source] = field(default_factory=dict)
    batchnorm_key: int | None = None
    tests: int = 1
    draws: dict = field(default_factory=dict)  # key -> (flat, values): the last draw of a random source

    def source(self, graph: Graph, name: str) -> Source:
        if name in self.sources:
            return self.sources[name]
        if name in graph.weights:
            return Source(const=embed_constant(graph.weights[name]))
        raise NotMultilinearError(f"graph {graph.name!r}: input {name!r} has no field values in the env")

    def values(self, graph: Graph, name: str, flat: np.ndarray) -> np.ndarray:
        """(tests, len(flat)) values of input or weight `name` at sorted flat positions. A purely
        random source's values depend on its key and the positions only: envs that share
        `draws` (the two programs of a pair) draw the same positions of one key once."""
        src = self.source(graph, name)
        if not len(flat):
            return np.zeros((self.tests, 0), np.int64)
        memo = (src.key, self.tests) if src.const is None else None
        if memo in self.draws and np.array_equal(self.draws[memo][0], flat):
            return self.draws[memo][1]
        vals = np.empty((self.tests, len(flat)), np.int64)
        for k in range(self.tests):
            vals[k] = src.at(flat, k)
        if memo is not None:
            self.draws[memo] = flat, vals
        return vals


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
RUNS_LIMIT = 256      # known positions in at most this many runs of consecutive positions are
                      # located by run (a search among the runs), without a table


class Known:
    """A tensor's field values at some flat positions: `flat` sorted and unique, `vals` (tests, n).

    A read locates each position in `flat` by one of: the identity (every position known), the
    runs of consecutive positions (when they are few: whole planes, rows), a position table
    (when the reads are many), a binary search. Reading a position that is not known is a bug
    in some rule's `pull`: it raises."""

    __slots__ = ("_runs", "_table", "flat", "shape", "vals")

    def __init__(self, shape: tuple[int, ...], flat: np.ndarray, vals: np.ndarray):
        self.shape, self.flat, self.vals = shape, flat, vals
        self._runs = self._table = None

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first position, index in `flat`, length) of each run of consecutive known positions."""
        if self._runs is None:
            first = np.concatenate([[0], np.flatnonzero(np.diff(self.flat) != 1) + 1]).astype(np.int64)
            self._runs = self.flat[first], first, np.diff(np.append(first, len(self.flat)))
        return self._runs

    def locate(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | bool]:
        """(index in `flat`, whether the position is known) for flat positions idx >= 0."""
        n, size = len(self.flat), prod(self.shape)
        if n == size:
            return idx, True
        if n and len(self.runs()[0]) <= RUNS_LIMIT:
            start, at, length = self.runs()
            r = np.maximum(np.searchsorted(start, idx, side="right") - 1, 0)
            off = idx - start[r]
            return at[r] + off, (off >= 0) & (off < length[r])
        if self._table is None and size <= TABLE_LIMIT and 64 * idx.size > size:
            self._table = np.full(size, n, dtype=np.int32)  # a table pays off: build it once
            self._table[self.flat] = np.arange(n, dtype=np.int32)
        if self._table is not None:
            pos = self._table[idx]
            return pos, pos < n
        pos = np.minimum(np.searchsorted(self.flat, idx), max(n - 1, 0))
        return pos, self.flat[pos] == idx if n else np.zeros(idx.shape, bool)

    def read_range(self, start: int, stop: int) -> np.ndarray:
        """Values at the flat positions start, ..., stop − 1: (tests, stop − start), a view of
        `vals` when they are one run of known positions."""
        first, at, length = self.runs() if len(self.flat) else ((), (), ())
        r = int(np.searchsorted(first, start, side="right")) - 1
        if r >= 0 and stop - first[r] <= length[r]:
            return self.vals[:, at[r] + start - first[r]:at[r] + stop - first[r]]
        return self.read(np.arange(start, stop, dtype=np.int64))

    def read(self, idx: np.ndarray) -> np.ndarray:
        """Values at flat positions `idx` (any shape; -1 reads zero): shape (tests, *idx.shape)."""
        idx = np.asarray(idx, dtype=np.int64)
        outside = idx < 0
        anyout = bool(outside.any())
        pos, known = self.locate(np.where(outside, 0, idx) if anyout else idx)
        if known is not True and not np.all(known | outside if anyout else known):
            raise AssertionError(f"a position of {list(self.shape)} was read but not pulled")
        if not len(self.flat):
            return np.zeros((self.vals.shape[0],) + idx.shape, np.int64)
        out = self.vals[:, np.where(known, pos, 0) if anyout and known is not True else pos]
        if anyout:
            out[:, outside] = 0
        return out


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
    flats: dict[str, np.ndarray] = {}  # every needed value's positions, sorted and unique
    for node in reversed(graph.nodes):
        if not any(o in needed for o in node.outputs):
            continue
        for o in node.outputs:
            if o in needed:
                flats[o] = _union(needed[o])
        out_flat = [flats.get(o) for o in node.outputs]
        for name, f in zip(node.inputs, rule_for(node).pull(node, ctx, out_flat)):
            if name and f is not None:
                f = np.asarray(f, dtype=np.int64).reshape(-1)
                needed.setdefault(name, []).append(f[f >= 0] if len(f) and f.min() < 0 else f)
    known: dict[str, Known] = {}
    for name, parts in needed.items():
        if graph.producer(name) is None:
            flats[name] = _union(parts)
            known[name] = Known(graph.types[name].shape, flats[name], env.values(graph, name, flats[name]))
    for node in graph.nodes:
        if not any(o in needed for o in node.outputs):
            continue
        out_flat = [flats.get(o) for o in node.outputs]
        ins = [known.get(i) if i else None for i in node.inputs]
        results = rule_for(node).compute(node, ctx, out_flat, ins)
        for o, f, v in zip(node.outputs, out_flat, results):
            if f is not None:
                known[o] = Known(graph.types[o].shape, f, np.asarray(v, dtype=np.int64).reshape(env.tests, -1))
    return {name: known[name].read(f) for name, f in want.items()}


def _union(parts: list[np.ndarray]) -> np.ndarray:
    return unique(parts[0] if len(parts) == 1 else np.concatenate(parts))


def evaluate(graph: Graph, env: FieldEnv, names=None) -> dict[str, np.ndarray]:
    """Whole tensors over the field: {name: (tests, *shape)} for the outputs (or `names`)."""
    names = list(names or graph.outputs)
    shapes = {n: graph.types[n].shape for n in names}
    res = evaluate_at(graph, env, {n: np.arange(prod(s), dtype=np.int64) for n, s in shapes.items()})
    return {n: v.reshape((env.tests,) + shapes[n]) for n, v in res.items()}
