"""CPU machine: commit a GPU session's results (see docs/gpu.md).

    .venv/bin/python scripts/gpu_report.py <folder with session.json and profile-<kind>.json>

1. merges the session's profile into einsat/gpu/profiles/<kind>.json (newer entries win);
2. predicts each end-to-end workload with `MeasuredCost` (measured per-op times, the
   calibrated roofline for what the profile lacks) and with the calibrated roofline alone, and
   writes them beside the measured times to benchmarks/results/gpu_runtime.{json,md}: einsat's
   CUDA-graph time against PyTorch eager (target: at most 1.2x) and predicted against measured
   (target: within 25%).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.workloads import build  # noqa: E402
from einsat.extract.profile_db import PROFILES_DIR, ProfileDB  # noqa: E402
from einsat.extract.profiled import CalibratedRoofline, MeasuredCost  # noqa: E402

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
    db.save(path)
    return db, path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
    with open(os.path.join(args.folder, "session.json")) as f:
        session = json.load(f)
    db, path = merge_profile(args.folder)
    print(f"{path}: {len(db)} entries")
    cost = MeasuredCost(db)
    roof = CalibratedRoofline.fit(db)
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
    with open(os.path.join(args.out, "gpu_runtime.json"), "w") as f:
        json.dump({"device": device, "session": session.get("started"), "workloads": rows}, f, indent=1)
    lines = [f"# einsat's GPU runtime on {device.get('name')} ({session.get('started')})", "",
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
    with open(os.path.join(args.out, "gpu_runtime.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
