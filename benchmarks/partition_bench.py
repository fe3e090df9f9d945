"""Big models: partitioning, reuse of repeated layers and parallel optimization, side by side.

    python -m benchmarks.partition_bench [bert_base gpt2 synthetic24] [--seq 128] [--reps 15]

For each model (the transformers exports `hf_bert_base`, `hf_gpt2` with seeded random weights,
and a synthetic 24-layer transformer, `benchmarks.workloads.transformer.bert`), in one process:

- `optimize` partitioned four ways: a process pool or serial, with or without reuse of repeated
  pieces (the wall time of each, its pieces, optimized pieces, cache hits, modeled costs): the
  speed-up of reuse is serial-without / serial-with, that of parallelism serial / process pool
  (both without reuse, where there is work to share);
- `optimize` of the whole model as one e-graph (what einsat did before partitioning);
- `optimize` of one layer alone (the most repeated piece, cut out of the model);
- measured times on the CPU target: onnxruntime (an `InferenceSession` of the exported program,
  default graph optimizations, one thread) and einsat's NumPy interpreter, for the input, the
  partitioned result and the whole-model result, and for the layer before and after; runs
  interleaved (input, partitioned, whole, input, ...), medians with the interquartile range.

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

    from einsat.ir.onnx_io import to_onnx
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(to_onnx(graph).SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(programs: dict, feeds: dict, reps: int) -> dict:
    """Interleaved timings (ms) of each program on onnxruntime and on NumPy: median and IQR."""
    import einsat
    sessions = {k: ort_session(g) for k, g in programs.items()}
    ort_feeds = {k: {n: feeds[n] for n in (i.name for i in s.get_inputs())} for k, s in sessions.items()}
    times = {k: {"onnxruntime": [], "numpy": []} for k in programs}
    for k in programs:  # warm-up
        sessions[k].run(None, ort_feeds[k])
        einsat.run(programs[k], feeds)
    for _ in range(reps):
        for k, g in programs.items():
            t0 = time.perf_counter()
            sessions[k].run(None, ort_feeds[k])
            times[k]["onnxruntime"].append(1e3 * (time.perf_counter() - t0))
    for _ in range(max(3, reps // 5)):
        for k, g in programs.items():
            t0 = time.perf_counter()
            einsat.run(g, feeds)
            times[k]["numpy"].append(1e3 * (time.perf_counter() - t0))
    return {k: {b: _stats(v) for b, v in per.items()} for k, per in times.items()}


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
    return out


def warm_up() -> None:
    """One small optimization first, so that no timed run pays for loading egglog and HiGHS."""
    import einsat
    from benchmarks.workloads.transformer import bert_tensat
    einsat.optimize(bert_tensat(seq=8, hidden=32, heads=2, layers=1), partition=False)


def bench(name: str, seq: int, reps: int, ways, log=print) -> dict:
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
    row["measured"] = measure({"input": graph, "partitioned": first.graph, "whole": whole.graph}, feeds, reps)
    row["measured_layer"] = measure({"input": layer, "optimized": alone.graph}, feeds_for(layer, None), reps)
    for k, v in row["measured"].items():
        log(f"{name} measured {k}: onnxruntime {v['onnxruntime']['median_ms']:.2f} ms, "
            f"numpy {v['numpy']['median_ms']:.2f} ms")
    return row


def speedups(row: dict) -> dict:
    out = {}
    if "serial" in row and "serial+reuse" in row:
        out["reuse (serial, without/with)"] = row["serial"]["seconds"] / row["serial+reuse"]["seconds"]
    if "serial" in row and "process" in row:
        out["parallel (no reuse, serial/process)"] = row["serial"]["seconds"] / row["process"]["seconds"]
    if "serial+reuse" in row and "process+reuse" in row:
        out["parallel (reuse, serial/process)"] = row["serial+reuse"]["seconds"] / row["process+reuse"]["seconds"]
    m, ml = row["measured"], row["measured_layer"]
    for b in ("onnxruntime", "numpy"):
        out[f"measured {b}: partitioned"] = m["input"][b]["median_ms"] / m["partitioned"][b]["median_ms"]
        out[f"measured {b}: whole"] = m["input"][b]["median_ms"] / m["whole"][b]["median_ms"]
        out[f"measured {b}: layer alone"] = ml["input"][b]["median_ms"] / ml["optimized"][b]["median_ms"]
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Big models: partitioned optimization (`python -m benchmarks.partition_bench`)", "",
             f"Machine: {meta['machine']}. Commit {meta['commit'][:10]}{' (dirty)' if meta['dirty'] else ''}, "
             f"{meta['date']}. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
             "Costs are modeled (h100 roofline, µs); times are measured wall seconds on this machine; "
             "measured runs are medians [q1–q3] of interleaved runs, one onnxruntime thread.", ""]
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
        lines += ["", "| measured (ms) | onnxruntime | numpy |", "|---|---|---|"]
        for k, v in row["measured"].items():
            lines.append(f"| model: {k} | " + " | ".join(
                f"{v[b]['median_ms']:.2f} [{v[b]['q1_ms']:.2f}–{v[b]['q3_ms']:.2f}]" for b in ("onnxruntime", "numpy"))
                + " |")
        for k, v in row["measured_layer"].items():
            lines.append(f"| layer: {k} | " + " | ".join(
                f"{v[b]['median_ms']:.2f} [{v[b]['q1_ms']:.2f}–{v[b]['q3_ms']:.2f}]" for b in ("onnxruntime", "numpy"))
                + " |")
        lines += ["", "Speed-ups: " + "; ".join(f"{k} {v:.2f}x" for k, v in row["speedups"].items()) + ".",
                  "Same program from both executors (a piece's search stopped by its time limit depends on "
                  f"the machine's load): {row.get('same_program', row.get('same_program_as_process+reuse'))}.", ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from benchmarks.harness import metadata
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"some of {', '.join(NAMES)} (default: all)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length (default 128, the exports' example)")
    ap.add_argument("--reps", type=int, default=20,
                    help="measured onnxruntime runs per program (default 20; NumPy a fifth)")
    ap.add_argument("--ways", nargs="*", default=list(WAYS), help=f"some of {', '.join(WAYS)}")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--commit", default=None, help="the commit a snapshot of the tree was taken from")
    args = ap.parse_args(argv)
    bad = [m for m in args.models if m not in NAMES] + [w for w in args.ways if w not in WAYS]
    if bad:
        ap.error(f"unknown {bad}; models: {', '.join(NAMES)}; ways: {', '.join(WAYS)}")
    warm_up()
    meta = metadata("cpu", "h100")
    if args.commit:  # run from a snapshot of the tree (git archive), which has no repository
        meta.update(commit=args.commit, dirty=False)
    rows = []
    for name in args.models or NAMES:
        row = bench(name, args.seq, args.reps, args.ways)
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
