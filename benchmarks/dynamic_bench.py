"""One file for every size (issue #40): einsat optimizes a model with dynamic axes once, and the file
it writes is timed against the model at several sizes on onnxruntime CPU.

Models (their dynamic axes kept; no `--input-shape`):

- the project's fresh exports with dynamic axes (`scripts/export_peers.py --dynamic`, in
  `.peers-cache/`): BERT and GPT-2 (batch, sequence) and EfficientNet-B0 (batch), 4 layers, by
  the legacy (TorchScript) and dynamo exporters;
- the bundled Llama and Qwen2 exports of `tests/data/models` (prefill: batch, sequence; decode:
  batch, past length), both exporters, their stripped weights filled with seeded random values.

Tools: `einsat_default` (`einsat.optimize(graph, shapes=SIZES)`, the default cost) and
`einsat_cpu` (`cost="cpu"`), each given the sizes below as the sizes to cost at. A tool that
refuses a model has the reason in its row.

Each written file is checked to keep the input's `dim_param`s, then run beside the model by
onnxruntime CPU sessions (`ORT_ENABLE_ALL`, sequential, no spin-waiting) at every size, at 1 and 2
intra-op threads, in interleaved rounds (`einsat.runtime.profiler.interleaved`): the speed-up is
the median of the per-round ratios model time / file time with its 10th-90th percentile spread,
all **measured**; outputs are compared at each size. einsat's per-size figures from its report
are listed apart, marked **modeled**.

    .venv/bin/python -m benchmarks.dynamic_bench            # all; writes results/dynamic.{json,md}
    .venv/bin/python -m benchmarks.dynamic_bench --only bert_legacy_dynamic --tools einsat_default
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from benchmarks.meta import ROOT, meta_line, run_meta
from benchmarks.peers_bench import feeds as peers_feeds
from benchmarks.peers_bench import rounds, session  # the same sessions and inputs as the peers bench

RESULTS = ROOT / "benchmarks" / "results"
CACHE = ROOT / ".peers-cache"
BUNDLED = ROOT / "tests" / "data" / "models"
EXPORTS = [f"{m}_{e}_dynamic" for m in ("bert", "gpt2", "efficientnet") for e in ("legacy", "dynamo")]
LLMS = [f"hf_{m}_{p}_{e}" for m in ("llama", "qwen2") for p in ("prefill", "decode") for e in ("dynamo", "legacy")]
TOOLS = ("einsat_default", "einsat_cpu")
THREADS = (1, 2)
# the sizes optimized for and timed at, per symbol set: a short and a long prompt at batch 1, a batch
SIZES = {
    ("batch", "sequence"): [{"batch": 1, "sequence": 16}, {"batch": 1, "sequence": 128}, {"batch": 4, "sequence": 64}],
    ("batch", "past_sequence"): [{"batch": 1, "past_sequence": 16}, {"batch": 1, "past_sequence": 255},
                                 {"batch": 4, "past_sequence": 64}],
    ("batch",): [{"batch": 1}, {"batch": 4}, {"batch": 8}],
}


def models(only: list[str] | None) -> list[tuple[str, Path]]:
    out = [(n, CACHE / f"{n}.onnx") for n in EXPORTS] + [(n, BUNDLED / f"{n}.onnx") for n in LLMS]
    return [(n, p) for n, p in out if not only or n in only]


def source(name: str, path: Path, work: Path) -> Path:
    """The model as the tools read it: a cached export as it is, a bundled one with its weights filled."""
    if path.parent == CACHE:
        return path
    from einsat.ir.onnx.weights import fill_random_weights

    out = work / f"{name}.onnx"
    onnx.save(fill_random_weights(onnx.load(str(path)), seed=0), str(out))
    return out


def dim_params(model: onnx.ModelProto) -> dict[str, list]:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}


def symbols_of(model: onnx.ModelProto) -> tuple[str, ...]:
    names = {d for dims in dim_params(model).values() for d in dims if isinstance(d, str)}
    return tuple(s for s in ("batch", "sequence", "past_sequence") if s in names)


def sizes_of(model: onnx.ModelProto) -> list[dict[str, int]]:
    """The sizes to optimize for and time at; `total_sequence` (a legacy decode export's mask
    length) follows the past length."""
    sizes = [dict(s) for s in SIZES[symbols_of(model)]]
    names = {d for dims in dim_params(model).values() for d in dims if isinstance(d, str)}
    for s in sizes:
        if "total_sequence" in names:
            s["total_sequence"] = s["past_sequence"] + 1
    return sizes


def feeds(model: onnx.ModelProto, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs at `sizes` (the peers bench's inputs: masks all ones, token types zeros, token ids)."""
    return peers_feeds(model, seed, sizes)


