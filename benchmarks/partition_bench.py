"""Big models: partitioning, reuse of repeated layers and parallel optimization, side by side.

    python -m benchmarks.partition_bench [bert_base gpt2 synthetic24] [--seq 128] [--reps 30] [--ways ...]

For each model (the transformers exports `hf_bert_base`, `hf_gpt2` with seeded random weights,
and a synthetic 24-layer transformer, `benchmarks.workloads.transformer.bert`), in one process:

- `optimize` partitioned four ways: a process pool or serial, with or without reuse of repeated
  pieces (the wall time of each, its pieces, optimized pieces, cache hits, modeled costs): the
  speed-up of reuse is serial-without / serial-with, that of parallelism serial / process pool
  (both without reuse, where there is work to share);
- `optimize` of the whole model as one e-graph (what einsat did before partitioning);
- `optimize` of one layer alone (the most repeated piece, cut out of the model);
- the issue's modeled comparison: a layer's cost inside the partitioned model (its pieces before
  and after) next to the layer optimized alone, every piece that is not a layer on its own line,
  and the whole model's ratio (`modeled`);
- measured times on the CPU target: onnxruntime (an `InferenceSession` of the exported program,
  default graph optimizations, one thread) and einsat's NumPy interpreter, for the input, the
  partitioned result and the whole-model result, and for the layer before and after, all five
  once per round, rounds interleaved; each gain is the median of its per-round ratios with
  Wilcoxon's p that it is a gain, and the model's per-round gain is tested against the layer's
  (`compare`): is the measured gain of the whole at least the layer alone's?

Writes `benchmarks/results/partition.json` and `.md`, with the machine, versions and commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
MODELS = Path(__file__).parent.parent / "tests" / "data" / "models"
NAMES = ("bert_base", "gpt2", "synthetic24")
WAYS = {  # name -> Partitioning changes
    "process+reuse": {},
    "serial+reuse": {"executor": "serial"},
    "process": {"reuse": False},
    "serial": {"executor": "serial", "reuse": False},
}


def load(name: str, seq: int):
    import einsat
    if name == "synthetic24":
        from benchmarks.workloads.transformer import bert
        return bert(batch=1, seq=seq, hidden=256, heads=4, layers=24, ffn=1024), None
    text = {"bert_base": ("input_ids", "attention_mask", "token_type_ids"),
            "gpt2": ("input_ids", "attention_mask")}[name]
    graph = einsat.load_onnx(MODELS / f"hf_{name}.onnx", fill_weights="random",
                             input_shapes={k: (1, seq) for k in text})
    rng = np.random.default_rng(3)
    feeds = {"input_ids": rng.integers(0, 30000, (1, seq)), "attention_mask": np.ones((1, seq), np.int64),
             "token_type_ids": np.zeros((1, seq), np.int64)}
    return graph, {k: feeds[k] for k in text}


def feeds_for(graph, given):
    if given is not None:
        return given
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in graph.input_types().items()}


def ort_session(graph):
    import onnxruntime as ort

    from einsat.ir.onnx.io import to_onnx
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # nothing on stderr: a failure is the exception's message
    return ort.InferenceSession(to_onnx(graph).SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(programs: dict, reps: int, numpy_reps: int) -> dict:
    """Interleaved timings of `programs` ({name: (graph, feeds)}): all of them once per round, in
    turn (every other round reversed, `runtime.profiler.interleaved`), `reps` rounds on
    onnxruntime and `numpy_reps` on NumPy; each program's times (ms) per backend, paired by round."""
    import einsat
    from einsat.runtime.profiler import interleaved, wall_runner

    runners = {}
    for k, (g, feeds) in programs.items():
        session = ort_session(g)
        given = {i.name: feeds[i.name] for i in session.get_inputs()}
        runners[k] = wall_runner(lambda session=session, given=given: session.run(None, given))
    times = {"onnxruntime": interleaved(runners, reps, warmup=2)}
    if numpy_reps:
        times["numpy"] = interleaved({k: wall_runner(lambda g=g, feeds=feeds: einsat.run(g, feeds))
                                      for k, (g, feeds) in programs.items()}, numpy_reps, warmup=1)
    return {b: {k: [t / 1e3 for t in v] for k, v in per.items()} for b, per in times.items()}


