"""Random inputs for a graph: the one generator that verification, tests, benchmarks and the
profiler draw from.

    feeds = random_inputs(graph, seed=0)          # valid for the graph's ops
    feeds = random_arrays(types, seed=0)          # for bare {name: TensorType}

One `np.random.default_rng(seed)` (or the Generator passed) draws, input by input in order:

  floating   standard normal, cast to the dtype
  bool       a fair coin per element
  integer    uniform in [0, INT_HIGH), and below the extent of every axis the input indexes
             (gather's indices, access's and assign's dynamic indices), so every index is valid

INT_HIGH is 5, deliberately: the draws include 0 (an empty loop, the first row) and four
distinct non-zero values (so swapped operands or a wrong index change the result), a loop trip
count stays small enough to keep body runs cheap, and integer arithmetic on such values neither
overflows nor rounds when cast to any float dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from einsat.ir.graph import Graph
from einsat.ir.ops.views import spec_shapes
from einsat.ir.registry import Op
from einsat.ir.types import TensorType

INT_HIGH = 5


def index_bounds(graph: Graph) -> dict[str, int]:
    """For each graph input used as an index: the smallest extent of an axis it indexes."""
    bounds: dict[str, int] = {}

    def bound(name: str, extent: int) -> None:
        if name in graph.inputs:
            bounds[name] = min(bounds.get(name, extent), extent)

    for node in graph.nodes:
        if node.op is Op.GATHER:
            bound(node.inputs[1], graph.types[node.inputs[0]].shape[node.attrs["axis"]])
        elif node.op in (Op.ACCESS, Op.ASSIGN):
            shapes = spec_shapes(graph.types[node.inputs[0]].shape, node.attrs["spec"])
            for step, shape in zip(node.attrs["spec"], shapes):
                if step[0] == "dselect":
                    bound(node.inputs[node.definition.n_data + step[2]], shape[step[1]])
    return bounds


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