def run_einsat(tool: str, src: Path, out: Path, sizes: list[dict[str, int]], budget: float) -> dict:
    """Optimize `src` (its dims symbolic) for `sizes` with `tool`'s cost; write `out`."""
    import einsat

    kwargs = {"cost": "cpu", "measure": einsat.Measure(threads=2)} if tool == "einsat_cpu" else {}
    shapes: dict[str, list[int]] = {}
    for s in sizes:
        for k, v in s.items():
            if k != "total_sequence" and v not in shapes.setdefault(k, []):
                shapes[k].append(v)
    t0 = time.perf_counter()
    result = einsat.optimize(str(src), load=einsat.Load(sizes=shapes), budget=budget, **kwargs)
    seconds = time.perf_counter() - t0
    result.save(out)
    report = result.report
    per_size = [{"sizes": r["sizes"], "before_us": r["cost_before"], "after_us": r["cost_after"]}
                for r in report.sizes or [] if "cost_before" in r]
    return {"seconds": seconds, "kept_input": report.kept_input, "given": given_text(report),
            "modeled_per_size": per_size, "probe": report.probe,
            "verified": [(r["sizes"], r.get("verification")) for r in report.sizes or []],
            "modeled_speedup": None if report.kept_input or not report.cost_after else
            report.cost_before / report.cost_after, "model": str(report.model)}


def given_text(report) -> str | None:
    """What `einsat.pipeline.given` did (cost "cpu"): the given file written unchanged, or einsat's
    writing measured against it, in a few words; None when the two files were not compared."""
    g = report.given
    if not g:
        return None
    if not g["compared"]:
        return f"not timed against the given file ({g['why']})"
    return "the given file written unchanged" if g["kept"] else "einsat's file written (not slower than the given one)"


def compare(src: Path, files: dict[str, Path], sizes: list[dict], reps: int) -> dict:
    """Per size: every file's outputs against the model's, and per thread count the interleaved
    timing of the model and every file (the ratios model / file)."""
    from einsat.runtime.profiler import interleaved, wall_runner

    model = onnx.load(str(src), load_external_data=False)
    out = []
    for k, s in enumerate(sizes):
        x = feeds(model, s, seed=k)
        row: dict = {"sizes": s, "error": {}, "threads": {}}
        base = session(src, 1)
        want = base.run(None, x)
        scale = max(float(np.abs(w).max()) for w in want) or 1.0
        for tool, path in files.items():
            got = session(path, 1).run([o.name for o in base.get_outputs()], x)
            row["error"][tool] = max(float(np.abs(g - w).max()) for g, w in zip(got, want)) / scale
        for th in THREADS:
            sessions = {"model": session(src, th), **{t: session(p, th) for t, p in files.items()}}
            runners = {t: wall_runner(lambda s=ss: s.run(None, x)) for t, ss in sessions.items()}
            round_us = sum(run() for run in runners.values())
            times = interleaved(runners, rounds(reps, round_us, 4.0, 41), warmup=1)
            row["threads"][th] = {"model_us": float(np.median(times["model"]))}
            for t in files:
                r = np.array(times["model"]) / np.array(times[t])
                row["threads"][th][t] = {"ratio": float(np.median(r)), "p10": float(np.percentile(r, 10)),
                                         "p90": float(np.percentile(r, 90))}
        out.append(row)
    return out


def bench_model(name: str, path: Path, work: Path, tools: list[str], budget: float, reps: int) -> dict:
    row: dict = {"name": name, "tools": {}}
    try:
        src = source(name, path, work)
        model = onnx.load(str(src), load_external_data=False)
        sizes = sizes_of(model)
        row["dim_params"] = dim_params(model)
    except Exception as e:  # noqa: BLE001 - the row says why, the others go on
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return row
    files = {}
    for tool in tools:
        out = work / f"{name}.{tool}.onnx"
        try:
            info = run_einsat(tool, src, out, sizes, budget)
            written = onnx.load(str(out), load_external_data=False)
            info["keeps_dim_params"] = dim_params(written) == {k: v for k, v in row["dim_params"].items()
                                                               if k in dim_params(written)}
            files[tool] = out
        except Exception as e:  # noqa: BLE001
            info = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        row["tools"][tool] = info
        print(f"  {name} {tool}: {info.get('error') or f'{info['seconds']:.1f} s'}", flush=True)
    if files:
        row["sizes"] = compare(src, files, sizes, reps)
    return row


