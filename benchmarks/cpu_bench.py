"""The CPU measurements of the harness: the input and the einsat-optimized program as ONNX on
onnxruntime, side by side; the cost model's predictions against them; PyTorch on the CPU.

`measure(graph, optimized, report)` returns one workload's figures:

- `ort`: both programs exported to ONNX and run in onnxruntime CPU sessions with all of
  onnxruntime's graph optimizations on, one intra-op thread (`runtime.profiler.THREADS`),
  `reps` interleaved rounds after warm-up, on the same random inputs; medians, 10th/90th
  percentiles, outliers, and the measured speedup. When einsat returned the input itself (the
  optimized program is the input: its ONNX is the same file), the speedup is 1 by construction
  and only the input is timed.
- `prediction`: the measured cost model's prediction of each program (fusion groups as units,
  `extract.target`) from the profile the optimize run filled, beside its measured time, the
  relative error, and the error of the naive sum of one-node times (each node alone, no fusion
  groups) for the input, the gap the units close; and `same_run`: the input's prediction from
  its units timed in the same interleaved rounds as the whole program (a shared machine's load
  drifts between the profiling and the measurement; timed together, the error is the model's).
- `weights_mb`: the weights of the input and of the optimized ONNX.
- `torch`: PyTorch eager on the CPU (one thread) in the side environment (`.torch-venv`,
  `make torch-venv`; Python 3.11), through `benchmarks.torch_baseline --time`, where it exists.
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import tempfile

import numpy as np

from einsat.runtime import random_inputs
from einsat.runtime.profiler import THREADS, interleaved, ort_runner, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = os.path.join(ROOT, ".torch-venv", "bin", "python")


def _stats(times) -> dict:
    s = summarize(times)
    return {"median_ms": s["median_us"] / 1e3, "p10_ms": s["p10_us"] / 1e3, "p90_ms": s["p90_us"] / 1e3,
            "outliers": s["outliers"], "reps": s["reps"]}


def time_on_ort(graph, optimized, reps: int, same: bool) -> dict:
    """Both programs on onnxruntime, interleaved (the input alone when `same`)."""
    runners = {"input": ort_runner(graph, 0, THREADS)}
    if not same:
        runners["optimized"] = ort_runner(optimized, 0, THREADS)
    times = interleaved(runners, reps, warmup=3)
    out = {"threads": THREADS, "input": _stats(times["input"])}
    if same:
        out["optimized"] = out["input"]
        out["speedup"] = 1.0
        out["note"] = "einsat returned the input program: the same ONNX, speedup 1 by construction"
    else:
        out["optimized"] = _stats(times["optimized"])
        out["speedup"] = out["input"]["median_ms"] / out["optimized"]["median_ms"]
        out["wins"] = sum(b < a for a, b in zip(times["input"], times["optimized"]))
    return out


def naive_sum_us(model, graph) -> float:
    """The sum of every node's own one-node time (no fusion groups) and one run call."""
    costs = [model.node_cost(n.op, n.attrs, *graph.node_types(n)) for n in graph.nodes]
    ran = sum(c > 0 for c in costs)  # each pays a node's dispatch (`node_overhead_us`); the call pays one
    return model.call_overhead_us - model.node_overhead_us * min(ran, 1) + sum(costs)


def predictions(graph, optimized, ort: dict) -> dict:
    """The cost model's predictions (µs -> ms) next to the measured medians, with relative errors."""
    from einsat.cost.target import cpu_model
    from einsat.pipeline.measure import profile

    model = cpu_model()  # the profile the optimize run filled (XDG_CACHE_HOME of this process)
    profile(model, [*model.unit_signatures(graph), *model.unit_signatures(optimized)], None)
    out = {}
    for key, g in (("input", graph), ("optimized", optimized)):
        measured = ort[key]["median_ms"]
        predicted = model.graph_cost(g) / 1e3
        out[key] = {"predicted_ms": predicted, "measured_ms": measured, "error": predicted / measured - 1}
    naive = naive_sum_us(model, graph) / 1e3
    out["input"]["naive_sum_ms"] = naive
    out["input"]["naive_error"] = naive / ort["input"]["median_ms"] - 1
    return out