def compare(times: dict) -> dict:
    """The measured gains from paired rounds (`times` of `measure` for one backend, with the
    programs input, partitioned, whole, layer_input, layer_optimized): each gain as the median of
    the per-round ratios with their 10th-90th percentiles and Wilcoxon's one-sided p that the
    optimized program is faster (`runtime.profiler.judge`); and the issue's comparison, the
    partitioned model's gain against the layer alone's, round by round: the p-values that the
    model's per-round log ratio lies below, or above, the layer's (signed-rank test)."""
    from einsat.runtime.profiler import judge, signed_rank_test

    def gain(base: str, cand: str) -> dict:
        ratios = [b / c for b, c in zip(times[base], times[cand])]
        verdict = judge([1e3 * t for t in times[base]], [1e3 * t for t in times[cand]])
        return {"median": statistics.median(ratios), "p10": float(np.percentile(ratios, 10)),
                "p90": float(np.percentile(ratios, 90)), "rounds": len(ratios), "wins": verdict.wins,
                "p_faster": verdict.p_value, "faster": verdict.faster}

    out = {"partitioned": gain("input", "partitioned"), "whole": gain("input", "whole"),
           "layer_alone": gain("layer_input", "layer_optimized")}
    model = [np.log(b / c) for b, c in zip(times["input"], times["partitioned"])]
    layer = [np.log(b / c) for b, c in zip(times["layer_input"], times["layer_optimized"])]
    below = signed_rank_test([lv - mv for mv, lv in zip(model, layer)])
    above = signed_rank_test([mv - lv for mv, lv in zip(model, layer)])
    verdict = ("the partitioned model gains less than the layer alone" if below < 0.05 else
               "the partitioned model gains more than the layer alone" if above < 0.05 else
               "no difference shown between the partitioned model's gain and the layer alone's")
    out["model_vs_layer"] = {"p_below": below, "p_above": above, "verdict": verdict,
                             "holds": below >= 0.05}
    return out


