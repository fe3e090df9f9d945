"""PET's mutation generator on the models PET evaluates: its rounds, its bounds, its cost in time.

    python -m benchmarks.mutate_bench [--cost h100] [WORKLOAD ...]

Each workload (ResNet-18, Inception-v3, CSRNet, BERT; `benchmarks.workloads`) is optimized
with the default schedule, twice, and once with the default schedule less the `pet-mutate`
generator (what `optimize` did before it). The run records each round's counts (subprograms,
mutants, verified, corrected, admitted, memo hits) and seconds, whether both runs with the
generator extracted the same program (determinism), whether every round stayed within
`Limits` (subprograms, verifications: work bounds, no deadline), PET's own seconds and their
share of the optimize time, and the optimize time with and without the generator (the target,
#27: at most 1.5x wherever the generator enters nothing the cost model keeps). Results go to
`benchmarks/results/mutate.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from benchmarks.workloads import build

RESULTS = Path(__file__).parent / "results"
WORKLOADS = ("resnet18", "inception_v3", "csrnet", "bert")


def without_mutation():
    from einsat.egraph.rules import Generator, Schedule
    from einsat.rewrites.schedule import default_schedule
    return Schedule(tuple(p for p in default_schedule().phases
                          if not (isinstance(p, Generator) and p.name == "pet-mutate")))


def timed(graph, cost, rules=None):
    import einsat
    t0 = time.perf_counter()
    result = einsat.optimize(graph, cost=cost, rules=rules)
    return result, time.perf_counter() - t0


def stopped_by(report) -> str:
    """What ended saturation and the ILP: a time limit there makes the program depend on the load."""
    sat = report.saturation.stop_reason if report.saturation is not None else "-"
    return f"{sat} / {report.extraction.status}"


def bench(name: str, cost: str) -> dict:
    from einsat.egraph.session import Limits

    graph = build(name)
    first, t1 = timed(graph, cost)
    second, t2 = timed(graph, cost)
    base, t0 = timed(graph, cost, without_mutation())
    lim = Limits()
    rounds = [r for r in first.report.saturation.rounds if r["generator"] == "pet-mutate"]
    # the bounds the generator enforces by counting (work: no deadline decides a round)
    within = all(r["counts"]["subprograms"] <= lim.subprograms and r["counts"]["verified"] <= lim.verifications
                 for r in rounds)
    pet_s = sum(r["seconds"] for r in rounds)
    return {"workload": name, "model": first.report.model, "nodes": len(graph.nodes), "rounds": rounds,
            "within_limits": within,
            "admitted": sum(r["counts"]["admitted"] for r in rounds),
            "pet_seconds": pet_s, "pet_share": pet_s / t1 if t1 else 0.0,
            "deterministic": str(first.graph) == str(second.graph),
            "stopped_by": [stopped_by(first.report), stopped_by(second.report)],
            "seconds": {"with": min(t1, t2), "without": t0}, "ratio": min(t1, t2) / t0,
            "cost_us": {"before": first.report.cost_before, "with": first.report.cost_after,
                        "without": base.report.cost_after},
            "ops_after": first.report.ops_after}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# PET's mutation generator on PET's models ({meta['cost']}: {meta.get('model', meta['cost'])})", "",
             f"Machine: {meta['machine']}; default rules and limits; optimize time is the faster of two "
             "runs with the generator, against one without it.", "",
             "| workload | nodes | optimize s: with / without (ratio) | PET's rounds s (share of with) | "
             "programs entered | modeled µs: input / with / without | deterministic | within limits |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, c = r["seconds"], r["cost_us"]
        lines.append(f"| {r['workload']} | {r['nodes']} | {s['with']:.1f} / {s['without']:.1f} ({r['ratio']:.2f}x) | "
                     f"{r['pet_seconds']:.2f} ({r['pet_share']:.0%}) | {r['admitted']} | "
                     f"{c['before']:,.1f} / {c['with']:,.1f} / {c['without']:,.1f} | {r['deterministic']} | "
                     f"{r['within_limits']} |")
    from einsat.rewrites.mutate.generate import COUNTS
    lines += ["", "Stopped by (saturation / extraction), each run with the generator: where a time limit "
              "stopped one, the program depends on the machine's load, and the report of that run says so:",
              ""] + [f"- {r['workload']}: " + "; ".join(r["stopped_by"]) for r in rows]
    lines += ["", "The optimize times are wall-clock on a machine shared with other work: the ratio is the "
              "figure to read, PET's share (its rounds' own seconds) the one that load moves least.",
              "", f"Rounds (step: {', '.join(COUNTS)}; seconds). A mutant is verified only when its core "
              "is cheaper than the subprogram under the cost model (the pre-filter); an admitted program "
              "enters only when the cost model keeps it (cheaper than its subprogram: else 'not kept'), and "
              "a round that enters nothing backs off:", ""]
    for r in rows:
        text = "; ".join(f"step {x['step'] + 1}: " + ", ".join(str(v) for v in x["counts"].values())
                         + f" ({x['seconds']:.2f} s)" for x in r["rounds"])
        lines.append(f"- {r['workload']}: {text or 'no round'}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", choices=[[], *WORKLOADS], default=[], metavar="WORKLOAD",
                    help=f"some of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--cost", default="h100", help="the cost model (default h100)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = ap.parse_args(argv)
    rows = []
    for name in args.workloads or WORKLOADS:
        row = bench(name, args.cost)
        rows.append(row)
        print(f"{name:>13}: {row['seconds']['with']:.1f} s with, {row['seconds']['without']:.1f} s without "
              f"({row['ratio']:.2f}x), deterministic {row['deterministic']}, within limits "
              f"{row['within_limits']}", flush=True)
    meta = {"cost": args.cost, "model": rows[0]["model"] if rows else args.cost,
            "machine": f"{platform.machine()}, {platform.python_version()}"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mutate.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    (args.out / "mutate.md").write_text(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
