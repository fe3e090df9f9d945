"""Execution: the one interpreter loop, its backends (found by name) and the one timing loop of
the profilers. Never imports egglog (the GPU machine runs optimized programs without it); depends
on `einsat.ir` and `einsat.cost`'s profile database alone.

    from einsat.runtime import run, random_inputs
    outs = run(graph, random_inputs(graph), backend="onnxruntime")

A backend registers itself by name (`register_backend`): the runtime registers `numpy` and
`onnxruntime`; `einsat.backends` registers `cupy` (`einsat.gpu`, loaded on first use).
"""

from einsat.runtime.backend import backend_names, get_backend, register_backend
from einsat.runtime.hooks import GraphRuns, Hooks
from einsat.runtime.inputs import random_arrays, random_inputs
from einsat.runtime.interpreter import check_inputs, evaluate, graph_runs, run

__all__ = ["GraphRuns", "Hooks", "backend_names", "check_inputs", "evaluate", "get_backend", "graph_runs",
           "random_arrays", "random_inputs", "register_backend", "run"]
