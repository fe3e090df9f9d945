"""The workloads people bring in 2026 (`benchmarks.workloads.llm`), optimized, checked and measured.

    python -m benchmarks.llm_bench [names] [--reps 9] [--no-cpu] [--out benchmarks/results]

For each workload, at its full size (the Llama-3-8B layer's ~870 MB of weights included), in one
process, one after the other:

- `einsat.optimize(cost="h100", verify="prove")`: the wall time from the built graph to the
  verified result, the saturation's stop reason, e-nodes and iterations against the node limit,
  the run's peak resident memory against its 4 GB limit (`report.memory`), the phases' times,
  the partition (pieces, optimized templates, reused copies) where the program was cut, and the
  **modeled** speed-up under the committed H100 profile;
- the optimized program exported to ONNX and run by onnxruntime on the inputs it was verified
  on, against the input program on NumPy (the largest difference relative to the output's scale);
- **measured** on onnxruntime CPU: `einsat.optimize(cost="cpu")` (the candidates' ops profiled
  on this machine's onnxruntime, a result not faster beyond noise not returned), then the input
  and that result timed in one process, interleaved, one intra-op thread, with all of
  onnxruntime's graph optimizations on (`benchmarks.cpu_bench.time_on_ort`): medians, 10th/90th
  percentiles, and in how many rounds the result was faster;
- the H100 and torch.compile columns say when no GPU was lent to the run (`gpu` null).

Every search ends by work (`by_work`: the default work limits, the clocks far off), so a loaded
machine changes the times, not the programs or the modeled figures.

Writes `benchmarks/results/llm.json` and `llm.md` after every workload, stamped with the commit,
the machine and its load (`harness.metadata`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks.harness import RESULTS, _atomic_write, metadata, optimize_summary
from benchmarks.workloads import LLM, build

SEED = 0
# the search ends by work (nodes, iterations, matches; the ILP's own bounds), not by the clocks, so
# the same commit gives the same programs and modeled figures on an idle and a loaded machine
SEARCH_S, EXTRACT_S = 600.0, 300.0


def by_work() -> dict:
    """`optimize`'s keyword arguments: the default work limits, saturation's and the ILP's clocks far off."""
    from einsat.egraph.session import Limits
    return {"limits": Limits(time_s=SEARCH_S, extract_s=EXTRACT_S)}


def inputs_for(name: str, graph) -> dict:
    from benchmarks.workloads.llm import moe_example_inputs
    from einsat.runtime import random_inputs
    return moe_example_inputs(graph, SEED) if name == "moe" else random_inputs(graph, SEED)


def partition_summary(report) -> dict | None:
    p = report.partition
    if p is None:
        return None
    counts = {}
    for q in p.pieces:
        counts[q.fingerprint] = counts.get(q.fingerprint, 0) + 1
    layer = max(counts, key=counts.get)
    layers = [q for q in p.pieces if q.fingerprint == layer]
    return {"pieces": len(p.pieces), "optimized": p.templates, "cache_hits": p.cache_hits,
            "executor": p.executor, "workers": p.workers, "layer_copies": len(layers),
            "phase_seconds": {k: round(v, 2) for k, v in p.seconds.items()},
            "piece_stops": sorted({q.stop_reason for q in p.pieces if q.stop_reason}),
            "max_piece_enodes": max((q.enodes or 0) for q in p.pieces),
            "layer_modeled_speedup": sum(q.cost_before for q in layers) / sum(q.cost_after for q in layers),
            "fallbacks": [q.fallback for q in p.pieces if q.fallback]}


