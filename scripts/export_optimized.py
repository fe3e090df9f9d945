"""CPU machine: optimize workloads for a GPU and pack them for the GPU session's `optimized` phase.

    .venv/bin/python scripts/export_optimized.py --out .gpuopt [--cost h100] [--budget 30] [names...]

The GPU machine has no egglog, so the optimizing happens here. Each workload is optimized with
`Options(recipe=True)` (`einsat.optimize.run`) and written as `<out>/<name>.pkl`: the optimized
program without its weights, the names of the input weights it keeps, and the recipe that makes its
new weights from the input's (`einsat.egraph.weights.weight_recipe`). The GPU machine builds the
input program itself (`benchmarks.workloads.build`, seeded), checks its weights against the SHA-256
recorded here, runs the recipe and gets the optimized program's weights back, bit for bit: a file is
a few kilobytes where the weights would be megabytes. Also recorded: the modeled costs before and
after (the cost model named), so the GPU session can set measured beside modeled.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks.workloads import WORKLOADS, build  # noqa: E402
from einsat.runtime.packed import FORMAT, digest, inexact_weights, unpack  # noqa: E402, F401 (the GPU session's)


def pack(name: str, graph, result) -> dict:
    """The optimized program of `graph` as a weightless record (see the module docstring)."""
    opt, recipe = result.graph, result.recipe
    made = set(recipe.outputs) if recipe is not None else set()
    kept = sorted(k for k in opt.weights if k not in made)
    raw = {k: opt.weights[k] for k in kept
           if k not in graph.weights or not np.array_equal(graph.weights[k], opt.weights[k])}
    sources = sorted(set(recipe.inputs) if recipe is not None else set()) + [k for k in kept if k not in raw]
    return {"format": FORMAT, "name": name, "graph_name": opt.name, "nodes": opt.nodes,
            "inputs": opt.input_types(), "outputs": opt.outputs, "kept": [k for k in kept if k not in raw],
            "raw": raw, "recipe": recipe, "source_sha": {k: digest(graph.weights[k]) for k in sources},
            "weights_sha": {k: digest(a) for k, a in opt.weights.items()},
            "modeled": {"cost": result.report.model, "unit": result.report.unit,
                        "before": result.report.cost_before, "after": result.report.cost_after},
            "kept_input": bool(result.report.kept_input), "nodes_before": len(graph.nodes)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="workloads (default: all; the large ones are partitioned, and their "
                                            "recipe joins the pieces')")
    p.add_argument("--out", default=os.path.join(ROOT, ".gpuopt"))
    p.add_argument("--cost", default="h100")
    p.add_argument("--budget", type=float, default=30.0, help="seconds per workload")
    args = p.parse_args(argv)
    from einsat.optimize import Options, run

    names = args.names or list(WORKLOADS)
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        graph = build(name)
        t0 = time.perf_counter()
        result = run(graph, None, Options(cost=args.cost, budget=args.budget, recipe=True))  # with its recipe
        record = pack(name, graph, result)
        again = unpack(record, build(name))  # what the GPU machine will do, checked here first
        assert [n.op for n in again.nodes] == [n.op for n in result.graph.nodes]
        path = os.path.join(args.out, f"{name}.pkl")
        with open(path + ".tmp", "wb") as f:
            pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(path + ".tmp", path)
        m = record["modeled"]
        print(f"{name}: {len(graph.nodes)} -> {len(result.graph.nodes)} nodes, modeled {m['before']:.1f} -> "
              f"{m['after']:.1f} ({m['before'] / m['after']:.2f}x, {m['cost']}), "
              f"{os.path.getsize(path) / 1024:.0f} KiB, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