def same_run_prediction(graph, reps: int) -> dict:
    """The input's units and the whole input timed in the same interleaved rounds: the model's
    prediction (`TargetCost.graph_cost`: fusion groups, layout reorders, a node's dispatch,
    `runtime.profiler.chain_graph`, and the run call's overhead) taken on the times of this
    run's rounds instead of the profile's, against the program's time. The profile must hold
    the units (their kernels' shares are its)."""
    import copy

    from einsat.cost.target import cpu_model
    from einsat.ir.registry import opdef
    from einsat.ir.signature import signature_of
    from einsat.runtime.profiler import CHAIN, MIN_US, call_overhead_graph, chain_graph, ort_signature_runner

    model = cpu_model()
    sigs = {}
    units = 0
    for u in model.units(graph):
        if u.constant or opdef(u.op).source:
            continue
        units += 1
        try:
            sig = signature_of(u.op, u.attrs, list(u.ins))
        except Exception:  # noqa: BLE001 - no signature: the model's own figure
            sig = None
        if sig is not None and sig.key in model.db.entries:
            sigs[sig.key] = sig
    runners = {"(overhead)": ort_runner(call_overhead_graph(), 0, THREADS), "(program)": ort_runner(graph, 0, THREADS),
               "(chain)": ort_runner(chain_graph(), 0, THREADS)}
    for key, sig in sigs.items():
        try:
            runners[key] = ort_signature_runner(sig, THREADS)
            runners[key]()
        except Exception:  # noqa: BLE001 - a unit onnxruntime cannot run alone: the profile's figure
            runners.pop(key, None)
    times = interleaved(runners, reps, warmup=2)
    med = {k: statistics.median(v) for k, v in times.items()}
    overhead = med["(overhead)"]
    now = copy.deepcopy(model)
    for key in sigs.keys() & med.keys():
        now.db.entries[key]["us"] = max(med[key] - overhead, MIN_US)
    dispatch = max((med["(chain)"] - overhead) / (CHAIN - 1), 0.0)
    now.db.method.update(call_overhead_us=overhead, node_overhead_us=dispatch)
    predicted = now.graph_cost(graph)
    measured = med["(program)"]
    timed = len(sigs.keys() & med.keys())
    if units and not timed:  # no unit timed in these rounds: no same-run prediction was made (null)
        predicted = None
    return {"predicted_ms": None if predicted is None else predicted / 1e3, "measured_ms": measured / 1e3,
            "error": None if predicted is None else predicted / measured - 1,
            "units": units, "distinct": len(sigs), "timed": timed, "reps": reps}


def weights_mb(graph) -> float:
    """The bytes of the graph's ONNX initializers (what the exported file carries), in MB."""
    from einsat.ir.onnx.export import to_onnx
    model = to_onnx(graph)
    return sum(len(t.raw_data) or np.prod(t.dims) * 4 for t in model.graph.initializer) / 1e6


def torch_times(graph, optimized, reps: int, python: str = TORCH_PYTHON, timeout: float = 600) -> dict:
    """PyTorch eager (one thread) on the input program, in the side environment, if it exists."""
    if not os.path.exists(python):
        return {"skipped": f"no PyTorch side environment ({python}; make torch-venv)"}
    from benchmarks.torch_baseline import plain_graph
    with tempfile.TemporaryDirectory(prefix="einsat-torch-") as d:
        with open(os.path.join(d, "graph.pkl"), "wb") as f:
            pickle.dump(plain_graph(graph), f)
        np.savez(os.path.join(d, "inputs.npz"), **random_inputs(graph))
        env = {**os.environ, "PYTHONPATH": ROOT}
        r = subprocess.run([python, "-m", "benchmarks.torch_baseline", "--time", str(reps), d], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout).strip().splitlines()[-1][:300] if (r.stderr or r.stdout) else
                    f"exit code {r.returncode}"}
        times = np.load(os.path.join(d, "times.npz"))
        return {"eager": {"median_ms": float(statistics.median(times["eager"])),
                          "p10_ms": float(np.percentile(times["eager"], 10)),
                          "p90_ms": float(np.percentile(times["eager"], 90)), "reps": int(times["eager"].size)},
                "threads": 1}


def measure(graph, optimized, report, reps: int = 15, torch_python: str | None = TORCH_PYTHON,
            predict: bool = True) -> dict:
    """One workload's CPU figures (see the module docstring); `report`: optimize's, or None
    when it did not run (then the input alone is timed); `torch_python`: None for no PyTorch."""
    same = optimized is graph or report is None or report.kept_input is not None
    ort = time_on_ort(graph, optimized, reps, same)
    out = {"ort": ort, "weights_mb": {"input": weights_mb(graph), "optimized": weights_mb(optimized)},
           "returned": "input" if same else "optimized"}
    if predict:
        out["prediction"] = predictions(graph, optimized, ort)
        out["prediction"]["same_run"] = same_run_prediction(graph, max(5, reps // 2))
    if torch_python:
        out["torch"] = torch_times(graph, optimized, reps, torch_python)
    return out