def search_summary(s) -> dict | None:
    """What the saturation spent its time on: its phases (e-nodes after each) and the rules that
    took the most time, the generators' rounds, and the stop in words."""
    if s is None:
        return None
    rules = sorted(s.rules.items(), key=lambda kv: -kv[1].get("time_s", 0))[:6]
    return {"seconds": s.seconds, "stop_text": s.stop_text,
            "phases": [{k: p.get(k) for k in ("step", "phase", "nodes", "growth", "time_s")} for p in s.phases],
            "slowest_rules": {k: {"matches": v.get("matches"), "time_s": round(v.get("time_s", 0), 3)}
                              for k, v in rules},
            "rounds": [{k: r.get(k) for k in ("step", "generator", "seconds") if k in r} for r in s.rounds]}


def onnx_check(graph, optimized, feeds) -> dict:
    """The optimized program's ONNX on onnxruntime against the input program on NumPy."""
    import onnx

    import einsat
    want = einsat.run(graph, feeds)
    with tempfile.TemporaryDirectory(prefix="einsat-llm-") as d:
        path = os.path.join(d, "optimized.onnx")
        einsat.save_onnx(optimized, path)
        onnx.checker.check_model(path)
        size = os.path.getsize(path) + sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
                                           if f != "optimized.onnx")
    got = einsat.run(optimized, feeds, backend="onnxruntime")
    errs = {o: float(np.abs(got[o].astype(np.float64) - want[o]).max() / max(np.abs(want[o]).max(), 1e-30))
            for o in graph.outputs}
    return {"onnxruntime_runs": True, "max_relative_error": max(errs.values()), "bytes": size}


