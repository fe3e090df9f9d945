"""The one interpreter loop: run an `ir.Graph` on a backend.

A backend is a module-like object with `name`, `from_numpy(array)`, `to_numpy(value)` and
`execute(node, args, graph) -> list[value]`. The NumPy backend is the executable
specification; others are tested against it op by op.
"""

from __future__ import annotations

import importlib
from typing import Mapping

import numpy as np

from einsat.errors import EinsatError, ExecutionError, InputError, describe_node
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType

_BACKENDS = {"numpy": "einsat.gpu.backend_numpy", "cupy": "einsat.gpu.backend_cupy"}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise EinsatError(f"unknown backend {name!r}; choose one of {sorted(_BACKENDS)}")
    return importlib.import_module(_BACKENDS[name]).BACKEND


def check_inputs(graph: Graph, inputs: Mapping[str, object]) -> None:
    missing = [n for n in graph.inputs if n not in inputs]
    extra = [n for n in inputs if n not in graph.inputs]
    if missing or extra:
        msg = [f"graph {graph.name!r}"]
        if missing:
            msg.append("is missing input(s) " + ", ".join(f"{n!r} {graph.types[n]}" for n in missing))
        if extra:
            msg.append(f"got unknown input(s) {extra}; it takes {list(graph.inputs)}")
        raise InputError(": ".join(msg[:1]) + ": " + "; ".join(msg[1:]))
    for n in graph.inputs:
        want, got = graph.types[n], inputs[n]
        shape, dtype = tuple(getattr(got, "shape", ())), getattr(got, "dtype", None)
        if dtype is None:
            raise InputError(f"graph {graph.name!r}: input {n!r} must be an array {want}, "
                             f"got {type(got).__name__}")
        if shape != want.shape or np.dtype(dtype) != want.dtype:
            raise InputError(f"graph {graph.name!r}: input {n!r} must be {want}, "
                             f"got {TensorType(shape, dtype)}")


def run(graph: Graph, inputs: Mapping[str, object], backend: str = "numpy",
        keep: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Run `graph` on `inputs`; returns its outputs (and the values named in `keep`) as NumPy."""
    be = get_backend(backend) if isinstance(backend, str) else backend
    check_inputs(graph, inputs)
    env = {n: be.from_numpy(np.asarray(inputs[n])) for n in graph.inputs}
    env.update({n: be.from_numpy(a) for n, a in graph.weights.items()})
    last_use = {}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            last_use[i] = k
    wanted = set(graph.outputs) | set(keep)
    for k, node in enumerate(graph.nodes):
        args = [env[i] if i else None for i in node.inputs]
        try:
            outs = be.execute(node, args, graph)
        except EinsatError:
            raise
        except Exception as e:  # any failure inside an op is reported with the node that failed
            raise ExecutionError(f"{describe_node(node, graph.types)} failed on backend "
                                 f"{be.name!r}: {type(e).__name__}: {e}") from e
        env.update(zip(node.outputs, outs))
        for i in set(node.inputs):  # free what no later node reads
            if i and last_use.get(i) == k and i not in wanted and i not in graph.weights:
                env.pop(i, None)
    return {n: be.to_numpy(env[n]) for n in (*graph.outputs, *keep)}
