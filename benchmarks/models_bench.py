"""Issue #15's real models end to end: import, round trip, optimize, verify, plant, measure.

    python -m benchmarks.models_bench [--small] [--budget 45] [MODEL ...]

For each of the nine onnx-zoo models and the six transformers exports (`benchmarks.real_models`,
weights filled by role), in a fresh process each (so its peak memory is its own):

- import: `load_onnx` -> `einsat.run` against onnxruntime on the same model (worst error over
  the output's scale); round trip: `save_onnx` passes `check_model(full_check=True)` and
  onnxruntime computes the same outputs on it;
- `einsat.optimize` of the whole model as one e-graph (`partition=False`; `benchmarks/partition_bench.py`
  measures the partitioned path) with a time budget (`--budget`, seconds): nodes, modeled cost before and
  after, time per phase and in all, the process's peak resident memory, the verification's
  status (proved / inconclusive) and how much each output varied;
- the planted wrong rewrite: the optimized program's middle accumulating node 5% off
  (`einsat.testing.plant.perturb`) must fail the same verification;
- the optimized ONNX: passes the full checker, runs in onnxruntime, same outputs as the input;
- measured cost: onnxruntime (CPU, 2 threads) latency of the input and the optimized ONNX,
  interleaved runs in one process, medians with min and max.

Results: `benchmarks/results/models.json` and `models.md`, with the machine, load and versions
(each row also keeps the commit, date and load of its own run: naming models reruns those and
keeps the other rows).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.real_models import FAMILY, NAMES

RESULTS = Path(__file__).parent / "results"
REL_TOL = 1e-5  # tests/ir/test_models.py's fp32 tolerance, relative to the output's scale


def _ort(model_bytes: bytes):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 4  # nothing on stderr: a failure is the exception's message
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref))) / scale


def _latency(sessions: list, feeds: dict, seconds: float = 4.0, min_reps: int = 5, max_reps: int = 50) -> list[dict]:
    """Interleaved timings of each session on `feeds`: median, min, max in ms."""
    for s in sessions:
        s.run(None, feeds)  # warm-up
    times = [[] for _ in sessions]
    start = time.perf_counter()
    while len(times[0]) < max_reps and (len(times[0]) < min_reps or time.perf_counter() - start < seconds):
        for s, ts in zip(sessions, times):
            t = time.perf_counter()
            s.run(None, feeds)
            ts.append((time.perf_counter() - t) * 1e3)
    return [{"median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts), "reps": len(ts)}
            for ts in times]


def bench_one(name: str, small: bool, budget: float) -> dict:
    import onnx

    import einsat
    from benchmarks.real_models import real_model
    from einsat.errors import VerificationError
    from einsat.optimize import verify_equivalent
    from einsat.testing.plant import perturb

    row: dict = {"model": name, "family": FAMILY[name], "small": small}
    t = time.perf_counter()
    model, graph, feeds = real_model(name, small=small)
    row["load_s"] = time.perf_counter() - t
    row["inputs"] = {k: list(v.shape) for k, v in feeds.items()}
    names = list(graph.outputs)
    ref = dict(zip(names, _ort(model.SerializeToString()).run(names, feeds)))
    ours = einsat.run(graph, feeds)
    row["import_error"] = max(_rel_error(ours[o], ref[o]) for o in names)
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before.onnx"
        einsat.save_onnx(graph, before)
        onnx.checker.check_model(str(before), full_check=True)
        before_session = _ort(before.read_bytes())
        row["round_trip_error"] = max(_rel_error(g, ref[o]) for o, g in zip(names, before_session.run(names, feeds)))

        examples = feeds if any(np.issubdtype(v.dtype, np.integer) for v in feeds.values()) else None
        t = time.perf_counter()
        result = einsat.optimize(graph, examples, budget=budget, partition=False)
        row["optimize_wall_s"] = time.perf_counter() - t
        r, v = result.report, result.report.verification
        row.update(nodes_before=sum(r.ops_before.values()), nodes_after=sum(r.ops_after.values()),
                   modeled_before_us=r.cost_before, modeled_after_us=r.cost_after, modeled_speedup=r.speedup,
                   times_s=r.times, memory=r.memory, stop=r.saturation.stop_reason if r.saturation else None,
                   verification=v.status, verification_text=str(v), varying=v.varying, feeding=v.feeding)

        t = time.perf_counter()
        try:
            verify_equivalent(graph, perturb(result.graph), examples=examples)
            row["planted_caught"] = False
        except VerificationError:
            row["planted_caught"] = True
        row["planted_s"] = time.perf_counter() - t

        after = Path(tmp) / "after.onnx"
        einsat.save_onnx(result.graph, after)
        onnx.checker.check_model(str(after), full_check=True)
        after_session = _ort(after.read_bytes())
        row["optimized_ort_error"] = max(_rel_error(g, ref[o]) for o, g in zip(names, after_session.run(names, feeds)))
        b, a = _latency([before_session, after_session], feeds)
        row["measured"] = {"before": b, "after": a, "speedup": b["median_ms"] / a["median_ms"]}
    row["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return row


def _run_key(m: dict) -> tuple:
    return (m["commit"], bool(m.get("dirty")), m["date"], m["machine"], float(m["budget"]))


def _run_text(key: tuple) -> str:
    commit, dirty, date, machine, budget = key
    return (f"commit {commit[:10]}{' (with uncommitted changes)' if dirty else ''}, {date}, {machine}, "
            f"budget {budget:g} s")


def markdown(rows: list[dict], meta: dict) -> str:
    gb = 2**30
    runs: dict[tuple, list[str]] = {}  # each row's run (a subset rerun keeps the others' rows and runs)
    for r in rows:
        m = r.get("meta") or meta
        runs.setdefault(_run_key(m), []).append(r["model"])
    budgets = {k[4] for k in runs}
    budget = f"{budgets.pop():g}" if len(budgets) == 1 else "B (each run's, below)"
    lines = ["# Real models: import, optimize, verify, plant a wrong rewrite, measure", "",
             "The rows come from these runs (commit, date, machine and its load at the start, budget):", ""]
    lines += [f"- {_run_text(k)}: {', '.join(names)}" for k, names in runs.items()]
    lines += ["",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
             f"Each model in its own process; `einsat.optimize(..., budget={budget}, partition=False)` "
             "(the whole model as one e-graph; rows from before partitioning existed ran the same path) "
             f"with the default rules, limits and cost model ({meta['cost_model']}); "
             f"{'small' if meta['small'] else 'full'} shapes.",
             "Modeled cost: the cost model's µs. Measured: onnxruntime CPU (2 threads), the input and the optimized "
             "ONNX run interleaved in one process, median (min–max) ms. Errors are worst |diff| / max|reference|. "
             "Memory: the process's peak resident set (the model's weights, its ONNX copies and onnxruntime "
             "sessions included), and what `optimize` added to the process (its own `MemoryWatch`).", "",
             "| model | family | nodes | optimize (s) | memory (GB): process peak / added by optimize | verification | "
             "planted 5% error | "
             "modeled cost (µs) | measured ORT (ms) | import / round trip / optimized error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['family']} | failed: {r['error']} |||||||")
            continue
        m = r["measured"]
        lines.append(
            f"| {r['model']} | {r['family']} | {r['nodes_before']} → {r['nodes_after']} | "
            f"{r['times_s']['total']:.1f} | {r['peak_rss_bytes'] / gb:.2f} / {r['memory']['added_bytes'] / gb:.2f} | "
            f"{r['verification']} | "
            f"{'caught' if r['planted_caught'] else 'NOT caught'} | "
            f"{r['modeled_before_us']:,.0f} → {r['modeled_after_us']:,.0f} ({r['modeled_speedup']:.2f}× modeled) | "
            f"{m['before']['median_ms']:.1f} ({m['before']['min_ms']:.1f}–{m['before']['max_ms']:.1f}) → "
            f"{m['after']['median_ms']:.1f} ({m['after']['min_ms']:.1f}–{m['after']['max_ms']:.1f}), "
            f"{m['speedup']:.2f}× measured | "
            f"{r['import_error']:.1e} / {r['round_trip_error']:.1e} / {r['optimized_ort_error']:.1e} |")
    lines += ["", "Time per phase (s) and verification:", ""]
    for r in rows:
        if "error" not in r:
            phases = ", ".join(f"{k} {v:.1f}" for k, v in r["times_s"].items())
            run = f" ({_run_text(_run_key(r.get('meta') or meta))})"
            lines.append(f"- {r['model']}{run}: {phases}; search stopped: {r['stop']}; {r['verification_text']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"some of {', '.join(NAMES)} (default: all)")
    ap.add_argument("--small", action="store_true", help="small shapes (8 tokens, 64x64 CNN images)")
    ap.add_argument("--budget", type=float, default=45.0, help="seconds for each optimize (default 45)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for each model's process")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one model, print its row as JSON
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(bench_one(args.one, args.small, args.budget)))
        return 0
    unknown = [m for m in args.models if m not in NAMES]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {', '.join(NAMES)}")
    from benchmarks.harness import metadata
    from einsat.cost.models import DEFAULT_COST

    meta = metadata("cpu", DEFAULT_COST) | {"budget": args.budget, "small": args.small}
    stem = "models_small" if args.small else "models"
    rows, earlier = [], []
    if args.models and (args.out / f"{stem}.json").is_file():  # a subset updates its rows, keeps the others
        earlier = json.loads((args.out / f"{stem}.json").read_text())["results"]
    for name in args.models or NAMES:
        cmd = [sys.executable, "-m", "benchmarks.models_bench", "--one", name, "--budget", str(args.budget)]
        cmd += ["--small"] if args.small else []
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  cwd=Path(__file__).parent.parent)
            row = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else \
                {"model": name, "family": FAMILY[name], "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "family": FAMILY[name], "error": f"over {args.timeout:g} s"}
        rows.append(row)
        print(name, "error: " + row["error"] if "error" in row else
              f"{row['times_s']['total']:.1f} s, {row['peak_rss_bytes'] / 2**30:.2f} GB, {row['verification']}, "
              f"planted {'caught' if row['planted_caught'] else 'NOT caught'}", flush=True)
        row["meta"] = {k: meta[k] for k in ("commit", "dirty", "date", "machine", "budget")}
        args.out.mkdir(parents=True, exist_ok=True)  # written after each model: a long run keeps what it did
        done = {r["model"]: r for r in earlier} | {r["model"]: r for r in rows}
        table = [done[n] for n in NAMES if n in done]
        (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": table}, indent=1))
        (args.out / f"{stem}.md").write_text(markdown(table, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
