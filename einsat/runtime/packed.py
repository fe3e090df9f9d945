"""Optimized programs packed without their weights (`einsat-optimized/1`), and unpacked over their input.

A GPU machine has no egglog, so programs are optimized on a CPU machine and carried as records
(scripts/export_optimized.py packs them): the optimized program's nodes and interface, the
names of the input's weights it keeps, any weight it has of its own (`raw`), and the recipe
(`einsat.egraph.weights.weight_recipe`, a program over the input's weights) that makes its new
weights, with the SHA-256 of every weight. `unpack(record, source)` rebuilds the optimized program
over the input program `source` rebuilt or loaded on this machine: it checks the input's weights
against the digests, runs the recipe, and (`exact`) checks the weights it made. Read by
scripts/gpu_session.py and `einsat check`.
"""

from __future__ import annotations

import hashlib

import numpy as np

FORMAT = "einsat-optimized/1"


def digest(array: np.ndarray) -> str:
    a = np.ascontiguousarray(array)
    return hashlib.sha256(str((a.dtype.str, a.shape)).encode() + a.tobytes()).hexdigest()


def unpack(record: dict, source, exact: bool = True):
    """The optimized program of `record` over `source`, the input program rebuilt on this machine.
    Raises ValueError when an input weight differs from the CPU machine's, and (`exact`) when the
    recipe made a weight differently: its arithmetic (a folded matmul, say) may round otherwise
    under another BLAS, so the GPU machine passes exact=False, records `inexact_weights` and
    relies on the outputs' check."""
    from einsat.ir.graph import Graph
    from einsat.runtime import run

    for k, sha in record["source_sha"].items():
        if k not in source.weights:
            raise ValueError(f"{record['name']}: the input program has no weight {k!r}")
        if digest(source.weights[k]) != sha:
            raise ValueError(f"{record['name']}: input weight {k!r} differs from the CPU machine's")
    weights = {k: source.weights[k] for k in record["kept"]}
    weights.update(record["raw"])
    if record["recipe"] is not None:
        recipe = record["recipe"]
        weights.update(run(recipe, {k: source.weights[k] for k in recipe.inputs}))
    graph = Graph(record["nodes"], record["inputs"], record["outputs"],
                  {k: weights[k] for k in record["weights_sha"]}, record["graph_name"])
    if exact and inexact_weights(record, graph):
        raise ValueError(f"{record['name']}: the recipe made weights {inexact_weights(record, graph)} "
                         "differently from the CPU machine")
    return graph


def inexact_weights(record: dict, graph) -> list[str]:
    """The weights of `graph` that are not bit for bit those the CPU machine packed."""
    return sorted(k for k, sha in record["weights_sha"].items() if digest(graph.weights[k]) != sha)
