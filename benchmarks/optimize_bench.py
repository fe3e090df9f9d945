"""`einsat.optimize` on the Tensat/TASO workloads: modeled speedups, e-graph sizes, times.

    python -m benchmarks.optimize_bench [--extractor ilp|greedy] [--cost h100] [WORKLOAD ...]

Each workload is optimized with the default rules and limits; the run records the modeled
cost before and after (the cost model's µs), the op counts, the e-graph's size and stop
reason, the extraction's status and gap, the numeric verification and the time per phase.
Results go to `benchmarks/results/optimize.json` and `.md`. The target: every workload cheaper
than its input and optimized in under 30 s on a two-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.meta import meta_line, run_meta
from benchmarks.workloads import build
from benchmarks.workloads.inception import inception_a
from benchmarks.workloads.layers import Net
from einsat.cost.models import DEFAULT_COST

RESULTS = Path(__file__).parent / "results"


def inception_module(batch: int = 1):
    """The first Inception-v3 "A" module on its input [N, 192, 35, 35] (pool features 32)."""
    net = Net("inception_v3_module")
    x = net.b.input("x", (batch, 192, 35, 35))
    return net.build(inception_a(net, x, 32))


WORKLOADS = {
    "bert": ("BERT attention layers [64, 1024], 16 heads, 8 layers", lambda: build("bert_tensat")),
    "nasrnn": ("NasRNN, 5 steps, hidden 512", lambda: build("nasrnn")),
    "resnext50": ("ResNeXt-50 (16 blocks, 32 groups), 224×224", lambda: build("resnext50")),
    "inception_module": ("Inception-v3 A module on [1, 192, 35, 35]", inception_module),
    "squeezenet": ("SqueezeNet 1.1 (8 fire modules), 224×224", lambda: build("squeezenet")),
    "vgg19": ("VGG-19, 224×224", lambda: build("vgg19")),
}


def bench(name: str, extractor: str, cost: str) -> dict:
    import einsat
    from einsat.egraph import Limits

    description, builder = WORKLOADS[name]
    graph = builder()
    t0 = time.perf_counter()
    result = einsat.optimize(graph, cost=cost, limits=Limits(extractor=extractor))
    wall = time.perf_counter() - t0
    r = result.report
    x, s, v = r.extraction, r.saturation, r.verification
    return {
        "workload": name, "description": description, "nodes_before": sum(r.ops_before.values()),
        "nodes_after": sum(r.ops_after.values()), "ops_before": r.ops_before, "ops_after": r.ops_after,
        "cost_before_us": r.cost_before, "cost_after_us": r.cost_after, "speedup": r.speedup,
        "reduction": r.reduction, "enodes": s.enodes, "eclasses": s.eclasses,
        "egglog_rows": s.egglog_nodes, "node_limit": s.node_limit, "stop_reason": s.stop_reason,
        "iterations": s.iterations, "extraction": x.method, "extraction_status": x.status,
        "gap": x.gap, "starts": x.starts, "verification_status": v.status,
        # an identical program is not run again: no error or tolerance was measured (null)
        "verification_error": None if v.status == "identical" else v.max_error,
        "verification_tolerance": None if v.status == "identical" else v.tolerance, "times_s": r.times, "wall_s": wall,
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# einsat optimize on the Tensat/TASO workloads ({meta['cost']}, {meta['extractor']})", "",
             *([meta_line(meta), ""] if "commit" in meta else []),
             (f"Machine: {meta['machine']}; einsat's default rules and limits. Costs are the "
              f"{meta['cost']} cost model's modeled time (µs)."), "",
             ("| workload | nodes | modeled cost (µs) | speedup | e-nodes / e-classes | stop | extraction | "
              "time (s): saturate / extract / verify / total |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["times_s"]
        gap = "" if r["gap"] is None else f", gap {r['gap']:.1%}"
        lines.append(
            f"| {r['workload']} | {r['nodes_before']} → {r['nodes_after']} | "
            f"{r['cost_before_us']:,.1f} → {r['cost_after_us']:,.1f} | {r['speedup']:.3f}× | "
            f"{r['enodes']:,} / {r['eclasses']:,} | {r['stop_reason']} | {r['extraction_status']}{gap} | "
            f"{t['saturate']:.1f} / {t['extract']:.1f} / {t.get('verify', 0):.1f} / {t['total']:.1f} |")
    lines += ["", "Op counts that changed:", ""]
    for r in rows:
        changed = {op: (r["ops_before"].get(op, 0), r["ops_after"].get(op, 0))
                   for op in sorted(set(r["ops_before"]) | set(r["ops_after"]))
                   if r["ops_before"].get(op, 0) != r["ops_after"].get(op, 0)}
        text = ", ".join(f"{op} {a}→{b}" for op, (a, b) in changed.items()) or "none"
        lines.append(f"- {r['workload']}: {text}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", help=f"some of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--extractor", default="ilp", choices=("ilp", "greedy"))
    ap.add_argument("--cost", default=DEFAULT_COST, help=f"cost model (default {DEFAULT_COST})")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    rows = []
    for name in args.workloads or list(WORKLOADS):
        row = bench(name, args.extractor, args.cost)
        rows.append(row)
        print(f"{name:>17}: {row['cost_before_us']:9.1f} -> {row['cost_after_us']:9.1f} µs "
              f"({row['speedup']:.3f}x), {row['enodes']:,} e-nodes, {row['stop_reason']}, "
              f"{row['extraction_status']}, {row['times_s']['total']:.1f} s", flush=True)
    meta = run_meta(cost=args.cost, extractor=args.extractor)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "optimize.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    (args.out / "optimize.md").write_text(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
