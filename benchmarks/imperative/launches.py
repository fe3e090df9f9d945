"""Kernel launches per imperative kernel, before and after functionalization (TensorSSA Fig. 6).

    python -m benchmarks.imperative.launches      # writes benchmarks/results/tensorssa_launches.{json,md}

For every kernel of `benchmarks.imperative.KERNELS`, on its seeded example inputs: the traced
program must reproduce the eager NumPy run exactly, and so must the functionalized graph; then
the launches of one run are counted under the models of `einsat.frontend.launches`:

  eager        the imperative program, views free, in-place element-wise ops one kernel
  naive        every op, every view and every in-place update a kernel
  imp_fused    element-wise fusion that stops at every in-place update (TorchScript + NNC-like)
  func_nodes   the functionalized graph before view-chain fusion, one kernel per node
  chain_nodes  after Access/Assign chain fusion and DCE, one kernel per node
  func_fused   the same graph with vertical fusion of element-wise/access/assign nodes
  optimized    `einsat.optimize` on the functionalized graph (e-graph rewrites, extraction), then
               counted like func_fused; its outputs are checked against NumPy within fp32 tolerance
               on the kernel's inputs (optimize's own check draws random inputs, and random
               integers are out-of-range indices)
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import einsat
from benchmarks.imperative import KERNELS
from einsat.frontend import functionalize, trace
from einsat.frontend.evaluate import run_program
from einsat.frontend.launches import count_graph, count_program
from einsat.runtime import graph_runs

RESULTS = Path(__file__).resolve().parents[1] / "results"
COLUMNS = ["eager", "naive", "imp_fused", "func_nodes", "chain_nodes", "func_fused", "optimized"]


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _as_list(result):
    if isinstance(result, dict):
        return list(result.values())
    return list(result) if isinstance(result, (tuple, list)) else [result]


def measure(name: str, seed: int = 0) -> dict:
    kernel = KERNELS[name]
    args = kernel.inputs(np.random.default_rng(seed))
    expect = [np.asarray(e) for e in _as_list(kernel.fn(*_copies(args)))]
    program = trace(kernel.fn, args)
    feeds = dict(zip(program.inputs, (a for a in args if isinstance(a, np.ndarray))))
    outs, _ = run_program(program, feeds)
    _check(name, "traced program", outs, expect)
    row = {m: count_program(program, feeds, m) for m in ("eager", "naive")}
    row["imp_fused"] = count_program(program, feeds, "fused")
    t0 = time.perf_counter()
    plain = functionalize(kernel.fn, args, fuse=False)
    fused = functionalize(kernel.fn, args)
    row["seconds"] = round((time.perf_counter() - t0) / 2, 3)
    for g in (plain, fused):
        r = einsat.run(g, feeds)
        _check(name, "functionalized graph", [r[o] for o in g.outputs], expect)
    row["func_nodes"] = count_graph(graph_runs(plain, feeds), fused=False)
    runs = graph_runs(fused, feeds)
    row["chain_nodes"] = count_graph(runs, fused=False)
    row["func_fused"] = count_graph(runs, fused=True)
    row["graph_nodes"] = len(fused.nodes)
    t0 = time.perf_counter()
    try:
        # verified below on the kernel's own inputs: random draws make out-of-range indices
        optimized = einsat.optimize(fused, verify=False).graph
    except einsat.EinsatError as e:  # the optimizer is young: report, do not hide, its failures
        row["optimized"] = f"error: {type(e).__name__}"
        return row
    row["optimize_seconds"] = round(time.perf_counter() - t0, 2)
    r = einsat.run(optimized, feeds)
    for k, (a, b) in enumerate(zip([r[o] for o in optimized.outputs], expect)):
        if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
            raise AssertionError(f"{name}: output {k} of the optimized graph differs from NumPy")
    row["optimized"] = count_graph(graph_runs(optimized, feeds), fused=True)
    return row


def _check(name: str, what: str, got, expect) -> None:
    for k, (a, b) in enumerate(zip(got, expect)):
        if a.dtype != b.dtype or not np.array_equal(a, b, equal_nan=True):
            raise AssertionError(f"{name}: output {k} of the {what} differs from the eager NumPy run")


def main() -> None:
    from benchmarks.meta import meta_line, run_meta

    meta = run_meta()
    rows = {name: measure(name) for name in KERNELS}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tensorssa_launches.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Kernel launches of imperative kernels (TensorSSA Fig. 6 metric)",
        "",
        meta_line(meta),
        "",
        "One run on the seeded example inputs; every output equals the eager NumPy run exactly.",
        "Written by `python -m benchmarks.imperative.launches`; models in `einsat/frontend/launches.py`.",
        "",
        "| kernel | " + " | ".join(COLUMNS) + " | imp_fused / func_fused |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for name, r in rows.items():
        red = r["imp_fused"] / max(r["func_fused"], 1)
        lines.append(f"| {name} | " + " | ".join(str(r[c]) for c in COLUMNS) + f" | {red:.1f}× |")
    lines += ["", "Columns:", ""] + [f"- `{line.split()[0]}`: {' '.join(line.split()[1:])}"
                                     for line in __doc__.splitlines() if line.split()[:1] in ([c] for c in COLUMNS)]
    lines += ["", "Kernels:", ""]
    for name, kernel in KERNELS.items():
        lines.append(f"- **{name}**: {kernel.description}")
    (RESULTS / "tensorssa_launches.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