def fmt(r: dict | None) -> str:
    return "–" if not r else f"{r['ratio']:.3f}x ({r['p10']:.2f}-{r['p90']:.2f})"


def write(rows: list[dict], meta: dict, tools: list[str], name: str = "dynamic") -> None:
    (RESULTS / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["# One file for every size: einsat on models with dynamic axes (`python -m benchmarks.dynamic_bench`)", "",
             meta_line(meta), "",
             "Measured: each speed-up is the median over interleaved rounds of the per-round ratio model time / "
             "file time on onnxruntime CPU (`ORT_ENABLE_ALL`, no spin-waiting), 10th-90th percentile in brackets, "
             "> 1 is faster than the model. Modeled: only the columns so named (einsat's report, per size). "
             "Error: max |file - model| over max |model| at that size.", ""]
    lines += ["## Per model and size (measured at 1 / 2 threads)", "",
              "| model | sizes | model ms (1t / 2t) | " + " | ".join(tools) + " | error | modeled (default) |",
              "|---|---|---|" + "---|" * len(tools) + "---|---|"]
    for row in rows:
        if row.get("error"):
            lines.append(f"| {row['name']} | – | {row['error']} |" + " |" * (len(tools) + 2))
            continue
        tools_info = row["tools"]
        modeled = {json.dumps({k: v for k, v in m["sizes"].items() if k != "total_sequence"}, sort_keys=True): m
                   for m in (tools_info.get("einsat_default", {}).get("modeled_per_size") or [])}
        for s in row.get("sizes", []):
            size = ", ".join(f"{k} {v}" for k, v in s["sizes"].items() if k != "total_sequence")
            ms = " / ".join(f"{s['threads'][th]['model_us'] / 1e3:.2f}" for th in THREADS)
            cells = [" / ".join(fmt(s["threads"][th].get(t)) for th in THREADS) for t in tools]
            err = ", ".join(f"{t} {e:.1e}" for t, e in s["error"].items())
            m = modeled.get(json.dumps({k: v for k, v in s["sizes"].items() if k != "total_sequence"}, sort_keys=True))
            mod = f"{m['before_us'] / m['after_us']:.3f}x" if m and m.get("after_us") else "–"
            lines.append(f"| {row['name']} | {size} | {ms} | " + " | ".join(cells) + f" | {err} | {mod} |")
    lines += ["", "## Per tool: what einsat did", "", "| model | tool | seconds | result | keeps dim_params |",
              "|---|---|---|---|---|"]
    for row in rows:
        for t, info in row.get("tools", {}).items():
            if info.get("error"):
                lines.append(f"| {row['name']} | {t} | – | {info['error']} | – |")
            else:
                what = "input returned" if info["kept_input"] else (
                    f"modeled {info['modeled_speedup']:.3f}x" if info.get("modeled_speedup") else "optimized")
                what += f"; {info['given']}" if info.get("given") else ""
                lines.append(f"| {row['name']} | {t} | {info['seconds']:.1f} | {what} | "
                             f"{'yes' if info.get('keeps_dim_params') else 'NO'} |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--tools", nargs="*", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--budget", type=float, default=60.0, help="einsat's budget per run (s)")
    parser.add_argument("--results", default="dynamic",
                        help="the results files' name in benchmarks/results (default dynamic: .md and .json)")
    parser.add_argument("--reps", type=int, default=9, help="the fewest interleaved rounds per size and thread count")
    args = parser.parse_args()
    meta = run_meta(tools=args.tools, budget=args.budget)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models(args.only):
            print(name, flush=True)
            rows.append(bench_model(name, path, Path(tmp), args.tools, args.budget, args.reps))
            write(rows, meta, args.tools, args.results)
    print((RESULTS / f"{args.results}.md").read_text())


if __name__ == "__main__":
    main()
