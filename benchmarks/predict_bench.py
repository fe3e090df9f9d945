"""How far the measured CPU cost model's whole-program prediction is from the program's time,
per workload, without optimizing (minutes, not the hour of `make bench`).

    python -m benchmarks.predict_bench                       # every workload and zoo model
    python -m benchmarks.predict_bench resnet18 gcn --kernels

For each program (the harness's CPU sizes): its units' signatures (`TargetCost.unit_signatures`:
onnxruntime's fusion groups) are profiled into the cost model's cache (what `optimize` fills;
only the missing ones are timed), `graph_cost` predicts it, and the program itself is timed in
an onnxruntime session (one intra-op thread, all optimizations on) in `--reps` rounds
interleaved with the run-call overhead and the profiler's reference program (its time there
beside its median time in the profile's batches says how the machine's load has moved).
`--same-run` also times the units in the same rounds as the program
(`cpu_bench.same_run_prediction`: the model's error without the machine's load drifting
between profiling and measuring). `--kernels` runs onnxruntime's own profiler on the whole
program and prints where its time goes by onnxruntime kernel (the op types it runs after
its fusions and layout changes, NCHWc reorders included) beside the model's prediction by unit
op: where a prediction is off, that says which kernels it mispredicts.

Writes `benchmarks/results/predict.{json,md}` (`--out` for another stem) with the machine, the
versions and the load average; the exit code is 0 whatever the errors are.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from benchmarks.workloads import CPU_SIZES, WORKLOADS, zoo

WITHIN = 0.15  # the bar: a prediction within 15% of the measured time


def cases() -> dict:
    return {**WORKLOADS, **zoo()}


def build(name: str):
    builder, defaults, _, _ = cases()[name]
    return builder(**{**defaults, **CPU_SIZES.get(name, {})})


def predict_one(name: str, reps: int, budget: float | None, same_run: bool, kernels: bool) -> dict:
    from einsat.cost.target import cpu_model
    from einsat.pipeline.measure import profile
    from einsat.runtime.profiler import THREADS, call_overhead_graph, interleaved, ort_runner, reference_graph

    graph = build(name)
    model = cpu_model()
    t0 = time.perf_counter()
    summary = profile(model, model.unit_signatures(graph), budget)
    rec = {"name": name, "nodes": len(graph.nodes), "profile": {"needed": summary.needed, "measured": summary.measured,
                                                                 "seconds": round(time.perf_counter() - t0, 1)}}
    runners = {"program": ort_runner(graph, 0, THREADS), "overhead": ort_runner(call_overhead_graph(), 0, THREADS),
               "reference": ort_runner(reference_graph(), 0, THREADS)}
    times = interleaved(runners, reps, warmup=2)
    measured = statistics.median(times["program"])
    refs = sorted(e["ref_us"] for e in model.db.entries.values() if e.get("ref_us"))
    rec["reference_us"] = statistics.median(times["reference"])  # the machine's load now, beside the profile's
    rec["profile_reference_us"] = refs[len(refs) // 2] if refs else None
    predicted = model.graph_cost(graph)
    rec.update(predicted_ms=predicted / 1e3, measured_ms=measured / 1e3, error=predicted / measured - 1,
               p10_ms=sorted(times["program"])[len(times["program"]) // 10] / 1e3,
               overhead_us=statistics.median(times["overhead"]), model_overhead_us=model.call_overhead_us)
    from benchmarks.cpu_bench import naive_sum_us
    naive = naive_sum_us(model, graph)
    rec.update(naive_ms=naive / 1e3, naive_error=naive / measured - 1)
    by_op = {}
    for u in model.units(graph):
        by_op[u.op.name.lower()] = by_op.get(u.op.name.lower(), 0.0) + model.unit_cost(u)
    rec["predicted_by_unit_op_us"] = dict(sorted(by_op.items(), key=lambda kv: -kv[1]))
    if same_run:
        from benchmarks.cpu_bench import same_run_prediction
        rec["same_run"] = same_run_prediction(graph, max(5, reps // 2))
    if kernels:
        from einsat.runtime.profiler import ort_kernel_times
        rec["ort_kernels_us"] = dict(sorted(ort_kernel_times(graph).items(), key=lambda kv: -kv[1]))
    return rec


def machine() -> dict:
    """The run's commit, machine, versions and date (`benchmarks.meta.run_meta`; `when` is its date)."""
    from benchmarks.meta import run_meta

    meta = run_meta()
    return {**meta, "when": meta["date"]}


def sides_line(errors: list[float], what: str) -> str:
    """How many of `errors` are outside WITHIN on each side: a prediction below the measured time
    (the program ran slower than its units say) or above it."""
    below = sum(e < -WITHIN for e in errors)
    above = sum(e > WITHIN for e in errors)
    return f"{what}: {below + above} outside {WITHIN:.0%}, {below} predicted below the measured time, {above} above."