def bench(name: str, args, log=print) -> dict:
    import einsat
    from benchmarks.cpu_bench import time_on_ort
    builder, defaults, description, source = LLM[name]
    rec: dict = {"name": name, "description": description, "source": source, "kwargs": defaults}
    if args.small:
        from benchmarks.workloads.llm import TEST_SIZES
        rec["kwargs"] = {**defaults, **TEST_SIZES[name]}
    t0 = time.perf_counter()
    graph = build(name, **rec["kwargs"])
    rec.update(build_s=round(time.perf_counter() - t0, 2), nodes=len(graph), gflop=graph.flops() / 1e9,
               weights_mb=sum(a.nbytes for a in graph.weights.values()) / 1e6)
    feeds = inputs_for(name, graph)
    examples = feeds if name == "moe" else None
    log(f"{name}: {rec['nodes']} nodes, {rec['weights_mb']:.0f} MB of weights, {rec['gflop']:.1f} GFLOP")

    t0 = time.perf_counter()
    try:
        result = einsat.optimize(graph, examples, cost="h100", verify="prove", **by_work())
    except Exception as e:  # recorded: one workload's failure stops no other
        rec["h100"] = {"error": f"{type(e).__name__}: {e}"}
        log(f"  h100: {rec['h100']['error']}")
        return rec
    wall = time.perf_counter() - t0
    r = result.report
    rec["h100"] = {**optimize_summary(result), "wall_s": round(wall, 2), "memory": r.memory, "stop": r.stop,
                   "verification_status": "proved" if "proved" in str(r.verification) else str(r.verification),
                   "partition": partition_summary(r), "search": search_summary(r.saturation)}
    log(f"  h100 (modeled): {r.speedup:.3f}x in {wall:.1f} s, "
        f"{rec['h100'].get('stop_reason')} at {rec['h100'].get('enodes')} e-nodes, "
        f"peak {r.memory.get('peak_bytes', 0) / 2**30:.2f} GiB")
    rec["onnx"] = onnx_check(graph, result.graph, feeds)
    log(f"  ONNX of the result on onnxruntime: max relative error {rec['onnx']['max_relative_error']:.2g}")
    del result
    gc.collect()

    if args.cpu:
        t0 = time.perf_counter()
        try:
            cpu = einsat.optimize(graph, examples, cost="cpu", verify="prove",
                                  measure=einsat.Measure(profile_s=args.profile_budget, check_reps=args.reps),
                                  **by_work())
        except Exception as e:
            rec["cpu"] = {"error": f"{type(e).__name__}: {e}"}
            log(f"  cpu: {rec['cpu']['error']}")
            return rec
        opt = {**optimize_summary(cpu), "wall_s": round(time.perf_counter() - t0, 2)}
        same = cpu.report.kept_input is not None or cpu.graph is graph
        reps = max(3, args.reps // 3) if rec["gflop"] > 50 else args.reps
        rec["cpu"] = {"optimize": opt, "ort": time_on_ort(graph, cpu.graph, reps, same),
                      "returned": "input" if same else "optimized"}
        o = rec["cpu"]["ort"]
        log(f"  cpu (measured): {o['input']['median_ms']:.2f} -> {o['optimized']['median_ms']:.2f} ms, "
            f"{o['speedup']:.3f}x ({rec['cpu']['returned']} returned)")
        del cpu
        gc.collect()
    return rec


def saturate(name: str, iterations: int, time_s: float, log=print) -> dict:
    """`name` optimized (cost h100, verified) under limits that let the search run to its end: does
    it saturate, at how many e-nodes, in what time."""
    import einsat
    from einsat.egraph.session import Limits
    graph = build(name)
    feeds = inputs_for(name, graph)
    t0 = time.perf_counter()
    result = einsat.optimize(graph, feeds if name == "moe" else None, cost="h100", verify="prove",
                             limits=Limits(iterations=iterations, time_s=time_s))
    wall = time.perf_counter() - t0
    r, s = result.report, result.report.saturation
    out = {"iterations_limit": iterations, "time_s_limit": time_s, "wall_s": round(wall, 2),
           "speedup": r.speedup, "stop_reason": s.stop_reason, "stop_text": s.stop_text, "enodes": s.enodes,
           "node_limit": s.node_limit, "iterations": s.iterations,
           "times": {k: round(v, 2) for k, v in r.times.items()},
           "memory": r.memory, "verification_status": "proved" if "proved" in str(r.verification) else
           str(r.verification), "search": search_summary(s)}
    log(f"{name} to saturation: {s.stop_reason} at {s.enodes} e-nodes after {s.iterations} iterations, "
        f"{wall:.1f} s, modeled {r.speedup:.3f}x")
    return out


# -- tables ------------------------------------------------------------------------------------------
def _ms(part: dict) -> str:
    return f"{part['median_ms']:.2f} ({part['p10_ms']:.2f}–{part['p90_ms']:.2f})"


def markdown(results: dict) -> str:
    m = results["meta"]
    lines = [
        "# The workloads people bring in 2026: Llama, GQA, RMSNorm, SwiGLU, LoRA, MoE (`benchmarks.llm_bench`)",
        "",
        f"Commit `{m['commit'][:10]}`{' (with local changes)' if m.get('dirty') else ''}, {m['date']}; "
        f"machine: {m['machine']}"
        + (f", {m['load_average_end']} at the end." if m.get("load_average_end") is not None else "."),
        "",
        "Workloads: `benchmarks/workloads/llm.py` (shapes and sources in its docstring). Every row is the",
        ("workload at the tests' small dimensions (`--small`, a smoke run)." if m.get("small") else
         "workload at its full size.") + " Every search ends by work: the default node, iteration and match",
        f"limits, with saturation's and the ILP's clocks far off ({SEARCH_S:g} s, {EXTRACT_S:g} s), so the programs do",
        "not depend on the machine's load. **Modeled**: `einsat.optimize(cost=\"h100\", verify=\"prove\")`, the",
        "speed-up the committed H100 profile predicts (not a measurement). **Measured CPU**:",
        "`einsat.optimize(cost=\"cpu\")`'s result against the input on onnxruntime CPU, one thread, one",
        "process, interleaved rounds; medians in ms with the 10th–90th percentiles. "
        "**H100 / torch.compile**: " + ("measured on " + m["gpu"] if m.get("gpu") else
                                        "not measured this session (no GPU lent)") + ".",
        "",
        "## Search: time, saturation, memory (cost h100)",
        "",
        "Optimize s: from the built graph to the verified result, wall clock. Memory: the process's resident",
        "peak (one process runs every workload: earlier workloads' freed memory stays resident) and, in",
        "brackets, what the run added, which `Limits.memory_gb` (4) bounds.",
        "",
        "| workload | nodes | weights MB | optimize s | stop | e-nodes / limit | iterations "
        "| process peak GiB (+ added by the run) "
        "| verification | ONNX on onnxruntime (max rel. error) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for w in results["workloads"]:
        h = w.get("h100", {})
        if "error" in h or not h:
            lines.append(f"| {w['name']} | {w.get('nodes', '–')} | | | error: {h.get('error', w.get('error'))} "
                         "| | | | | |")
            continue
        mem = h.get("memory") or {}
        peak = mem.get("peak_bytes", 0) / 2**30
        added = mem.get("added_bytes", 0) / 2**30
        stop, enodes = h.get("stop_reason") or "–", h.get("enodes")
        if h.get("partition"):  # the largest piece's e-graph; each piece's own stop
            stop = f"partitioned; pieces: {', '.join(h['partition']['piece_stops'])}"
            enodes = h["partition"]["max_piece_enodes"]
        onnx = w.get("onnx", {})
        lines.append(f"| {w['name']} | {w['nodes']} | {w['weights_mb']:.0f} | {h['wall_s']:.1f} | {stop} | "
                     f"{enodes} / {h.get('node_limit', '–')} | {h.get('iterations', '–')} | "
                     f"{peak:.2f} (+{added:.2f}) | {h.get('verification_status', '–')} | "
                     f"{onnx.get('max_relative_error', float('nan')):.1e} |")
    parts = [w for w in results["workloads"] if (w.get("h100") or {}).get("partition")]
    for w in parts:
        p = w["h100"]["partition"]
        lines += ["", f"`{w['name']}` was partitioned: {p['pieces']} pieces, {p['optimized']} optimized, "
                  f"{p['cache_hits']} reused ({p['layer_copies']} copies of the layer), executor "
                  f"{p['executor']} × {p['workers']}; phases (s): "
                  + ", ".join(f"{k} {v}" for k, v in p["phase_seconds"].items())
                  + f"; the layer's modeled speed-up inside the stack {p['layer_modeled_speedup']:.3f}x"
                  + (f"; fallbacks: {p['fallbacks']}" if p["fallbacks"] else "") + "."]
    sat = [w for w in results["workloads"] if w.get("saturate")]
    if sat:
        lines += ["", "Run to the search's end (the same optimize, cost h100, verified, with the iteration and time "
                  "limits raised):", "",
                  "| workload | limits | stop | e-nodes / limit | iterations | optimize s (saturate, extract, verify) "
                  "| modeled |", "|---|---|---|---:|---:|---|---:|"]
        for w in sat:
            t = w["saturate"]
            ph = t["times"]
            lines.append(f"| {w['name']} | {t['iterations_limit']} iterations, {t['time_s_limit']:.0f} s | "
                         f"{t['stop_text']} | {t['enodes']} / {t['node_limit']} | {t['iterations']} | "
                         f"{t['wall_s']:.1f} "
                         f"({ph.get('saturate', 0):.1f}, {ph.get('extract', 0):.1f}, {ph.get('verify', 0):.1f}) | "
                         f"{t['speedup']:.3f}x |")
    lines += ["", "## Speed-ups", "",
              "| workload | GFLOP | modeled h100 | ops after (h100) | CPU input ms | CPU einsat ms | measured CPU "
              "| faster rounds | H100 | torch.compile |",
              "|---|---:|---:|---|---:|---:|---:|---:|---|---|"]
    gpu_cell = "–" if m.get("gpu") else "not measured (no GPU lent)"
    for w in results["workloads"]:
        h = w.get("h100", {})
        modeled = f"{h['speedup']:.3f}x" if "speedup" in h else "–"
        ops = ", ".join(f"{k} {v}" for k, v in sorted((h.get("ops_after") or {}).items(), key=lambda kv: -kv[1])
                        if k != "identity")
        c = w.get("cpu") or {}
        if "ort" in c:
            o = c["ort"]
            note = " (input returned)" if c["returned"] == "input" else ""
            wins = f"{o['wins']}/{o['optimized']['reps']}" if "wins" in o else "–"
            cpu = [_ms(o["input"]), _ms(o["optimized"]), f"{o['speedup']:.3f}x{note}", wins]
        else:
            cpu = ["–", "–", c.get("error", "not run"), "–"]
        lines.append(f"| {w['name']} | {w.get('gflop', 0):.2f} | {modeled} | {ops} | " + " | ".join(cpu)
                     + f" | {gpu_cell} | {gpu_cell} |")
    if results.get("note"):
        lines += ["", "## Where einsat gains, where it does not, and why", "", results["note"]]
    return "\n".join(lines) + "\n"


def write(results: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    _atomic_write(os.path.join(out, "llm.json"), json.dumps(results, indent=1, default=str))
    _atomic_write(os.path.join(out, "llm.md"), markdown(results))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help=f"workloads (default: all): {', '.join(LLM)}")
    p.add_argument("--reps", type=int, default=9, help="interleaved rounds on onnxruntime (default 9; a third "
                   "of them, at least 3, for workloads above 50 GFLOP)")
    p.add_argument("--no-cpu", dest="cpu", action="store_false", help="skip the CPU measurements")
    p.add_argument("--profile-budget", type=float, default=60, help="seconds of op profiling (cost cpu)")
    p.add_argument("--small", action="store_true", help="the tests' small dimensions (llm.TEST_SIZES), not the "
                   "full sizes: a smoke run")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--note", help="a file whose text closes the table (where einsat gains, and why)")
    p.add_argument("--resume", action="store_true", help="keep the finished workloads of <out>/llm.json")
    p.add_argument("--saturate", nargs="+", metavar="NAME",
                   help="only: optimize these again under --iterations/--saturate-s (cost h100), to the search's "
                        "end, and add the run to their rows of <out>/llm.json")
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--saturate-s", type=float, default=120.0, help="the saturation's time limit there")
    args = p.parse_args(argv)
    if args.saturate:
        path = os.path.join(args.out, "llm.json")
        with open(path) as f:
            results = json.load(f)
        if args.note:
            with open(args.note) as f:
                results["note"] = f.read().strip()
        rows = {w["name"]: w for w in results["workloads"]}
        for name in args.saturate:
            rows[name]["saturate"] = saturate(name, args.iterations, args.saturate_s)
            write(results, args.out)
        return 0
    unknown = [n for n in args.names if n not in LLM]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(LLM)}")
    results = {"meta": {**metadata("cpu", "h100 (modeled) / cpu (measured)"), "gpu": None, "small": args.small},
               "workloads": []}
    done = {}
    path = os.path.join(args.out, "llm.json")
    if args.resume and os.path.exists(path):
        with open(path) as f:
            done = {w["name"]: w for w in json.load(f)["workloads"] if "error" not in w.get("h100", {"error": 1})}
    if args.note:
        with open(args.note) as f:
            results["note"] = f.read().strip()
    failed = False
    for name in args.names or list(LLM):
        if name in done:
            results["workloads"].append(done[name])
        else:
            try:
                rec = bench(name, args)
            except Exception as e:  # noqa: BLE001 - recorded with its error, the others go on
                rec = {"name": name, "error": f"{type(e).__name__}: {e}"}
                print(f"{name}: {rec['error']}", flush=True)
            failed |= "error" in rec or "error" in rec.get("h100", {})
            results["workloads"].append(rec)
        results["meta"]["load_average_end"] = round(os.getloadavg()[0], 2)
        write(results, args.out)
    print(f"wrote {path} and llm.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
