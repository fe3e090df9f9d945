"""Time fp32 programs against their fp16 conversions on onnxruntime's CPU kernels:
`python -m benchmarks.precision_bench` (#30 item 5, the CPU side).

Each model is converted (`einsat.ir.precision.convert`, fp32 in and out) and both programs run
as onnxruntime CPU sessions at 1 intra-op thread, interleaved (`runtime.profiler.interleaved`),
medians with the 10th-90th percentile spread. bf16 is not timed: onnxruntime's CPU provider has
no bf16 kernels for most ops (the converted bf16 models run on `onnx.reference`, a reference,
not a runtime). Also written: the conversion's error against fp32 (max e over the outputs, and
its bound), and, modeled only (no GPU was at hand), the H100 roofline's cost of each program in
fp32, tf32, bf16 and fp16 (`RooflineCost("h100")`: tensor-core peaks by dtype for the products,
bytes by itemsize; the conversion's casts included), as converted and as einsat.optimize leaves
the fp32 and the bf16 programs.
Writes benchmarks/results/precision.{json,md}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx

import einsat
from benchmarks.meta import meta_line, run_meta
from einsat.cost.model import RooflineCost
from einsat.ir.builder import GraphBuilder
from einsat.ir.onnx.weights import fill_random_weights
from einsat.ir.precision import convert
from einsat.runtime.profiler import interleaved, ort_runner, summarize
from einsat.verify.precision import check_conversion

RESULTS = Path(__file__).resolve().parent / "results"


def bert_block(seq: int = 128, d: int = 768, ff: int = 3072) -> einsat.Graph:
    """One BERT-base encoder layer (one head's worth of attention over the full width)."""
    b = GraphBuilder("bert_layer")
    x = b.input("x", (1, seq, d))
    q, k, v = (b.matmul(x, b.weight(n, (d, d), scale=d ** -0.5)) for n in ("wq", "wk", "wv"))
    s = b.mul(b.matmul(q, b.transpose(k, perm=[0, 2, 1])), b.const(d ** -0.5))
    h = b.layernorm(b.add(x, b.matmul(b.matmul(b.softmax(s, axis=-1), v), b.weight("wo", (d, d), scale=d ** -0.5))),
                    b.weight("g1", (d,)), b.weight("b1", (d,)), axis=-1)
    up = b.gelu(b.matmul(h, b.weight("w1", (d, ff), scale=d ** -0.5)))
    f = b.matmul(up, b.weight("w2", (ff, d), scale=ff ** -0.5))
    return b.build(b.layernorm(b.add(h, f), b.weight("g2", (d,)), b.weight("b2", (d,)), axis=-1), names=["y"])


def models() -> dict[str, einsat.Graph]:
    resnet = fill_random_weights(onnx.load(Path(einsat.__file__).parent / "data" / "resnet18.onnx"), seed=0)
    return {"resnet18": einsat.load_onnx(resnet), "bert_layer (seq 128, d 768)": bert_block()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--budget", type=float, default=60, help="seconds per einsat.optimize run of the modeled table")
    args = ap.parse_args(argv)
    rows = []
    modeled = []
    for name, g in models().items():
        row = {"model": name, "fp32": RooflineCost("h100").graph_cost(g),
               "tf32": RooflineCost("h100", tf32=True).graph_cost(g)}
        for p in ("bf16", "fp16"):
            converted = convert(g, p)
            row[p] = RooflineCost("h100").graph_cost(converted)
            row[f"{p}_error"] = check_conversion(g, converted, p).worst.max
        for p in ("fp32", "bf16"):  # optimized for the same model, verified (the half one against fp32)
            result = einsat.optimize(g, cost=RooflineCost("h100"), precision=p, budget=args.budget)
            row[f"optimized_{p}"] = RooflineCost("h100").graph_cost(result.graph)
        modeled.append(row)
        print(f"{name} (modeled, h100 roofline): "
              + ", ".join(f"{p} {row[p]:.1f} us" for p in ("fp32", "tf32", "bf16", "fp16")))
        half = convert(g, "fp16")
        report = check_conversion(g, half, "fp16")
        times = interleaved({"fp32": ort_runner(g, threads=1), "fp16": ort_runner(half, threads=1)}, args.reps)
        s32, s16 = summarize(times["fp32"]), summarize(times["fp16"])
        worst = report.worst
        rows.append({"model": name, "fp32": s32, "fp16": s16, "speedup": s32["median_us"] / s16["median_us"],
                     "max_error": worst.max, "bound": worst.bound, "output": worst.name})
        print(f"{name}: fp32 {s32['median_us'] / 1e3:.1f} ms, fp16 {s16['median_us'] / 1e3:.1f} ms "
              f"({rows[-1]['speedup']:.2f}x), error {worst.max:.2g} (bound {worst.bound:.2g})")
    meta = run_meta()
    machine = meta["machine"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "precision.json").write_text(json.dumps({"meta": meta, "machine": machine, "reps": args.reps,
                                                        "rows": rows,
                                                        "modeled_h100": modeled}, indent=1))
    lines = ["# fp32 against fp16 on onnxruntime's CPU kernels (measured)", "", meta_line(meta), "",
             f"`python -m benchmarks.precision_bench`; {args.reps} interleaved rounds, 1 intra-op thread, "
             f"median (p10-p90) ms; machine: {machine} (shared). bf16: no onnxruntime CPU kernels, not timed.", "",
             "| model | fp32 ms | fp16 ms | fp32 / fp16 | fp16 error (max e) | bound |", "|---|---|---|---|---|---|"]
    note = ["", "A ratio whose two spreads overlap is no speed-up: onnxruntime's CPU provider runs most fp16 "
            "ops by casting to fp32 and back (its InsertCastTransformer), and x86 without AVX512-FP16 has no "
            "fp16 arithmetic. The error is the conversion's on the NumPy reference (`check_conversion`)."]
    for r in rows:
        f = lambda s: f"{s['median_us'] / 1e3:.1f} ({s['p10_us'] / 1e3:.1f}-{s['p90_us'] / 1e3:.1f})"  # noqa: E731
        lines.append(f"| {r['model']} | {f(r['fp32'])} | {f(r['fp16'])} | {r['speedup']:.2f}x | "
                     f"{r['max_error']:.2g} | {r['bound']:.2g} |")
    lines += note
    lines += ["", "## H100, modeled only (no GPU was at hand)", "",
              "The H100 datasheet roofline (`RooflineCost(\"h100\")`: 67 TFLOP/s fp32, 495 tf32, 989 fp16/bf16 "
              "tensor cores for the products, 3.35 TB/s, a launch overhead per kernel) on each program as "
              "converted (the conversion's casts are kernels too) and optimized; bf16 and fp16 are the same "
              "to the model. Not measured: no torch.compile comparison (that needs the GPU).", "",
              "| model | fp32 µs | tf32 µs | bf16 µs | fp16 µs | fp32 / bf16 | bf16 error (max e) | "
              "optimized fp32 µs | optimized bf16 µs |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in modeled:
        lines.append(f"| {r['model']} | {r['fp32']:.1f} | {r['tf32']:.1f} | {r['bf16']:.1f} | {r['fp16']:.1f} | "
                     f"{r['fp32'] / r['bf16']:.2f}x | {r['bf16_error']:.2g} | {r['optimized_fp32']:.1f} | "
                     f"{r['optimized_bf16']:.1f} |")
    lines += ["", f"The optimized columns: `einsat.optimize(cost=RooflineCost(\"h100\"), precision=..., "
              f"budget={args.budget:g})`, each verified (the bf16 one against the fp32 input)."]
    (RESULTS / "precision.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'precision.md'}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