def same_run_line(ok: list[dict]) -> list[str]:
    """The summary of the same-run errors (`--same-run`), a line and a blank one; none without them."""
    same = [r["same_run"]["error"] for r in ok if isinstance(r.get("same_run", {}).get("error"), float)]
    if not same:
        return []
    return [f"With the units timed in the same rounds as the program: {sum(abs(e) <= WITHIN for e in same)}/"
            f"{len(same)} within {WITHIN:.0%} (median |error| {statistics.median(abs(e) for e in same):.0%}).", "",
            sides_line(same, "Same-run"), ""]


def markdown(results: list[dict], meta: dict) -> str:
    ok = [r for r in results if "error" in r and isinstance(r["error"], float)]
    within = sum(abs(r["error"]) <= WITHIN for r in ok)
    naive = sum(abs(r["naive_error"]) <= WITHIN for r in ok)
    lines = ["# Whole-program prediction of the measured CPU cost model (no optimization)", "",
             f"- commit `{meta.get('commit', '?')}`{' (with uncommitted changes)' if meta.get('dirty') else ''}, "
             f"`{meta.get('command', 'python -m benchmarks.predict_bench')}`",
             f"- {meta['machine']}; {meta['when']}; load average {meta['load_start']:.2f} at the start, "
             f"{meta['load_end']:.2f} at the end",
             f"- versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
             f"- onnxruntime CPU, one intra-op thread, {meta['reps']} rounds interleaved with the run-call "
             "overhead and the profiler's reference program", "",
             f"**Within {WITHIN:.0%} of the measured time: {within}/{len(ok)} programs** "
             f"(median |error| {statistics.median(abs(r['error']) for r in ok):.0%}); "
             f"the naive sum of one-node times: {naive}/{len(ok)}." if ok else "no program measured", "",
             *([sides_line([r["error"] for r in ok], "From the profile"), ""] if ok else []),
             *same_run_line(ok),
             "| program | nodes | predicted ms | measured ms | error | naive sum error | same-run error |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if not isinstance(r.get("error"), float):
            lines.append(f"| {r['name']} | – | – | – | {str(r.get('error'))[:80]} | – | – |")
            continue
        same = r.get("same_run", {}).get("error")
        same = ("—" if "same_run" in r else "") if same is None else f"{same:+.0%}"
        lines.append(f"| {r['name']} | {r['nodes']} | {r['predicted_ms']:.2f} | {r['measured_ms']:.2f} | "
                     f"{r['error']:+.0%} | {r['naive_error']:+.0%} | {same} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("names", nargs="*", help="workloads or zoo models (default: all)")
    p.add_argument("--reps", type=int, default=15, help="rounds of the program (default 15)")
    p.add_argument("--profile-budget", type=float, default=120.0, help="seconds of profiling per program")
    p.add_argument("--same-run", action="store_true", help="also time the units in the program's rounds")
    p.add_argument("--kernels", action="store_true", help="onnxruntime's own per-kernel profile beside it")
    p.add_argument("--skip", nargs="*", default=[], help="programs left out (default: none)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "predict"),
                   help="results stem (.json, .md)")
    args = p.parse_args(argv)
    names = args.names or [n for n in cases() if n not in args.skip]
    unknown = [n for n in names if n not in cases()]
    if unknown:
        p.error(f"unknown programs {unknown}; choose from {', '.join(cases())}")
    meta = {**machine(), "reps": args.reps, "load_start": os.getloadavg()[0],
            "command": " ".join(["python -m benchmarks.predict_bench", *(argv if argv is not None else sys.argv[1:])])}
    results = []
    for name in names:
        try:
            rec = predict_one(name, args.reps, args.profile_budget, args.same_run, args.kernels)
        except Exception as e:  # noqa: BLE001 - one program's failure stops no other
            rec = {"name": name, "error": f"{type(e).__name__}: {e}"}
        results.append(rec)
        if isinstance(rec.get("error"), float):
            print(f"{name:24s} predicted {rec['predicted_ms']:9.2f} ms  measured {rec['measured_ms']:9.2f} ms  "
                  f"error {rec['error']:+6.0%}  naive {rec['naive_error']:+6.0%}"
                  + (f"  same-run {rec['same_run']['error']:+6.0%}"
                     if rec.get("same_run", {}).get("error") is not None else ""), flush=True)
            if args.kernels:
                print("    model by unit op (ms):", ", ".join(f"{k} {v / 1e3:.2f}" for k, v in
                                                          list(rec["predicted_by_unit_op_us"].items())[:8]))
                print("    onnxruntime kernels (ms):", ", ".join(f"{k} {v / 1e3:.2f}" for k, v in
                                                             list(rec["ort_kernels_us"].items())[:10]), flush=True)
        else:
            print(f"{name:24s} {rec['error'][:200]}", flush=True)
    meta["load_end"] = os.getloadavg()[0]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    from einsat.ir.signature import atomic_write_json
    atomic_write_json(args.out + ".json", {**meta, "results": results})
    text = markdown(results, meta)
    tmp = args.out + ".md.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.out + ".md")
    print(text.split("\n\n")[1] if "\n\n" in text else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
