"""The harness's results as a markdown table and a bar chart (from the JSON it writes).

`markdown(results)` renders every workload's row: size, NumPy latency, e-graph size and stop
reason, time per optimizer phase, modeled cost before and after with the modeled speedup, and,
when the run had a GPU, the latencies of einsat (original, optimized), PyTorch eager and
torch.compile. `chart(results, path)` draws the modeled speedups (and the GPU latencies,
relative to PyTorch eager) as a PNG with matplotlib (the `bench` extra).
"""

from __future__ import annotations

import json
import math
import os
import sys


def _fmt(v, spec: str = ".1f", none: str = "–") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def _opt_cells(opt: dict) -> list[str]:
    if "error" in opt:
        return ["**error**"] + ["–"] * 5 + [opt["error"].replace("|", "/")[:120]]
    if "skipped" in opt:
        return ["–"] * 6 + [opt["skipped"]]
    t = opt.get("times", {})
    phases = "/".join(_fmt(t.get(k), ".1f") for k in ("saturate", "extract", "verify"))
    egraph = f"{opt.get('enodes', 0):,} / {opt.get('eclasses', 0):,}"
    cost = f"{_fmt(opt['cost_before'], ',.1f')} → {_fmt(opt['cost_after'], ',.1f')}"
    return [egraph, opt.get("stop_reason", "–"), phases, cost, f"**{opt['speedup']:.2f}×**",
            f"{opt.get('nodes_before', '–')} → {opt.get('nodes_after', '–')}", ""]


def _gpu_cells(gpu: dict | None) -> list[str]:
    def ms(part: dict | None) -> str:
        if not part:
            return "–"
        return "error" if "error" in part else _fmt(part.get("median_ms"), ".3f")
    if not gpu:
        return ["–"] * 4
    torch_part = gpu.get("pytorch", {})
    return [ms(gpu.get("einsat")), ms(gpu.get("einsat_optimized")),
            ms(torch_part.get("eager") if "error" not in torch_part else torch_part),
            ms(torch_part.get("compile") if "error" not in torch_part else torch_part)]


def markdown(results: dict) -> str:
    meta = results["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    lines = [f"# einsat benchmarks ({meta['kind']} run)", "",
             f"- commit `{meta['commit']}`{' (with uncommitted changes)' if meta.get('dirty') else ''}, "
             f"{meta['date']}",
             f"- machine: {meta['machine']}" + (f"; GPU: {meta['gpu']}" if meta.get("gpu") else ""),
             f"- versions: {versions}",
             f"- cost model for the modeled speedup: {meta.get('cost_model', '–')}; "
             f"phases: saturate/extract/verify seconds", ""]
    gpu = any(w.get("gpu") for w in results["workloads"])
    head = ["workload", "source", "size", "nodes", "GFLOP", "NumPy ms", "NumPy ms, optimized", "e-nodes / e-classes",
            "stop", "phases s", "modeled cost", "modeled speedup", "nodes after", "note"]
    if gpu:
        head += ["einsat GPU ms", "einsat opt. GPU ms", "PyTorch eager ms", "torch.compile ms"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in results["workloads"]:
        if "error" in w and "nodes" not in w:
            lines.append(f"| {w['name']} | {w.get('source', '')} | | | | | | | | | | | | "
                         f"**error**: {w['error'][:120]} |" + " |" * (4 if gpu else 0))
            continue
        size = ", ".join(f"{k}={v}" for k, v in w["kwargs"].items())
        opt = _opt_cells(w.get("optimize", {"skipped": "not run"}))
        row = [w["name"], w["source"], size, str(w["nodes"]), _fmt(w["gflop"], ".2f"),
               _fmt(w.get("numpy_ms"), ",.1f"), _fmt(w.get("optimized_numpy_ms"), ",.1f")] + opt
        if gpu:
            row += _gpu_cells(w.get("gpu"))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Modeled speedup: the cost model's estimate of the input program over the optimized one "
              "(the GPU it models, not this machine); NumPy ms: the original and the optimized program on the "
              "NumPy backend of this machine (median of 3 runs after a warm-up, 1 run past 20 s)."]
    if gpu:
        lines.append("GPU latencies: median of >= 100 repetitions after warm-up, CUDA events, fp32, TF32 off. "
                     "einsat: `CompiledProgram` (static memory plan, one CUDA graph launch; the interpreter "
                     "loop's latencies are in the JSON); PyTorch eager and torch.compile without CUDA graphs.")
    return "\n".join(lines) + "\n"


def chart(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [w for w in results["workloads"] if "speedup" in w.get("optimize", {})]
    gpu_rows = [w for w in results["workloads"] if w.get("gpu") and "eager" in w["gpu"].get("pytorch", {})]
    panels = 1 + bool(gpu_rows)
    fig, axes = plt.subplots(panels, 1, figsize=(max(8, 0.5 * len(results["workloads"])), 4.5 * panels),
                             squeeze=False)
    ax = axes[0][0]
    names = [w["name"] for w in rows]
    ax.bar(names, [w["optimize"]["speedup"] for w in rows], color="#4477aa")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_ylabel(f"modeled speedup ({results['meta'].get('cost_model', '')})")
    ax.set_title(f"einsat: modeled speedup per workload (commit {results['meta']['commit'][:10]})")
    ax.tick_params(axis="x", rotation=60)
    if gpu_rows:
        ax = axes[1][0]
        labels = [("einsat", "einsat"), ("einsat_optimized", "einsat optimized"), ("compile", "torch.compile")]
        width = 0.8 / len(labels)
        for k, (key, label) in enumerate(labels):
            vals = []
            for w in gpu_rows:
                g = w["gpu"]
                part = g["pytorch"].get(key) if key == "compile" else g.get(key)
                eager = g["pytorch"]["eager"]["median_ms"]
                vals.append(eager / part["median_ms"] if part and "median_ms" in part else 0.0)
            ax.bar([i + (k - 1) * width for i in range(len(gpu_rows))], vals, width, label=label)
        ax.set_xticks(range(len(gpu_rows)), [w["name"] for w in gpu_rows], rotation=60)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("speedup over PyTorch eager")
        ax.set_title(f"GPU latency ({results['meta'].get('gpu', '')}, fp32)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    """`python -m benchmarks.report RESULTS.json`: render its .md and .png again beside it."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m benchmarks.report RESULTS.json ...")
        return 2
    for path in paths:
        with open(path) as f:
            results = json.load(f)
        stem = os.path.splitext(path)[0]
        with open(stem + ".md", "w") as f:
            f.write(markdown(results))
        chart(results, stem + ".png")
        print(f"wrote {stem}.md, {stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
