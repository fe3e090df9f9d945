"""Random inputs for a graph: the one generator that verification, tests, benchmarks and the
profiler draw from.

    feeds = random_inputs(graph, seed=0)          # valid for the graph's ops
    feeds = random_arrays(types, seed=0)          # for bare {name: TensorType}

One `np.random.default_rng(seed)` (or the Generator passed) draws, input by input in order:

  floating   standard normal, cast to the dtype
  bool       a fair coin per element
  integer    uniform in [0, INT_HIGH), and below the extent of every axis the input indexes
             (gather's and gather_elements' indices, each column of gather_nd's index tuples
             below the extent of the axis it picks, access's and assign's dynamic indices; also
             through casts, reshapes and other ops that only move values: token ids reshaped
             before the embedding's gather), so every index is valid;
             a mask (an integer or bool input read as 1 − mask, through casts and reshapes:
             BERT's attention mask, whose (1 − mask) · min_float is 0 or min_float) in {0, 1},
             since any other value overflows that product to infinity and the model to NaN

INT_HIGH is 5, deliberately: the draws include 0 (an empty loop, the first row) and four
distinct non-zero values (so swapped operands or a wrong index change the result), a loop trip
count stays small enough to keep body runs cheap, and integer arithmetic on such values neither
overflows nor rounds when cast to any float dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from einsat.ir.graph import Graph
from einsat.ir.groups import PERMUTES
from einsat.ir.ops.views import spec_shapes
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType

INT_HIGH = 5


Bound = int | tuple[int, ...]  # an extent, or one per position along the last axis (gather_nd's columns)


def index_bounds(graph: Graph) -> dict[str, Bound]:
    """For each graph input used as an index: the smallest extent of an axis it indexes, or
    for gather_nd's index tuples one extent per position of their last axis (the axis each
    column picks from). An index reaches an input through ops that only move or cast values
    (`_keeps_mask`): the input is bounded by the smallest extent then."""
    bounds: dict[str, Bound] = {}

    def put(name: str, extent: Bound) -> None:
        old = bounds.get(name)
        if old is None:
            bounds[name] = extent
        elif isinstance(old, int) or isinstance(extent, int) or len(old) != len(extent):
            bounds[name] = min(min(_as_tuple(old)), min(_as_tuple(extent)))
        else:
            bounds[name] = tuple(min(a, b) for a, b in zip(old, extent))

    def bound(value: str, extent: Bound) -> None:
        seen: set[str] = set()
        while value not in graph.inputs:
            node = graph.producer(value)
            if node is None or value in seen or not node.inputs or not _keeps_mask(node.op):
                return  # computed (or a weight): its values are the program's own
            seen.add(value)
            if node.op not in (Op.CAST, Op.IDENTITY):  # the last axis moves: one extent for all
                extent = min(_as_tuple(extent))
            value = node.inputs[0]
        put(value, extent)

    for name in mask_inputs(graph):
        bound(name, 2)
    for node in graph.nodes:
        if node.op is Op.GATHER:
            bound(node.inputs[1], graph.types[node.inputs[0]].shape[node.attrs["axis"]])
        elif node.op is Op.GATHER_ELEMENTS:
            bound(node.inputs[1], graph.types[node.inputs[0]].shape[node.attrs["axis"]])
        elif node.op is Op.GATHER_ND:
            data, idx = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
            b = node.attrs["batch_dims"]
            bound(node.inputs[1], tuple(data.shape[b + j] for j in range(idx.shape[-1])))
        elif node.op in (Op.ACCESS, Op.ASSIGN):
            shapes = spec_shapes(graph.types[node.inputs[0]].shape, node.attrs["spec"])
            for step, shape in zip(node.attrs["spec"], shapes):
                if step[0] == "dselect":
                    bound(node.inputs[node.definition.n_data + step[2]], shape[step[1]])
    return bounds


def _as_tuple(extent: Bound) -> tuple[int, ...]:
    return (extent,) if isinstance(extent, int) else tuple(extent) or (INT_HIGH,)


def _keeps_mask(op: Op) -> bool:
    """Whether `op` passes a mask's values through unchanged: it moves or repeats elements (the
    registry's permutes and repeats_input facts), or casts them (a cast to float keeps 0 and 1)."""
    return op in PERMUTES or opdef(op).repeats_input or op is Op.CAST


def mask_inputs(graph: Graph) -> set[str]:
    """The integer and bool inputs read as a mask: their value, through casts and reshapes, is
    subtracted from the constant 1 (`1 − mask`, as BERT-style exports make the additive mask)."""
    found = set()
    uses = graph.consumers()
    for name, t in graph.input_types().items():
        if t.dtype.kind not in "iub":
            continue
        stack, seen = [name], set()
        while stack and name not in found:
            value = stack.pop()
            if value in seen:
                continue
            seen.add(value)
            for node in uses.get(value, ()):
                if _keeps_mask(node.op):
                    stack.append(node.outputs[0])
                elif node.op is Op.SUB and node.inputs[1] == value and _is_one(graph, node.inputs[0]):
                    found.add(name)
    return found


def _is_one(graph: Graph, value: str) -> bool:
    w = graph.weights.get(value)
    return w is not None and w.size >= 1 and bool(np.all(np.asarray(w, dtype=np.float64) == 1.0))


def random_arrays(types: Mapping[str, TensorType], seed: int | np.random.Generator = 0,
                  bounds: Mapping[str, Bound] | None = None) -> dict[str, np.ndarray]:
    """One array per {name: type}; integers below `bounds[name]` where given (and INT_HIGH): an
    extent, or a tuple of them, one per position along the array's last axis."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    out = {}
    for name, t in types.items():
        if t.dtype == np.bool_:
            out[name] = np.asarray(rng.random(t.shape) < 0.5)  # an array at rank 0 too (onnxruntime takes no scalar)
        elif np.issubdtype(t.dtype, np.integer):
            limit = (bounds or {}).get(name, INT_HIGH)
            if isinstance(limit, tuple) and t.rank >= 1 and len(limit) == t.shape[-1]:
                high = np.clip(np.asarray(limit, dtype=np.int64), 1, INT_HIGH)
                out[name] = rng.integers(0, np.broadcast_to(high, t.shape)).astype(t.dtype)
                continue
            high = max(1, min(INT_HIGH, min(_as_tuple(limit))))
            out[name] = rng.integers(0, high, size=t.shape).astype(t.dtype)
        else:
            out[name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


def random_inputs(graph: Graph, seed: int | np.random.Generator = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input, valid for the graph's ops (see the module docstring)."""
    return random_arrays(graph.input_types(), seed, index_bounds(graph))
