"""Execution: the one interpreter loop and its backends. Never imports egglog (the GPU machine
runs optimized programs without it); depends on `einsat.ir` alone.

    from einsat.runtime import run, random_inputs
    outs = run(graph, random_inputs(graph), backend="onnxruntime")
"""

from einsat.runtime.hooks import GraphRuns, Hooks
from einsat.runtime.inputs import random_arrays, random_inputs
from einsat.runtime.interpreter import BACKENDS, check_inputs, evaluate, get_backend, graph_runs, run

__all__ = ["BACKENDS", "GraphRuns", "Hooks", "check_inputs", "evaluate", "get_backend", "graph_runs",
           "random_arrays", "random_inputs", "run"]
