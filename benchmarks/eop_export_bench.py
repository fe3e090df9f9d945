"""The two ONNX routes of an eOperator, side by side on onnxruntime CPU (seconds, not minutes).

    python -m benchmarks.eop_export_bench [--reps 15]

An eOperator exports as an index grid and Gathers (`einsat.ir.expr.onnx`, any expression) or,
when it is an offset sum, as Pad, Slice and Add (`offset_sum`). For the eOperators EinNet's
derivations leave behind in einsat's workloads (a 5×5 convolution's shifted sums, transposed
convolutions' taps, a ReLU fused onto them), each is exported both ways and the two one-node
models are timed in interleaved rounds in one process (one intra-op thread, all of
onnxruntime's optimizations on). The ratio is the Gather route's median over the slice route's.

Writes `benchmarks/results/eop_export.{json,md}` with the machine, versions and load.
"""

from __future__ import annotations

import argparse
import json
import os

from benchmarks.predict_bench import machine

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

TAPS = "(E (L 0:1 0:256 0:8 0:8) (S 0:4 0:4) (T 0 i0 i1 (+ (* -2 s0) i2 1) (+ (* -2 s1) i3 1) s0 s1))"
# (what it is, input shape, expression)
CASES = {
    "conv5x5: 25-point shifted sum": (
        "einnet_conv5x5 after a 1×1 conv to 25 channels", (16, 1, 5, 5, 224, 224),
        "(E (L 0:16 0:1 0:224 0:224) (S 0:5 0:5) (T 0 i0 i1 s0 s1 (+ i2 s0 -2) (+ i3 s1 -2)))"),
    "conv5x5: 5-point shifted sum": (
        "einnet_conv5x5 after a 1×5 conv to 5 channels", (16, 1, 5, 224, 224),
        "(E (L 0:16 0:1 0:224 0:224) (S 0:5) (T 0 i0 i1 s0 (+ i2 s0 -2) i3))"),
    "conv_transpose: taps": (
        "einnet_conv_transpose after one batched MatMul", (16, 2, 2, 256, 4, 4),
        "(E (L 0:16 0:256 0:4 0:4) (S 0:2 0:2) (T 0 i0 s0 s1 i1 (+ (* -2 s0) i2 1) (+ (* -2 s1) i3 1)))"),
    "dcgan layer 2: taps innermost": (
        "DCGAN's second conv transpose after a MatMul, taps last", (1, 256, 4, 4, 4, 4), TAPS),
    "dcgan layer 2: ReLU of the taps": (
        "the same with eop-fusion's ReLU (a scope)", (1, 256, 4, 4, 4, 4),
        f"(E (L 0:1 0:256 0:8 0:8) (S) (relu (T {TAPS} i0 i1 i2 i3)))"),
}


def graph(shape, expr: str):
    from einsat.ir import GraphBuilder
    b = GraphBuilder("eop")
    return b.build(b.eop(b.input("t", shape), expr=expr))


def run(reps: int) -> dict:
    from einsat.ir.expr.onnx import gathers_only
    from einsat.runtime import random_inputs
    from einsat.runtime.profiler import interleaved, ort_session, summarize, wall_runner

    meta = {**machine(), "load_start": os.getloadavg()[0], "reps": reps}
    rows = []
    for name, (what, shape, expr) in CASES.items():
        g = graph(shape, expr)
        feeds = random_inputs(g, 0)
        with gathers_only():
            gathers = ort_session(g)
        slices = ort_session(g)
        a, b = gathers.run(None, feeds)[0], slices.run(None, feeds)[0]
        err = float(abs(a - b).max())
        times = interleaved({"gathers": wall_runner(lambda: gathers.run(None, feeds)),
                             "slices": wall_runner(lambda: slices.run(None, feeds))}, reps)
        s = {k: summarize(v) for k, v in times.items()}
        rows.append({"case": name, "what": what, "input": list(shape), "expr": expr, "max_abs_difference": err,
                     "gathers": s["gathers"], "slices": s["slices"],
                     "ratio": s["gathers"]["median_us"] / s["slices"]["median_us"],
                     "slices_faster_rounds": sum(x > y for x, y in zip(times["gathers"], times["slices"]))})
        print(f"  {name}: gathers {s['gathers']['median_us'] / 1e3:.2f} ms, "
              f"slices {s['slices']['median_us'] / 1e3:.2f} ms ({rows[-1]['ratio']:.2f}x)", flush=True)
    meta["load_end"] = os.getloadavg()[0]
    return {"meta": meta, "rows": rows}


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = ["# An eOperator's two ONNX routes on onnxruntime CPU", "",
             *([f"- commit `{m['commit']}`{' (with uncommitted changes)' if m.get('dirty') else ''}"]
               if "commit" in m else []),
             f"- {m['machine']}; {m['when']}; load average {m['load_start']:.2f} at the start, "
             f"{m['load_end']:.2f} at the end",
             f"- versions: {', '.join(f'{k} {v}' for k, v in m['versions'].items())}",
             f"- one intra-op thread, all optimizations on; {m['reps']} interleaved rounds; median [p10–p90]", "",
             "| eOperator | from | input | Gathers ms | Pad+Slice+Add ms | Gathers / slices | slices faster in |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        g, s = r["gathers"], r["slices"]
        lines.append(f"| {r['case']} | {r['what']} | {r['input']} | {g['median_us'] / 1e3:.2f} "
                     f"[{g['p10_us'] / 1e3:.2f}–{g['p90_us'] / 1e3:.2f}] | {s['median_us'] / 1e3:.2f} "
                     f"[{s['p10_us'] / 1e3:.2f}–{s['p90_us'] / 1e3:.2f}] | **{r['ratio']:.2f}×** | "
                     f"{r['slices_faster_rounds']}/{m['reps']} rounds |")
    lines += ["", "Both routes compute the same values (the largest difference is in the JSON). The Gather "
              "route builds the whole index grid (output × summation points) and gathers every point; "
              "the slice route pads the input once and adds one strided slice per summation point (where "
              "the cut axes are innermost with short runs, they move outermost first and the sum moves back)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", default=os.path.join(RESULTS, "eop_export"))
    args = p.parse_args(argv)
    result = run(args.reps)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(result))
    print(f"wrote {args.out}.json and {args.out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
