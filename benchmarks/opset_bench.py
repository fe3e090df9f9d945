"""Does the opset a file declares change onnxruntime's speed? The same nodes, declared at two opsets.

    python -m benchmarks.opset_bench [--rounds 15] [--low 18] [--high 23]

einsat declares the least opset its written nodes need (`ir.onnx.opset.written_opset`). onnxruntime's
graph fusions match op versions (LayerNormalization fusion, attention fusion ...), and an op's version
is the one its schema has at the declared opset: a higher declaration gives the same node a newer
version. The bundled GPT-2 (`tests/data/models/hf_gpt2.onnx`, 12 layers, input 1x32, seeded random
weights) is written by einsat (`to_onnx`, no search) and declared at `--low` and at `--high`; both
files hold the same nodes (each valid across both opsets: checked). For each, onnxruntime's optimized
graph (ORT_ENABLE_ALL, what its fusions made: op counts) is saved, and the two sessions are timed in
interleaved rounds (one intra-op thread; median of the per-round ratios high/low).

Writes `benchmarks/results/opset.{json,md}` with the machine, versions and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "models", "hf_gpt2.onnx")


def declared_at(model, opset: int):
    """A copy of `model` declaring default-domain opset `opset` (and the IR version it needs)."""
    import onnx

    from einsat.ir.onnx.export import ir_version

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    m.ir_version = ir_version(list(m.opset_import))
    onnx.checker.check_model(m, full_check=True)  # every node valid at `opset` too
    return m


def session(model_bytes: bytes, optimized_path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = optimized_path
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def main(argv=None) -> dict:
    import onnx

    import einsat
    from benchmarks.predict_bench import machine
    from einsat.ir.onnx.export import to_onnx

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--runs", type=int, default=10, help="runs of each session per round")
    p.add_argument("--low", type=int, default=18)
    p.add_argument("--high", type=int, default=23)
    args = p.parse_args(argv)

    g = einsat.load_onnx(MODEL, input_shapes={"input_ids": (1, 32), "attention_mask": (1, 32)},
                         fill_weights="random", seed=0)
    written = to_onnx(g)
    own = next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx"))
    feeds = {"input_ids": np.random.default_rng(0).integers(0, 50257, (1, 32)).astype(np.int64),
             "attention_mask": np.ones((1, 32), np.int64)}
    feeds = {k: v for k, v in feeds.items() if k in g.inputs}
    sessions, fused, outs = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for opset in (args.low, args.high):
            m = declared_at(written, opset)
            path = os.path.join(tmp, f"opt{opset}.onnx")
            sessions[opset] = session(m.SerializeToString(), path)
            optimized = onnx.load(path, load_external_data=False)
            fused[opset] = dict(sorted(Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                                               for n in optimized.graph.node).items()))
            outs[opset] = sessions[opset].run(None, feeds)[0]
    for s in sessions.values():  # warm up
        for _ in range(3):
            s.run(None, feeds)
    ratios, times = [], {o: [] for o in sessions}
    for r in range(args.rounds):
        order = (args.low, args.high) if r % 2 == 0 else (args.high, args.low)
        per = {}
        for opset in order:
            t0 = time.perf_counter()
            for _ in range(args.runs):
                sessions[opset].run(None, feeds)
            per[opset] = (time.perf_counter() - t0) / args.runs
            times[opset].append(per[opset])
        ratios.append(per[args.high] / per[args.low])
    result = {
        "machine": machine(), "model": "hf_gpt2 (12 layers), input 1x32, random weights (seed 0)",
        "einsat_declares": own, "nodes_written": len(written.graph.node), "rounds": args.rounds, "runs": args.runs,
        "median_ms": {str(o): 1e3 * statistics.median(t) for o, t in times.items()},
        "median_ratio_high_over_low": statistics.median(ratios), "ratios": ratios,
        "onnxruntime_nodes_after_fusion": {str(o): c for o, c in fused.items()},
        "same_outputs": bool(np.array_equal(outs[args.low], outs[args.high])),
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "opset.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(RESULTS, "opset.md"), "w") as f:
        f.write(report(result, args.low, args.high))
    print(report(result, args.low, args.high))
    return result


def report(r: dict, low: int, high: int) -> str:
    m = r["machine"]
    fused = r["onnxruntime_nodes_after_fusion"]
    fused_low, fused_high = fused[str(low)], fused[str(high)]
    ops = sorted(set(fused_low) | set(fused_high))
    lines = ["# The declared opset and onnxruntime's speed (measured, `python -m benchmarks.opset_bench`)", "",
             f"{r['model']}: einsat writes {r['nodes_written']} nodes and declares opset {r['einsat_declares']}; "
             f"the same nodes declared at {low} and at {high}, on onnxruntime {m['versions']['onnxruntime']} CPU, "
             f"ORT_ENABLE_ALL, 1 intra-op thread, {r['rounds']} interleaved rounds of {r['runs']} runs.", "",
             f"Machine: {m['machine']}, load average {m['load_average']} (shared), commit {m['commit'][:10]}, "
             f"{m['when']}.",
             "",
             f"- median time: opset {low} {r['median_ms'][str(low)]:.2f} ms, opset {high} "
             f"{r['median_ms'][str(high)]:.2f} ms; median of the per-round ratios ({high}/{low}): "
             f"{r['median_ratio_high_over_low']:.3f}",
             f"- outputs bit-identical: {r['same_outputs']}", "",
             f"onnxruntime's graph after its fusions (op counts), opset {low} | opset {high}:", "",
             f"| op | {low} | {high} |", "|---|---:|---:|"]
    lines += [f"| {op} | {fused_low.get(op, 0)} | {fused_high.get(op, 0)} |" for op in ops]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
