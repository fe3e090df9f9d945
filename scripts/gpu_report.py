"""CPU machine: commit a GPU session's results (see docs/gpu.md).

    .venv/bin/python scripts/gpu_report.py <folder with session.json and profile-<kind>.json>

1. merges the session's profile into einsat/gpu/profiles/<kind>.json (newer entries win), with
   the roofline fitted to it kept in the file (`profiled.calibrated_fallback`);
2. predicts each end-to-end workload with `MeasuredCost` (measured per-op times, the
   calibrated roofline for what the profile lacks) and with the calibrated roofline alone, and
   writes them beside the measured times to benchmarks/results/gpu_runtime.{json,md}: einsat's
   CUDA-graph time against PyTorch eager (target: at most 1.2x) and predicted against measured
   (target: within 25%);
3. the `check` phase's verdicts (`einsat check` on each optimized program: kept or not, times,
   rounds) go into einsat/gpu/profiles/<kind>.verdicts.json beside the profile (newer win, by
   workload) and into the results' table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks.workloads import build  # noqa: E402
from einsat.cost.profile_db import PROFILES_DIR, ProfileDB  # noqa: E402
from einsat.cost.profiled import MeasuredCost, calibrated_fallback  # noqa: E402
from einsat.ir.signature import atomic_write_json  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")


def merge_profile(folder: str) -> tuple[ProfileDB, str]:
    found = [f for f in os.listdir(folder) if f.startswith("profile-") and f.endswith(".json")]
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one profile-<kind>.json, found {found}")
    new = ProfileDB.load(os.path.join(folder, found[0]))
    kind = new.device.get("kind", found[0][len("profile-"):-len(".json")])
    path = os.path.join(PROFILES_DIR, f"{kind}.json")
    db = ProfileDB.load(path) if os.path.exists(path) else ProfileDB()
    db.merge(new)
    db.device, db.method = new.device, new.method
    calibrated_fallback(db, kind)  # kept in the file: `cost=kind` rebuilds its fallback instead of fitting it
    db.save(path)
    return db, path


def optimized_table(optimized: dict) -> list[str]:
    """The einsat-optimized programs against their inputs, measured on the GPU (the session's
    `optimized` phase), beside the modeled speed-up and MeasuredCost's predictions."""
    lines = ["", "## einsat-optimized programs against their inputs, measured", "",
             "Each workload optimized on a CPU machine with `cost=\"h100\"` (the measured profile; "
             "`scripts/export_optimized.py`), rebuilt on the GPU machine bit for bit, both programs as CUDA "
             "graphs: rounds alternating which runs first, each round the median of its replays; speed-up = "
             "median of the per-round ratios, [min, max] over rounds; predictions by MeasuredCost on the "
             "session's profile.", "",
             "| workload | nodes | input ms | optimized ms | measured speed-up [min, max] | faster rounds | "
             "modeled speed-up | predicted input / optimized ms | rel err |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in optimized.items():
        if not isinstance(r, dict) or "speedup" not in r:
            why = r.get("error") or r.get("skipped") if isinstance(r, dict) else r
            lines.append(f"| {name} | {why} | | | | | | | |")
            continue
        pred = (f"{r['predicted_input_ms']:.3f} / {r['predicted_optimized_ms']:.3f}"
                if "predicted_input_ms" in r else "–")
        lines.append(f"| {name} | {r['nodes_before']} → {r['nodes_after']} | {r['input_ms']:.3f} | "
                     f"{r['optimized_ms']:.3f} | {r['speedup']:.2f}× [{r['speedup_min']:.2f}, {r['speedup_max']:.2f}] "
                     f"| {r['faster_rounds']}/{r['rounds']} | {r['modeled_speedup']:.2f}× (modeled) | {pred} | "
                     f"{r['optimized_rel_error']:.1e} |")
    done = [r for r in optimized.values() if isinstance(r, dict) and "speedup" in r]
    if done:
        geo = float(np.exp(np.mean(np.log([r["speedup"] for r in done]))))
        lines += ["", f"Geomean measured speed-up over {len(done)} workloads: {geo:.3f}×; slowest "
                      f"{min(r['speedup'] for r in done):.3f}×."]
        errors = [r[f"predicted_{k}_ms"] / r[f"{k}_ms"] - 1 for r in done for k in ("input", "optimized")
                  if f"predicted_{k}_ms" in r]
        if errors:
            within = sum(abs(e) <= 0.25 for e in errors)
            lines.append(f"MeasuredCost's prediction within 25% of the measured time: {within}"
                         f" of {len(errors)} programs (inputs and optimized), median error "
                         f"{float(np.median(np.abs(errors))):.0%}.")
    return lines


def merge_verdicts(folder: str, kind: str) -> str | None:
    """The session's verdicts-<kind>.json merged into einsat/gpu/profiles/<kind>.verdicts.json
    (by workload; the session's win); None when the session has none."""
    new_path = os.path.join(folder, f"verdicts-{kind}.json")
    if not os.path.exists(new_path):
        return None
    with open(new_path) as f:
        new = json.load(f)
    path = os.path.join(PROFILES_DIR, f"{kind}.verdicts.json")
    old = {}
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    atomic_write_json(path, dict(sorted({**old, **new}.items())))
    return path


def check_table(check: dict) -> list[str]:
    """`einsat check`'s verdicts (the session's `check` phase): which program each run keeps."""
    lines = ["", "## Never slower: `einsat check` on each optimized program", "",
             "Both programs as CUDA graphs, outputs compared, timed side by side by `cost=\"cpu\"`'s rule "
             "(interleaved rounds, Wilcoxon's signed-rank test and a 2% margin, a verdict of faster confirmed on "
             "freshly compiled programs); the optimized program is kept only when faster.", "",
             "| workload | verdict | kept | input ms [p10, p90] | optimized ms [p10, p90] | speed-up | faster rounds "
             "| p | stale entries re-timed |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in check.items():
        c = r.get("comparison") if isinstance(r, dict) else None
        if not c:
            what = r.get("verdict", r.get("error", r.get("skipped"))) if isinstance(r, dict) else r
            lines.append(f"| {name} | {what} | {r.get('kept', '-') if isinstance(r, dict) else '-'} |")
            continue
        (b0, b1), (c0, c1) = c["baseline_spread_ms"], c["candidate_spread_ms"]
        lines.append(f"| {name} | {r['verdict']} | {r['kept']} | {c['baseline_ms']:.3f} [{b0:.3f}, {b1:.3f}] | "
                     f"{c['candidate_ms']:.3f} [{c0:.3f}, {c1:.3f}] | {c['speedup']:.2f}× | {c['wins']}/{c['rounds']} "
                     f"| {c['p_value']:.3f} | {len(r.get('reprofiled', []))} |")
    judged = [r for r in check.values() if isinstance(r, dict) and r.get("comparison")]
    if judged:
        kept = [r for r in judged if r["kept"] == "optimized"]
        lines += ["", f"{len(kept)} of {len(judged)} optimized programs kept; the others return their input."]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
    with open(os.path.join(args.folder, "session.json")) as f:
        session = json.load(f)
    db, path = merge_profile(args.folder)
    print(f"{path}: {len(db)} entries")
    roof = calibrated_fallback(db, db.device.get("kind", "gpu"))  # kept in the profile by merge_profile
    cost = MeasuredCost(db, fallback=roof)
    rows = {}
    for name, r in session["phases"].get("e2e", {}).items():
        if not isinstance(r, dict) or "einsat_graph_ms" not in r:
            rows[name] = r
            continue
        g = build(name)
        predicted = cost.graph_cost(g) / 1e3
        row = {k: r.get(k) for k in ("einsat_graph_ms", "einsat_eager_ms", "torch_eager_ms", "rel_error",
                                     "ratio_graph_vs_torch")}
        row.update(profiled_ms=predicted, profiled_ratio=predicted / r["einsat_graph_ms"],
                   roofline_ms=roof.graph_cost(g) / 1e3, coverage=cost.coverage(g))
        row["roofline_ratio"] = row["roofline_ms"] / r["einsat_graph_ms"]
        rows[name] = row
    device = db.device
    os.makedirs(args.out, exist_ok=True)
    from benchmarks.meta import run_meta

    meta = run_meta()  # the checkout reporting the session: the tree the session ran was copied from it
    with open(os.path.join(args.out, "gpu_runtime.json"), "w") as f:
        json.dump({"meta": meta, "device": device, "session": session.get("started"), "workloads": rows,
                   "optimized": session["phases"].get("optimized") or {},
                   "check": session["phases"].get("check") or {}}, f, indent=1, default=str)
    lines = [f"# einsat's GPU runtime on {device.get('name')} ({session.get('started')})", "",
             f"- commit `{meta['commit']}`{' (with uncommitted changes)' if meta['dirty'] else ''}: the checkout "
             f"that reported the session (`scripts/gpu_report.py`, {meta['date']}), whose tree the session ran", "",
             "Unoptimized programs, fp32 (TF32 off), einsat's CUDA-graph replay vs PyTorch eager (same weights "
             "and inputs); predictions by MeasuredCost (measured per-op warm times) and by the roofline "
             "calibrated on the same profile.", "",
             "| workload | einsat graph ms | torch eager ms | einsat/torch | MeasuredCost ms | predicted/measured "
             "| calibrated roofline ms | coverage |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        if "profiled_ms" not in r:
            lines.append(f"| {name} | {r} |")
            continue
        lines.append(f"| {name} | {r['einsat_graph_ms']:.3f} | {r['torch_eager_ms'] or float('nan'):.3f} | "
                     f"{r['ratio_graph_vs_torch'] or float('nan'):.2f} | {r['profiled_ms']:.3f} | "
                     f"{r['profiled_ratio']:.2f} | {r['roofline_ms']:.3f} | {r['coverage']:.0%} |")
    optimized = session["phases"].get("optimized") or {}
    if optimized:
        lines += optimized_table(optimized)
    check = session["phases"].get("check") or {}
    if check:
        lines += check_table(check)
    verdicts = merge_verdicts(args.folder, device.get("kind", "gpu"))
    if verdicts:
        print(f"{verdicts}: einsat check's verdicts")
    with open(os.path.join(args.out, "gpu_runtime.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
