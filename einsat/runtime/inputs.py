"""Random inputs for a graph: the one generator that verification, tests, benchmarks and the
profiler draw from.

    feeds = random_inputs(graph, seed=0)          # valid for the graph's ops
    feeds = random_arrays(types, seed=0)          # for bare {name: TensorType}

One `np.random.default_rng(seed)` (or the Generator passed) draws, input by input in order:

  floating   standard normal, cast to the dtype
  bool       a fair coin per element
  integer    uniform in [0, INT_HIGH), and below the extent of every axis the input indexes
             (gather's indices, access's and assign's dynamic indices), so every index is valid;
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


def index_bounds(graph: Graph) -> dict[str, int]:
    """For each graph input used as an index: the smallest extent of an axis it indexes."""
    bounds: dict[str, int] = {}

    def bound(name: str, extent: int) -> None:
        if name in graph.inputs:
            bounds[name] = min(bounds.get(name, extent), extent)

    for name in mask_inputs(graph):
        bound(name, 2)
    for node in graph.nodes:
        if node.op is Op.GATHER:
            bound(node.inputs[1], graph.types[node.inputs[0]].shape[node.attrs["axis"]])
        elif node.op in (Op.ACCESS, Op.ASSIGN):
            shapes = spec_shapes(graph.types[node.inputs[0]].shape, node.attrs["spec"])
            for step, shape in zip(node.attrs["spec"], shapes):
                if step[0] == "dselect":
                    bound(node.inputs[node.definition.n_data + step[2]], shape[step[1]])
    return bounds


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
                  bounds: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """One array per {name: type}; integers below `bounds[name]` where given (and INT_HIGH)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    out = {}
    for name, t in types.items():
        if t.dtype == np.bool_:
            out[name] = rng.random(t.shape) < 0.5
        elif np.issubdtype(t.dtype, np.integer):
            high = max(1, min(INT_HIGH, (bounds or {}).get(name, INT_HIGH)))
            out[name] = rng.integers(0, high, size=t.shape).astype(t.dtype)
        else:
            out[name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


def random_inputs(graph: Graph, seed: int | np.random.Generator = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input, valid for the graph's ops (see the module docstring)."""
    return random_arrays(graph.input_types(), seed, index_bounds(graph))
