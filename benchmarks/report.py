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
        return ["–"] * (3 + len(COMPILE_COLUMNS))
    torch_part = gpu.get("pytorch", {})

    def torch_ms(key: str) -> str:
        if "error" in torch_part:
            return ms(torch_part)
        part = torch_part.get(key)
        if part and "timed out" in part.get("error", ""):
            return "compile timed out"
        return ms(part)
    return [ms(gpu.get("einsat")), ms(gpu.get("einsat_optimized")), torch_ms("eager")] + \
        [torch_ms(key) for key, _ in COMPILE_COLUMNS]


# torch.compile's modes in the GPU tables (benchmarks.torch_baseline.COMPILE_MODES; "compile": the
# single max-autotune-no-cudagraphs column of results recorded before both modes were timed)
COMPILE_COLUMNS = (("reduce-overhead", "torch.compile reduce-overhead ms"),
                   ("max-autotune", "torch.compile max-autotune ms"))


def summary(results: dict) -> dict:
    """The CPU run's verdicts: the geomean of the measured speedups on onnxruntime, the slowest,
    the workloads that carry the gain, and how many whole-program predictions are within 15%."""
    rows = [w for w in results["workloads"] if "ort" in w.get("cpu", {})]
    speedups = {w["name"]: w["cpu"]["ort"]["speedup"] for w in rows}
    out: dict = {"workloads": len(results["workloads"]), "measured": len(rows)}
    if speedups:
        out["geomean_speedup"] = math.exp(sum(math.log(v) for v in speedups.values()) / len(speedups))
        out["min_speedup"] = min(speedups.values())
        out["slower_than_0.97"] = sorted(k for k, v in speedups.items() if v < 0.97)
        out["carried_by"] = sorted((k for k, v in speedups.items() if v > 1.03), key=lambda k: -speedups[k])
    preds = [w["cpu"]["prediction"] for w in rows if "prediction" in w["cpu"]]
    if preds:
        within = [p for p in preds if abs(p["input"]["error"]) <= 0.15]
        out["predicted_within_15pct"] = f"{len(within)}/{len(preds)}"
        out["predicted_within_15pct_fraction"] = len(within) / len(preds)
        same = [p["same_run"] for p in preds if p.get("same_run", {}).get("error") is not None]
        if same:
            out["same_run_within_15pct"] = f"{sum(abs(p['error']) <= 0.15 for p in same)}/{len(same)}"
            out["same_run_within_15pct_fraction"] = sum(abs(p["error"]) <= 0.15 for p in same) / len(same)
            out["same_run_median_abs_error"] = sorted(abs(p["error"]) for p in same)[len(same) // 2]
        naive = [p for p in preds if "naive_error" in p["input"] and abs(p["input"]["naive_error"]) <= 0.15]
        out["naive_sum_within_15pct"] = f"{len(naive)}/{len(preds)}"
        out["median_abs_error"] = sorted(abs(p["input"]["error"]) for p in preds)[len(preds) // 2]
    return out


def _kept(opt: dict) -> str:
    """Why einsat returned the input, briefly."""
    kept = opt.get("kept_input")
    if not kept:
        return ""
    if "not measured faster" in kept:
        m = opt.get("measured") or {}
        return (f"input returned: candidate measured {m.get('speedup', 0):.3f}x in optimize's check "
                f"({m.get('wins', '?')}/{m.get('rounds', '?')} rounds faster)")
    return "input returned: " + kept


def _modeled(opt: dict) -> str:
    """The modeled speedup of the extracted candidate (even when the input was returned)."""
    m = opt.get("measured") or {}
    if m.get("predicted_ms") and m["predicted_ms"][1]:
        return f"{m['predicted_ms'][0] / m['predicted_ms'][1]:.2f}×"
    return f"{opt['speedup']:.2f}×" if "speedup" in opt else "–"


def _pct(v) -> str:
    return "–" if v is None else f"{v:+.0%}"


def cpu_markdown(results: dict) -> str:
    """The CPU run: onnxruntime input vs optimized (measured), predictions, weights, PyTorch."""
    meta = results["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    sm = results.get("summary") or summary(results)
    lines = [f"# einsat benchmarks ({meta['kind']} run): measured on onnxruntime", "",
             f"- commit `{meta['commit']}`{' (with uncommitted changes)' if meta.get('dirty') else ''}, "
             f"{meta['date']}",
             f"- machine: {meta['machine']}"
             + (f"; load average {meta['load_average_end']} at the last workload"
                if "load_average_end" in meta else ""),
             f"- versions: {versions}",
             f"- cost model: {meta.get('cost_model', '–')}; onnxruntime CPU, all graph optimizations on, "
             "1 intra-op thread, input and optimized ONNX interleaved in one process", ""]
    if "geomean_speedup" in sm:
        lines += [f"**Measured speedup over the input on onnxruntime: geomean {sm['geomean_speedup']:.3f}x over "
                  f"{sm['measured']} workloads, slowest {sm['min_speedup']:.3f}x"
                  + (f"; below 0.97x: {', '.join(sm['slower_than_0.97'])}" if sm["slower_than_0.97"] else
                     "; none below 0.97x") + ".** "
                  + (f"Carried by: {', '.join(sm['carried_by'])}." if sm["carried_by"] else "No workload above 1.03x."),
                  ""]
    if "predicted_within_15pct" in sm:
        lines += [f"Whole-program prediction of the input (fusion groups as units) within 15% of the measured time: "
                  f"{sm['predicted_within_15pct']} workloads (median |error| {sm['median_abs_error']:.0%}); "
                  f"the naive sum of one-node times: {sm['naive_sum_within_15pct']}. "
                  + (f"With the units timed in the same interleaved rounds as the program (no drift of the "
                     f"machine's load between profiling and measuring): {sm['same_run_within_15pct']} within 15% "
                     f"(median |error| {sm['same_run_median_abs_error']:.0%})."
                     if "same_run_within_15pct" in sm else ""),
                  ""]
    head = ["workload", "nodes", "GFLOP", "e-nodes", "profile: sigs (cached) s", "optimize s",
            "ORT input ms [p10–p90]", "ORT optimized ms [p10–p90]", "measured speedup", "returned",
            "modeled speedup", "predicted input ms (error)", "naive sum error", "same-run prediction error",
            "predicted optimized ms (error)", "weights MB in → out", "torch eager ms", "note"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in results["workloads"]:
        opt = w.get("optimize", {})
        c = w.get("cpu", {})
        if "error" in w and "nodes" not in w:
            lines.append(f"| {w['name']} |" + " |" * (len(head) - 2) + f" **error**: {w['error'][:120]} |")
            continue
        note = (opt.get("error") or c.get("error") or opt.get("skipped") or _kept(opt) or "").replace("|", "/")[:160]
        prof = opt.get("profile") or {}
        ort = c.get("ort", {})
        pred = c.get("prediction", {})

        def ms(part):
            return f"{part['median_ms']:.2f} [{part['p10_ms']:.2f}–{part['p90_ms']:.2f}]" if part else "–"

        torch = c.get("torch", {})
        row = [w["name"], str(w.get("nodes", "–")), _fmt(w.get("gflop"), ".2f"), _fmt(opt.get("enodes"), ","),
               f"{prof['needed']} ({prof['cached']}) {prof['seconds']:.0f}" if prof else "–",
               _fmt(opt.get("times", {}).get("total"), ".1f"), ms(ort.get("input")), ms(ort.get("optimized")),
               f"**{ort['speedup']:.3f}×**" if ort else "–", c.get("returned", "–"),
               _modeled(opt),
               f"{pred['input']['predicted_ms']:.2f} ({_pct(pred['input']['error'])})" if pred else "–",
               _pct(pred["input"].get("naive_error")) if pred else "–",
               _pct(pred["same_run"]["error"]) if pred.get("same_run", {}).get("error") is not None else "–",
               f"{pred['optimized']['predicted_ms']:.2f} ({_pct(pred['optimized']['error'])})" if pred else "–",
               (f"{c['weights_mb']['input']:.1f} → {c['weights_mb']['optimized']:.1f}" if "weights_mb" in c else "–"),
               ms(torch.get("eager")) if "eager" in torch else "–", note]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Measured speedup: the input ONNX's median over the optimized ONNX's, both on onnxruntime in one "
              "process, interleaved rounds; where einsat returned the input (it was not measured faster beyond "
              "noise, or extraction kept it) the file is the input's and the speedup is 1 by construction. "
              "Modeled speedup: the measured cost model's prediction for the extracted candidate. "
              "Predicted: the cost model's whole-program "
              "time (onnxruntime's fusion groups as units + one run call) against the measured median; naive sum: "
              "every node's own one-node time summed. PyTorch eager: the input program interpreted op by op with "
              "PyTorch's kernels on one thread (`benchmarks.torch_baseline --time`)."]
    return "\n".join(lines) + "\n"


def markdown(results: dict) -> str:
    if results["meta"].get("kind") == "cpu" and any("cpu" in w for w in results["workloads"]):
        return cpu_markdown(results)
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
        head += ["einsat GPU ms", "einsat opt. GPU ms", "PyTorch eager ms"] + [h for _, h in COMPILE_COLUMNS]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in results["workloads"]:
        if "error" in w and "nodes" not in w:
            lines.append(f"| {w['name']} | {w.get('source', '')} | | | | | | | | | | | | "
                         f"**error**: {w['error'][:120]} |" + " |" * (3 + len(COMPILE_COLUMNS) if gpu else 0))
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
                     "loop's latencies are in the JSON); PyTorch eager, and torch.compile in the modes "
                     "reduce-overhead (CUDA graphs) and max-autotune (autotuned GEMMs and convolutions, CUDA "
                     "graphs), each compile stopped after 300 s ('compile timed out').")
    return "\n".join(lines) + "\n"


def chart(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if results["meta"].get("kind") == "cpu" and any("ort" in w.get("cpu", {}) for w in results["workloads"]):
        return cpu_chart(results, path, plt)
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
        labels = [("einsat", "einsat"), ("einsat_optimized", "einsat optimized")] + \
            [(key, f"torch.compile {key}") for key, _ in COMPILE_COLUMNS]
        width = 0.8 / len(labels)
        for k, (key, label) in enumerate(labels):
            vals = []
            for w in gpu_rows:
                g = w["gpu"]
                part = g["pytorch"].get(key) if key in dict(COMPILE_COLUMNS) else g.get(key)
                eager = g["pytorch"]["eager"]["median_ms"]
                vals.append(eager / part["median_ms"] if part and "median_ms" in part else 0.0)
            ax.bar([i + (k - (len(labels) - 1) / 2) * width for i in range(len(gpu_rows))], vals, width, label=label)
        ax.set_xticks(range(len(gpu_rows)), [w["name"] for w in gpu_rows], rotation=60)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("speedup over PyTorch eager")
        ax.set_title(f"GPU latency ({results['meta'].get('gpu', '')}, fp32)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cpu_chart(results: dict, path: str, plt) -> None:
    """Measured speedup on onnxruntime per workload (with the modeled one), and the prediction error."""
    rows = [w for w in results["workloads"] if "ort" in w.get("cpu", {})]
    names = [w["name"] for w in rows]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.45 * len(rows)), 9), squeeze=False)
    ax = axes[0][0]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [w["cpu"]["ort"]["speedup"] for w in rows], 0.4, label="measured (onnxruntime)",
           color="#4477aa")
    ax.bar([i + 0.2 for i in x], [w.get("optimize", {}).get("speedup", 0) for w in rows], 0.4,
           label="modeled (measured cost model)", color="#aaaaaa")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.axhline(0.97, color="#cc6677", lw=0.8, ls="--")
    ax.set_xticks(list(x), names, rotation=60, ha="right")
    ax.set_ylabel("speedup over the input")
    ax.set_title(f"einsat on onnxruntime CPU (commit {results['meta']['commit'][:10]})")
    ax.legend()
    ax = axes[1][0]
    errs = [100 * w["cpu"].get("prediction", {}).get("input", {}).get("error", 0) for w in rows]
    naive = [100 * w["cpu"].get("prediction", {}).get("input", {}).get("naive_error", 0) for w in rows]
    ax.bar([i - 0.2 for i in x], errs, 0.4, label="fusion groups as units", color="#228833")
    ax.bar([i + 0.2 for i in x], naive, 0.4, label="naive sum of one-node times", color="#ccbb44")
    for y in (-15, 15):
        ax.axhline(y, color="#cc6677", lw=0.8, ls="--")
    ax.set_xticks(list(x), names, rotation=60, ha="right")
    ax.set_ylabel("prediction error of the input, %")
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