def _stats(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median_ms": statistics.median(values), "q1_ms": q[0], "q3_ms": q[2], "runs": len(values)}


def summary(result, seconds: float) -> dict:
    r = result.report
    out = {"seconds": round(seconds, 2), "cost_before": r.cost_before, "cost_after": r.cost_after,
           "modeled_speedup": r.speedup,
           "stop_reason": r.saturation.stop_reason if r.saturation else None,
           "enodes": r.saturation.enodes if r.saturation else None}
    p = r.partition
    if p is not None:
        out.update(pieces=len(p.pieces), optimized=p.templates, cache_hits=p.cache_hits, executor=p.executor,
                   workers=p.workers, phase_seconds={k: round(v, 2) for k, v in p.seconds.items()},
                   piece_stops=sorted({q.stop_reason for q in p.pieces if q.stop_reason}),
                   max_piece_enodes=max((q.enodes or 0) for q in p.pieces),
                   cut_bytes=sum(c.bytes for c in p.cuts), forced_cuts=sum(c.forced for c in p.cuts))
        layers = [q for q in p.pieces if q.fingerprint == max((q.fingerprint for q in p.pieces),
                                                                 key=[q.fingerprint for q in p.pieces].count)]
        out["layer_in_model_speedup"] = sum(q.cost_before for q in layers) / sum(q.cost_after for q in layers)
        out["piece_detail"] = [{"index": q.index, "nodes": q.nodes, "fingerprint": q.fingerprint,
                                "template": q.template, "layer": q in layers, "cost_before": q.cost_before,
                                "cost_after": q.cost_after, "stop_reason": q.stop_reason, "enodes": q.enodes,
                                "seconds": round(q.seconds, 2)} for q in p.pieces]
    return out


def warm_up() -> None:
    """One small optimization first, so that no timed run pays for loading egglog and HiGHS."""
    import einsat
    from benchmarks.workloads.transformer import bert_tensat
    einsat.optimize(bert_tensat(seq=8, hidden=32, heads=2, layers=1), partition=False)


def bench(name: str, seq: int, reps: int, ways, log=print, numpy_reps: int = 3) -> dict:
    import einsat
    from einsat.partition import Partitioning, canonical, partition

    t0 = time.perf_counter()
    graph, given = load(name, seq)
    row: dict = {"model": name, "seq": seq, "nodes": len(graph.nodes), "load_s": round(time.perf_counter() - t0, 2)}
    feeds = feeds_for(graph, given)
    results = {}
    for way in ways:
        t0 = time.perf_counter()
        results[way] = einsat.optimize(graph, example_inputs=given,
                                       partition=dataclasses.replace(Partitioning(), **WAYS[way]))
        row[way] = summary(results[way], time.perf_counter() - t0)
        log(f"{name} {way}: {row[way]['seconds']:.1f} s, {row[way]['pieces']} pieces, "
            f"{row[way]['optimized']} optimized, {row[way]['cache_hits']} cache hits, "
            f"modeled {row[way]['modeled_speedup']:.3f}x")
    t0 = time.perf_counter()
    whole = einsat.optimize(graph, example_inputs=given, partition=False)
    row["whole"] = summary(whole, time.perf_counter() - t0)
    log(f"{name} whole: {row['whole']['seconds']:.1f} s, modeled {row['whole']['modeled_speedup']:.3f}x, "
        f"{row['whole']['stop_reason']}")

    pieces, _ = partition(graph)
    keys = [canonical(p.graph).key for p in pieces]
    layer = pieces[max(range(len(pieces)), key=lambda k: (keys.count(keys[k]), -k))].graph
    t0 = time.perf_counter()
    alone = einsat.optimize(layer, partition=False)
    row["layer_alone"] = summary(alone, time.perf_counter() - t0) | {"nodes": len(layer.nodes),
                                                                     "copies": keys.count(canonical(layer).key)}
    log(f"{name} layer alone: modeled {row['layer_alone']['modeled_speedup']:.3f}x")

    # the executors on the same work: equal programs unless a time limit stopped a piece's search
    row["same_program"] = {f"{a} = {b}": str(results[a].graph) == str(results[b].graph)
                           for a, b in (("process+reuse", "serial+reuse"), ("process", "serial"))
                           if a in results and b in results}
    first = results[ways[0]]
    row["modeled"] = modeled(row[ways[0]], row["layer_alone"])
    times = measure({"input": (graph, feeds), "partitioned": (first.graph, feeds), "whole": (whole.graph, feeds),
                     "layer_input": (layer, feeds_for(layer, None)),
                     "layer_optimized": (alone.graph, feeds_for(layer, None))}, reps, numpy_reps)
    row["measured_ms"] = {b: {k: _stats(v) for k, v in per.items()} for b, per in times.items()}
    row["measured_gain"] = {b: compare(per) for b, per in times.items()}
    for b, g in row["measured_gain"].items():
        log(f"{name} measured {b}: partitioned {g['partitioned']['median']:.3f}x "
            f"(p={g['partitioned']['p_faster']:.3f}), "
            f"layer alone {g['layer_alone']['median']:.3f}x (p={g['layer_alone']['p_faster']:.3f}): "
            f"{g['model_vs_layer']['verdict']}")
    return row


def modeled(part: dict, alone: dict) -> dict:
    """The issue's modeled comparison: a layer's cost inside the partitioned model (its pieces,
    before and after) next to the layer optimized alone, the other pieces one by one, and the
    whole model's ratio."""
    layers = [q for q in part["piece_detail"] if q["layer"]]
    n = len(layers)
    before, after = sum(q["cost_before"] for q in layers) / n, sum(q["cost_after"] for q in layers) / n
    others = [q for q in part["piece_detail"] if not q["layer"]]
    return {"layer_in_model": {"copies": n, "cost_before": before, "cost_after": after, "speedup": before / after},
            "layer_alone": {"cost_before": alone["cost_before"], "cost_after": alone["cost_after"],
                            "speedup": alone["modeled_speedup"], "stop_reason": alone["stop_reason"]},
            "others": others, "whole_model": {"cost_before": part["cost_before"], "cost_after": part["cost_after"],
                                              "speedup": part["modeled_speedup"]},
            "layer_in_model_at_least_alone": after <= alone["cost_after"] * (1 + 1e-9)}


def speedups(row: dict) -> dict:
    out = {}
    if "serial" in row and "serial+reuse" in row:
        out["reuse (serial, without/with)"] = row["serial"]["seconds"] / row["serial+reuse"]["seconds"]
    if "serial" in row and "process" in row:
        out["parallel (no reuse, serial/process)"] = row["serial"]["seconds"] / row["process"]["seconds"]
    if "serial+reuse" in row and "process+reuse" in row:
        out["parallel (reuse, serial/process)"] = row["serial+reuse"]["seconds"] / row["process+reuse"]["seconds"]
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Big models: partitioned optimization (`python -m benchmarks.partition_bench`)", "",
             f"Machine: {meta['machine']}. Commit {meta['commit'][:10]}{' (dirty)' if meta['dirty'] else ''}, "
             f"{meta['date']}. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
             f"Costs are modeled ({meta.get('cost_model_name', meta['cost_model'])}, µs); times are measured wall "
             "seconds on this machine. Measured "
             "runs: every program once per round, rounds interleaved (every other one reversed), one "
             "onnxruntime thread; medians [q1–q3] in ms; a gain is the median of the per-round ratios "
             "[10th–90th percentile], with Wilcoxon's one-sided signed-rank p that the optimized program is "
             "faster, and the model's gain is tested against the layer's round by round.", ""]
    for row in rows:
        lines += [f"## {row['model']} (sequence {row['seq']}, {row['nodes']} nodes, loaded in {row['load_s']} s)", "",
                  "| run | time (s) | pieces | optimized | cache hits | modeled speedup | saturation stops |",
                  "|---|---|---|---|---|---|---|"]
        for way in [*WAYS, "whole", "layer_alone"]:
            if way not in row:
                continue
            r = row[way]
            lines.append(f"| {way} | {r['seconds']:.1f} | {r.get('pieces', '–')} | {r.get('optimized', '–')} | "
                         f"{r.get('cache_hits', '–')} | {r['modeled_speedup']:.3f}x | "
                         f"{', '.join(r.get('piece_stops', [])) or r['stop_reason']} |")
        m = row["modeled"]
        li, la = m["layer_in_model"], m["layer_alone"]
        lines += ["", "Modeled, per piece (the first run's pieces): a layer inside the model against the layer "
                  "optimized alone, and the pieces that are not layers.", "",
                  "| part | nodes | cost before | cost after | gain | saturation |", "|---|---|---|---|---|---|",
                  f"| layer in the model (each of {li['copies']}) | {row['layer_alone']['nodes']} | "
                  f"{li['cost_before']:,.2f} | {li['cost_after']:,.2f} | {li['speedup']:.4f}x | – |",
                  f"| layer alone | {row['layer_alone']['nodes']} | {la['cost_before']:,.2f} | "
                  f"{la['cost_after']:,.2f} | {la['speedup']:.4f}x | {la['stop_reason']} |"]
        for q in m["others"]:
            lines.append(f"| piece {q['index']} (not a layer) | {q['nodes']} | {q['cost_before']:,.2f} | "
                         f"{q['cost_after']:,.2f} | "
                         + (f"{q['cost_before'] / q['cost_after']:.4f}x" if q['cost_after'] else "dropped") + " | "
                         f"{q['stop_reason'] or 'piece ' + str(q['template']) + chr(39) + 's'} |")
        w = m["whole_model"]
        lines += [f"| whole model | {row['nodes']} | {w['cost_before']:,.2f} | {w['cost_after']:,.2f} | "
                  f"{w['speedup']:.4f}x | – |", "",
                  "A layer inside the model gains at least what the layer alone gains: "
                  f"{'yes' if m['layer_in_model_at_least_alone'] else 'NO'}.", "",
                  "| measured (ms) | " + " | ".join(row["measured_ms"]) + " |",
                  "|---|" + "---|" * len(row["measured_ms"])]
        for k in next(iter(row["measured_ms"].values())):
            lines.append(f"| {k} | " + " | ".join(
                f"{v[k]['median_ms']:.2f} [{v[k]['q1_ms']:.2f}–{v[k]['q3_ms']:.2f}]"
                for v in row["measured_ms"].values())
                + " |")
        lines += ["", "| measured gain | backend | median [p10–p90] | faster in | p (faster) |",
                  "|---|---|---|---|---|"]
        for b, g in row["measured_gain"].items():
            for k in ("partitioned", "whole", "layer_alone"):
                x = g[k]
                lines.append(f"| {k} | {b} | {x['median']:.3f}x [{x['p10']:.3f}–{x['p90']:.3f}] | "
                             f"{x['wins']}/{x['rounds']} | {x['p_faster']:.3f} |")
        lines.append("")
        for b, g in row["measured_gain"].items():
            v = g["model_vs_layer"]
            lines.append(f"Measured on {b}: {v['verdict']} (p = {v['p_below']:.3f} that it gains less, "
                         f"{v['p_above']:.3f} that it gains more, {g['partitioned']['rounds']} paired rounds).")
        lines += ["", "Speed-ups of the optimization: "
                  + "; ".join(f"{k} {v:.2f}x" for k, v in row["speedups"].items()) + ".",
                  "Same program from both executors (a piece's search stopped by its time limit depends on "
                  f"the machine's load): {row.get('same_program')}.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from benchmarks.harness import metadata
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"some of {', '.join(NAMES)} (default: all)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length (default 128, the exports' example)")
    ap.add_argument("--reps", type=int, default=30,
                    help="interleaved onnxruntime rounds (default 30)")
    ap.add_argument("--numpy-reps", type=int, default=3,
                    help="interleaved rounds on einsat's NumPy interpreter (default 3; 0: none)")
    ap.add_argument("--ways", nargs="*", default=list(WAYS), help=f"some of {', '.join(WAYS)}")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--commit", default=None, help="the commit a snapshot of the tree was taken from")
    args = ap.parse_args(argv)
    bad = [m for m in args.models if m not in NAMES] + [w for w in args.ways if w not in WAYS]
    if bad:
        ap.error(f"unknown {bad}; models: {', '.join(NAMES)}; ways: {', '.join(WAYS)}")
    warm_up()
    meta = metadata("cpu", "h100")
    from einsat.cost.models import cost_model
    meta["cost_model_name"] = cost_model(meta["cost_model"]).name  # measured-h100 once its profile is committed
    if args.commit:  # run from a snapshot of the tree (git archive), which has no repository
        meta.update(commit=args.commit, dirty=False)
    rows = []
    for name in args.models or NAMES:
        row = bench(name, args.seq, args.reps, args.ways, numpy_reps=args.numpy_reps)
        row["speedups"] = speedups(row)
        print(f"{name}: " + "; ".join(f"{k} {v:.2f}x" for k, v in row["speedups"].items()), flush=True)
        rows.append(row)
        args.out.mkdir(parents=True, exist_ok=True)  # after each model: a long run keeps what it measured
        (args.out / "partition.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1, default=str))
        (args.out / "partition.md").write_text(markdown(rows, meta))
        print(f"wrote {args.out / 'partition.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
