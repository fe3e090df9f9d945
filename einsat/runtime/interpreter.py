"""The one interpreter loop: run an `ir.Graph` on a backend.

    outs = run(graph, {"x": x}, backend="numpy")              # NumPy in, NumPy out
    values = evaluate(graph, values, backend, hooks)          # backend values in and out

A backend (see `backend.py`) cuts a graph into steps and executes them: the NumPy and CuPy
backends one step per node, the onnxruntime backend one step for the whole graph. The loop is
the same for all of them: an environment of values (the inputs, the weights as the backend's
constants), each step's arguments read from it and its outputs written to it, and a value
dropped as soon as no later step reads it (unless it is an output or kept). Any failure inside
a step becomes an `ExecutionError` naming the step (node name and op, or the graph), the types
of its inputs and the backend; errors einsat raises on purpose pass through unchanged.

Loop and if nodes run their body graphs through this same loop, on the same backend and with
the same hooks (`Bodies`); their iteration semantics are the registry's (`ir.ops.control`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from einsat.errors import EinsatError, ExecutionError, InputError, describe_node
from einsat.ir.graph import Graph
from einsat.ir.symbolic import bind_sizes, instantiate, is_static
from einsat.ir.types import TensorType
from einsat.runtime import backend_numpy, backend_onnxruntime
from einsat.runtime.backend import get_backend, register_backend
from einsat.runtime.hooks import GraphRuns, Hooks

NO_HOOKS = Hooks()

# the runtime's own backends; `cupy` registers itself from above the runtime (`einsat.backends`)
register_backend("numpy", lambda: backend_numpy.BACKEND)                  # the executable specification
register_backend("onnxruntime", lambda: backend_onnxruntime.BACKEND)      # the graph as one CPU session


def evaluate(graph: Graph, inputs: Mapping[str, object], backend, hooks: Hooks = NO_HOOKS,
             keep: tuple[str, ...] = ()) -> dict[str, object]:
    """Run `graph` on `inputs` (backend values by input name); returns the outputs, then the
    values named in `keep`, as backend values."""
    hooks.enter(graph)
    env = dict(inputs)
    env.update({n: backend.constant(a) for n, a in graph.weights.items()})
    wanted = tuple(dict.fromkeys((*graph.outputs, *keep)))
    steps = backend.steps(graph, wanted)
    last_use = {i: k for k, step in enumerate(steps) for i in step.inputs if i}
    bodies = Bodies(backend, hooks)
    for k, step in enumerate(steps):
        args = [env[i] if i else None for i in step.inputs]
        hooks.before(graph, k, step, args)
        try:
            outs = backend.execute(step, args, graph, bodies)
        except EinsatError:
            raise
        except Exception as e:  # any failure inside an op is reported with the step that failed
            raise ExecutionError(f"{describe_node(step, graph.types)} failed on backend {backend.name!r}: "
                                 f"{type(e).__name__}: {e}") from e
        env.update(zip(step.outputs, outs))
        hooks.after(graph, k, step, args, outs)
        for i in set(step.inputs):  # free what no later step reads
            if i and last_use.get(i) == k and i not in wanted and i not in graph.weights:
                env.pop(i, None)
    return {n: env[n] for n in wanted}


class Bodies:
    """How loop and if nodes run their bodies: through `evaluate`, with the caller's backend and
    hooks (`ir.ops.control.Bodies` is the protocol; ir cannot import this module)."""

    def __init__(self, backend, hooks: Hooks):
        self.backend, self.hooks = backend, hooks

    def run(self, body: Graph, args: list) -> list:
        try:
            values = evaluate(body, dict(zip(body.inputs, args)), self.backend, self.hooks)
        except ExecutionError as e:
            raise ExecutionError(f"in body {body.name!r}: {e}") from e
        return [values[o] for o in body.outputs]

    def read(self, value) -> np.ndarray:
        return np.asarray(self.backend.to_numpy(value))

    def value(self, array: np.ndarray):
        return self.backend.from_numpy(array)


def check_inputs(graph: Graph, inputs: Mapping[str, object]) -> None:
    """An `InputError` unless `inputs` has exactly the graph's inputs, each of its type."""
    missing = [n for n in graph.inputs if n not in inputs]
    extra = [n for n in inputs if n not in graph.inputs]
    if missing or extra:
        msg = []
        stripped = [n for n in missing if n in graph.stripped_weights]
        if stripped:
            shown = ", ".join(f"{n!r} {graph.types[n]}" for n in stripped[:3]) + (", ..." if len(stripped) > 3 else "")
            msg.append(f"is missing the model's {len(stripped)} stripped weights ({shown}): the ONNX file does not "
                       "hold them (its einsat.stripped_weights metadata names them); import it with "
                       "einsat.load_onnx(..., fill_weights='random') (--fill-weights random on the command "
                       "line) to give them seeded random values")
            missing = [n for n in missing if n not in graph.stripped_weights]
        if missing:
            msg.append("is missing input(s) " + ", ".join(f"{n!r} {graph.types[n]}" for n in missing))
        if extra:
            msg.append(f"got unknown input(s) {extra}; it takes {list(graph.inputs)}")
        raise InputError(f"graph {graph.name!r}: " + "; ".join(msg))
    for n in graph.inputs:
        want, got = graph.types[n], inputs[n]
        shape, dtype = tuple(getattr(got, "shape", ())), getattr(got, "dtype", None)
        if dtype is None:
            raise InputError(f"graph {graph.name!r}: input {n!r} must be an array {want}, "
                             f"got {type(got).__name__}")
        if shape != want.shape or np.dtype(dtype) != want.dtype:
            raise InputError(f"graph {graph.name!r}: input {n!r} must be {want}, "
                             f"got {TensorType(shape, dtype)}")


def at_input_sizes(graph: Graph, inputs: Mapping[str, object]) -> Graph:
    """A symbolic program (`load_onnx(..., symbolic=True)`) as the static program at the sizes its
    inputs have (`ir.symbolic`: each symbol bound from the inputs' shapes, checked where several
    give it); a static program as it is."""
    if is_static(graph) or any(n not in inputs for n in graph.inputs):
        return graph  # check_inputs names what is missing
    return instantiate(graph, bind_sizes(graph, {n: np.shape(inputs[n]) for n in graph.inputs}))


def run(graph: Graph, inputs: Mapping[str, object], backend="numpy", keep: tuple[str, ...] = (),
        hooks: Hooks = NO_HOOKS) -> dict[str, np.ndarray]:
    """Run `graph` on `inputs` (NumPy arrays) on `backend` (a registered name, `backend_names()`:
    "numpy", "onnxruntime", "cupy", or a backend object); returns its outputs (and the values
    named in `keep`) as NumPy arrays."""
    be = get_backend(backend) if isinstance(backend, str) else backend
    graph = at_input_sizes(graph, inputs)
    check_inputs(graph, inputs)
    values = evaluate(graph, {n: be.from_numpy(np.asarray(inputs[n])) for n in graph.inputs}, be, hooks, keep)
    return {n: be.to_numpy(v) for n, v in values.items()}


def graph_runs(graph: Graph, inputs: Mapping[str, object], backend="numpy"):
    """How many times each graph ran in one run of `graph` on `inputs` (`hooks.GraphRuns`)."""
    runs = GraphRuns()
    run(graph, inputs, backend, hooks=runs)
    return runs.counts
