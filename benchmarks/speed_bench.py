"""Where the optimizer's own time goes, at default settings (issue #39 item 1).

    python -m benchmarks.speed_bench [--timeout 600] [--extra DIR ...] [MODEL ...]

Each model runs in a fresh process (its imports, caches and memory its own) through
`einsat.optimize` with every setting at its default, as a user's first run is: the default cost,
no budget, the default limits. Recorded per model: its nodes; the wall time of the run and of
each phase the report times (load, reference, saturate, extract, verify, partition, rebind, ...);
the e-graph's size and why saturation stopped (by work: saturated, node or round limit; or by
the clock); the extraction's method, status and seconds; a partitioned run's pieces, how many
were optimized and how many reused; the verification; and whether every phase stopped by work.

Models: every file in tests/data/models (inputs fixed as the table below says, weights random)
and, with `--extra DIR`, every `.onnx` file there whose inputs are static (the peers benchmark's
fresh exports in `.peers-cache/`: T5, Whisper, ViT, Llama, ...), and with `--workload NAME` a
registered workload at its published sizes (`llama_stack`: 32 Llama layers). Results:
`benchmarks/results/speed.json` and `speed.md`, headed by `benchmarks.meta.run_meta`. Times are
wall seconds on the named machine: compare rows of one run, not runs of different days.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.meta import meta_line, run_meta

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
BUNDLED = ROOT / "tests" / "data" / "models"
TEXT = (1, 32)          # batch 1, 32 tokens
PAST = 16               # a decode step after 16 cached tokens
IMAGE = (1, 3, 224, 224)

WORKLOAD = "workload:"  # a model path naming a registered workload instead of a file

# the clock-ended stops (everything else is an end by work)
CLOCK = ("time limit", "time_limit", "timeout", "interrupted", "memory limit")


def bundled_shapes(path: Path) -> dict:
    """input_shapes for a bundled model: one size per symbol (`read.shapes_for_dims`)."""
    import onnx

    from einsat.ir.onnx.read import shapes_for_dims
    model = onnx.load(str(path), load_external_data=False)
    dims = {"batch": 1, "sequence": TEXT[1], "past_sequence": PAST, "total_sequence": PAST + 1}
    try:
        shapes = shapes_for_dims(model, {k: v for k, v in dims.items() if k in _symbols(model)})
    except Exception:  # noqa: BLE001 - an unknown symbol: leave the model's own shapes
        shapes = {}
    for vi in model.graph.input:
        d = [x.dim_param or x.dim_value for x in vi.type.tensor_type.shape.dim]
        if vi.name == "pixel_values" and any(isinstance(x, str) for x in d):
            shapes[vi.name] = IMAGE
    return shapes


def _symbols(model) -> set[str]:
    from einsat.ir.dims import symbols_of
    from einsat.ir.onnx.read import input_dims
    return {s for d in input_dims(model.graph).values() if d for x in d for s in symbols_of(x)}


def run_one(path: str, shapes: dict) -> dict:
    """One default run of `path` in this process: the row of the table."""
    import einsat
    t0 = time.perf_counter()
    if path.startswith(WORKLOAD):  # a registered workload (benchmarks.workloads) at its published sizes
        from benchmarks.workloads import build
        g = build(path[len(WORKLOAD):])
    else:
        g = einsat.load_onnx(path, fill_weights="random", input_shapes=shapes or None)
    load_s = time.perf_counter() - t0
    t = time.perf_counter()
    result = einsat.optimize(g)
    wall = time.perf_counter() - t
    r = result.report
    row = {"nodes": len(g.nodes), "load_s": load_s, "wall_s": wall,
           "phases": {k: float(v) for k, v in r.times.items()},
           "cost_before": r.cost_before, "cost_after": r.cost_after, "speedup_modeled": r.speedup,
           "verified": r.verified, "proved": r.proved}
    s = r.saturation
    if s is not None:
        row["saturation"] = {"enodes": s.enodes, "eclasses": s.eclasses, "stop": s.stop_reason,
                             "stop_text": s.stop_text, "iterations": s.iterations}
    e = r.extraction
    row["extraction"] = {"method": e.method, "status": e.status, "seconds": e.seconds, "gap": e.gap}
    p = r.partition
    if p is not None:
        stops = sorted({x.stop_reason or "" for x in p.pieces} - {""})
        row["partition"] = {"pieces": len(p.pieces), "optimized": p.templates, "reused": p.cache_hits,
                            "piece_stops": stops}
    row["by_work"] = by_work(row)
    return row


def by_work(row: dict) -> bool:
    """Whether every phase of the run stopped by its work bound (no clock fired)."""
    texts = [row.get("saturation", {}).get("stop", ""), row.get("extraction", {}).get("status", "")]
    texts += row.get("partition", {}).get("piece_stops", [])
    return not any(c in (t or "").lower() for t in texts for c in CLOCK)


def models(extra: list[Path], workloads: list[str] = ()) -> dict[str, tuple[str, dict]]:
    out = {p.stem: (str(p), bundled_shapes(p)) for p in sorted(BUNDLED.glob("*.onnx"))}
    out |= {f"workload/{w}": (WORKLOAD + w, {}) for w in workloads}
    for d in extra:
        for p in sorted(Path(d).glob("*.onnx")):
            if _static(p):  # the peers cache also holds symbolic exports (the dynamic bench's)
                out[f"{p.parent.name}/{p.stem}"] = (str(p), {})
    return out


def _static(path: Path) -> bool:
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    return not any(d.dim_param or not d.HasField("dim_value") for vi in model.graph.input if vi.name not in weights
                   for d in vi.type.tensor_type.shape.dim)


def child(name: str, path: str, shapes: dict, timeout: float) -> dict:
    code = ("import json, sys; from benchmarks.speed_bench import run_one; "
            f"print('ROW', json.dumps(run_one({path!r}, {shapes!r})))")
    t = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s", "wall_s": time.perf_counter() - t}
    for line in done.stdout.splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:300], "wall_s": time.perf_counter() - t}


PHASES = ("reference", "saturate", "extract", "verify", "partition", "optimize", "rebind", "stitch", "check")


def table(rows: dict[str, dict]) -> str:
    head = ("| model | nodes | load s | run s | " + " | ".join(PHASES) + " | e-nodes | saturation stop | "
            "extraction | pieces (optimized/reused) | by work | modeled |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | | | {r['wall_s']:.1f} | " + " | ".join("" for _ in PHASES)
                         + f" | | error: {r['error']} | | | | |")
            continue
        ph = r["phases"]
        s, e, p = r.get("saturation", {}), r["extraction"], r.get("partition")
        lines.append(
            f"| {name} | {r['nodes']} | {r['load_s']:.1f} | {r['wall_s']:.1f} | "
            + " | ".join(f"{ph[k]:.1f}" if k in ph else "" for k in PHASES)
            + f" | {s.get('enodes', '')} | {s.get('stop', '')} | {e['method']} {e['status']} ({e['seconds']:.1f} s) | "
            + (f"{p['pieces']} ({p['optimized']}/{p['reused']})" if p else "") + " | "
            + ("yes" if r["by_work"] else "**no**") + f" | {r['speedup_modeled']:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="model names (default: all)")
    ap.add_argument("--extra", action="append", default=[], type=Path, help="a folder of more .onnx files")
    ap.add_argument("--workload", action="append", default=[],
                    help="a registered workload (benchmarks.workloads, e.g. llama_stack: 32 Llama layers) at its "
                         "published sizes, named workload/NAME")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    args = ap.parse_args(argv)
    found = models(args.extra, args.workload)
    names = args.models or list(found)
    out_json = RESULTS / "speed.json"
    rows = json.loads(out_json.read_text())["rows"] if out_json.exists() and args.models else {}
    meta = run_meta()  # before the runs: its load average is the one "at the start"
    for name in names:
        path, shapes = found[name]
        print(f"{name} ...", flush=True)
        rows[name] = child(name, path, shapes, args.timeout)
        r = rows[name]
        print(f"  {r.get('wall_s', 0):.1f} s" + (f"  error: {r['error']}" if "error" in r else
                                                 f"  by work: {r['by_work']}"), flush=True)
    out_json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (RESULTS / "speed.md").write_text(
        "# The optimizer's own time at default settings (benchmarks/speed_bench.py)\n\n"
        f"{meta_line(meta)}\n\nWall seconds per phase (measured, this machine; the modeled column is the "
        "default cost model's speed-up). A run stops by work when saturation ends saturated or at its node "
        "or round limit and the extraction ends optimal or at its work bound; any clock ending is a **no**.\n\n"
        + table(rows) + "\n")
    print(f"wrote {RESULTS / 'speed.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
