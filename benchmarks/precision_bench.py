"""Time fp32 programs against their fp16 conversions on onnxruntime's CPU kernels:
`python -m benchmarks.precision_bench` (#30 item 5, the CPU side).

Each model is converted (`einsat.ir.precision.convert`, fp32 in and out) and both programs run
as onnxruntime CPU sessions at 1 intra-op thread, interleaved (`runtime.profiler.interleaved`),
medians with the 10th-90th percentile spread. bf16 is not timed: onnxruntime's CPU provider has
no bf16 kernels for most ops (the converted bf16 models run on `onnx.reference`, a reference,
not a runtime). Also written: the conversion's error against fp32 (max e over the outputs, and
its bound). Writes benchmarks/results/precision.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import onnx

import einsat
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
    args = ap.parse_args(argv)
    rows = []
    for name, g in models().items():
        half = convert(g, "fp16")
        report = check_conversion(g, half, "fp16")
        times = interleaved({"fp32": ort_runner(g, threads=1), "fp16": ort_runner(half, threads=1)}, args.reps)
        s32, s16 = summarize(times["fp32"]), summarize(times["fp16"])
        worst = report.worst
        rows.append({"model": name, "fp32": s32, "fp16": s16, "speedup": s32["median_us"] / s16["median_us"],
                     "max_error": worst.max, "bound": worst.bound, "output": worst.name})
        print(f"{name}: fp32 {s32['median_us'] / 1e3:.1f} ms, fp16 {s16['median_us'] / 1e3:.1f} ms "
              f"({rows[-1]['speedup']:.2f}x), error {worst.max:.2g} (bound {worst.bound:.2g})")
    machine = f"{platform.processor() or platform.machine()}, {platform.node()}"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "precision.json").write_text(json.dumps({"machine": machine, "reps": args.reps, "rows": rows},
                                                       indent=1))
    lines = ["# fp32 against fp16 on onnxruntime's CPU kernels (measured)", "",
             f"`python -m benchmarks.precision_bench`; {args.reps} interleaved rounds, 1 intra-op thread, "
             f"median (p10-p90) ms; machine: {machine} (shared). bf16: no onnxruntime CPU kernels, not timed.", "",
             "| model | fp32 ms | fp16 ms | fp32 / fp16 | fp16 error (max e) | bound |", "|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda s: f"{s['median_us'] / 1e3:.1f} ({s['p10_us'] / 1e3:.1f}-{s['p90_us'] / 1e3:.1f})"  # noqa: E731
        lines.append(f"| {r['model']} | {f(r['fp32'])} | {f(r['fp16'])} | {r['speedup']:.2f}x | "
                     f"{r['max_error']:.2g} | {r['bound']:.2g} |")
    (RESULTS / "precision.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'precision.md'}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
