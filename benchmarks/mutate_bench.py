"""PET's mutation generator on the models PET evaluates: its rounds, its bounds, its cost in time.

    python -m benchmarks.mutate_bench [--cost h100] [--reps 2] [WORKLOAD ...]

Each workload (ResNet-18, Inception-v3, CSRNet, BERT; `benchmarks.workloads`) is optimized with
the default schedule and with the default schedule less the `pet-mutate` generator (what
`optimize` did before it), `--reps` times each, interleaved (without, with, without, with, ...;
the medians compared), then once more with the generator while every core is kept busy by a
spinning process. Each run
is a fresh Python process with BLAS at one thread: no run inherits another's process-wide caches
(EinNet's derivations are memoised per process: a baseline run after the generator's runs found
them warm, which made CSRNet's ratio 3.5x when the generator's own rounds were a fraction of it).

Limits: the default rules and work limits (e-nodes, iterations, PET's subprograms and
verifications, the ILP's branch-and-bound nodes), with the time limits far off (`--time-s` for
saturation, `--ilp-s` for the ILP), so that work, never the clock, ends each phase: the
determinism column compares the program of a quiet run with the loaded run's, op for op and
weight for weight, and "stopped by" shows what ended each phase (a time limit there would make
the program depend on the load, and the column would say so).

The run records each round's counts (subprograms, mutants, verified, corrected, admitted, memo
hits, ...) and seconds, whether every round stayed within `Limits` (subprograms, verifications),
PET's own seconds and their share of the optimize time, and the optimize time with and without
the generator (the target, #27: at most 1.5x wherever the generator enters nothing the cost
model keeps). Results go to `benchmarks/results/mutate.json` and `.md`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"
WORKLOADS = ("resnet18", "inception_v3", "csrnet", "bert")
ROOT = Path(__file__).resolve().parent.parent


def without_mutation():
    from einsat.egraph.rules import Generator, Schedule
    from einsat.rewrites.schedule import default_schedule
    return Schedule(tuple(p for p in default_schedule().phases
                          if not (isinstance(p, Generator) and p.name == "pet-mutate")))


def fingerprint(graph) -> str:
    """The program, op for op and weight for weight (names, shapes, bytes)."""
    h = hashlib.sha256(str(graph).encode())
    for k in sorted(graph.weights):
        a = np.ascontiguousarray(np.asarray(graph.weights[k]))
        h.update(f"{k}{a.shape}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def stopped_by(report) -> str:
    """What ended saturation and the ILP: a time limit there makes the program depend on the load."""
    sat = report.saturation.stop_reason if report.saturation is not None else "-"
    return f"{sat} / {report.extraction.status}"


def one(name: str, cost: str, generator: bool, time_s: float, ilp_s: float) -> dict:
    """One optimize run in this process (the bench runs each in a fresh one)."""
    import einsat
    from benchmarks.workloads import build
    from einsat.egraph.session import Limits

    graph = build(name)
    t0 = time.perf_counter()
    result = einsat.optimize(graph, cost=cost, rules=None if generator else without_mutation(),
                             limits=Limits(time_s=time_s, extract_s=ilp_s))
    seconds = time.perf_counter() - t0
    report = result.report
    rounds = [r for r in report.saturation.rounds if r["generator"] == "pet-mutate"] if report.saturation else []
    return {"seconds": seconds, "program": fingerprint(result.graph), "stopped_by": stopped_by(report),
            "rounds": rounds, "model": report.model, "nodes": len(graph.nodes),
            "cost_us": {"before": report.cost_before, "after": report.cost_after}, "ops_after": report.ops_after}


def run_one(name: str, cost: str, generator: bool, time_s: float, ilp_s: float) -> dict:
    """`one` in a fresh Python process, BLAS at one thread."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.mutate_bench", "--one", name, "--cost", cost,
           "--time-s", str(time_s), "--ilp-s", str(ilp_s)] + ([] if generator else ["--without"])
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Busy:
    """One spinning process per core while open (the loaded run); each is killed on close."""

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def load() -> float:
    return os.getloadavg()[0]


def bench(name: str, cost: str, reps: int, time_s: float, ilp_s: float) -> dict:
    from einsat.egraph.session import Limits

    with_runs, without_runs, loads = [], [], []
    for _ in range(reps):
        loads.append(load())
        without_runs.append(run_one(name, cost, False, time_s, ilp_s))
        loads.append(load())
        with_runs.append(run_one(name, cost, True, time_s, ilp_s))
    with Busy():
        loaded_before = load()
        loaded = run_one(name, cost, True, time_s, ilp_s)
        loaded_after = load()
    lim = Limits()
    first = with_runs[0]
    rounds = first["rounds"]
    # a partitioned run: its pieces ran the generator and the report keeps none of their rounds, so
    # what the rounds would say (limits kept, programs entered, PET's seconds) was not measured: null
    unseen = not rounds and "pieces" in first["stopped_by"]
    within = None if unseen else all(r["counts"]["subprograms"] <= lim.subprograms
                                     and r["counts"]["verified"] <= lim.verifications for r in rounds)
    pet_s = [sum(r["seconds"] for r in run["rounds"]) for run in with_runs]  # the least: load only adds
    # medians: on a shared machine one run either way can be far off (CSRNet, 3 each: with 12.1 / 12.8 /
    # 13.4 s, without 8.8 / 12.8 / 13.3 s: the faster of each said 1.38x, the medians 1.00x)
    t_with = statistics.median(r["seconds"] for r in with_runs)
    t_without = statistics.median(r["seconds"] for r in without_runs)
    programs = {r["program"] for r in with_runs} | {loaded["program"]}
    return {"workload": name, "model": first["model"], "nodes": first["nodes"], "rounds": rounds,
            "within_limits": within,
            "admitted": None if unseen else sum(r["counts"]["admitted"] for r in rounds),
            "pet_seconds": None if unseen else min(pet_s),
            "pet_share": None if unseen or not t_with else min(pet_s) / t_with,
            "deterministic": len(programs) == 1,
            "programs": {"quiet": [r["program"] for r in with_runs], "loaded": loaded["program"],
                         "without": [r["program"] for r in without_runs]},
            "stopped_by": {"quiet": [r["stopped_by"] for r in with_runs], "loaded": loaded["stopped_by"],
                           "without": [r["stopped_by"] for r in without_runs]},
            "seconds": {"with": t_with, "without": t_without, "loaded": loaded["seconds"],
                        "all_with": [r["seconds"] for r in with_runs],
                        "all_without": [r["seconds"] for r in without_runs]},
            "ratio": t_with / t_without,
            "load": {"quiet": [round(x, 1) for x in loads],
                     "loaded": [round(loaded_before, 1), round(loaded_after, 1)]},
            "cost_us": {"before": first["cost_us"]["before"], "with": first["cost_us"]["after"],
                        "without": without_runs[0]["cost_us"]["after"]},
            "ops_after": first["ops_after"]}


NONE = "—"  # a value not measured (null in the JSON)


def _unseen(row: dict) -> bool:
    """A partitioned run: its pieces ran the generator, and the report holds none of their rounds."""
    return not row["rounds"] and "pieces" in row["stopped_by"]["quiet"][0]


def _machine(meta: dict) -> str:
    """The machine as the meta names it (runs before `run_meta` named the CPUs apart)."""
    return meta["machine"] if "CPUs" in meta["machine"] else f"{meta['machine']}, {meta['cpus']} CPUs"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# PET's mutation generator on PET's models ({meta['cost']}: {meta.get('model', meta['cost'])})", "",
             f"Machine: {_machine(meta)} (each row's commit and date below). Default "
             f"rules and work limits, time limits far off (saturation {meta['time_s']:g} s, ILP {meta['ilp_s']:g} s) "
             "so that work ends every phase; each run a fresh process with BLAS at one thread. Optimize time is "
             "the median of the quiet runs with the generator against the median of those without it, "
             "interleaved (runs per row below). Deterministic: the quiet runs with the generator and one more "
             "run with every core kept busy (one spinning process per core) extracted the same program, op for "
             "op and weight for weight.", "",
             "| workload | nodes | optimize s: with / without (ratio) | PET's rounds s (share of with) | "
             "programs entered | modeled µs: input / with / without | loaded run s | deterministic | within limits |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, c = r["seconds"], r["cost_us"]
        pet = NONE if r["pet_seconds"] is None else f"{r['pet_seconds']:.2f} ({r['pet_share']:.0%})"
        entered = NONE if r["admitted"] is None else r["admitted"]
        within = NONE if r["within_limits"] is None else r["within_limits"]
        lines.append(f"| {r['workload']} | {r['nodes']} | {s['with']:.1f} / {s['without']:.1f} ({r['ratio']:.2f}x) | "
                     f"{pet} | {entered} | "
                     f"{c['before']:,.1f} / {c['with']:,.1f} / {c['without']:,.1f} | {s['loaded']:.1f} | "
                     f"{r['deterministic']} | {within} |")
    from einsat.rewrites.mutate.generate import COUNTS
    lines += ["", "Stopped by (saturation / extraction), each run with the generator, quiet then loaded: a time "
              "limit there would make the program depend on the machine's load:", ""]
    lines += [f"- {r['workload']}: " + "; ".join(r["stopped_by"]["quiet"]) + f"; loaded: {r['stopped_by']['loaded']}"
              for r in rows]
    lines += ["", "Each row's run: commit, date, quiet runs with and without the generator (each); load average "
              "(1 min) before each quiet run (without, with, ...) and around the loaded run:", ""]
    lines += [f"- {r['workload']}: {r['run']['commit']}, {r['run']['date']}, {r['run']['reps']} each; quiet "
              f"{r['load']['quiet']}; loaded {r['load']['loaded']}" for r in rows]
    lines += ["", "The optimize times are wall-clock on a machine shared with other work: the ratio is the "
              "figure to read, PET's share (its rounds' own seconds) the one that load moves least.",
              "", f"Rounds (step: {', '.join(COUNTS)}; seconds). A mutant is verified only when its core "
              "is cheaper than the subprogram under the cost model (the pre-filter); an admitted program "
              "enters only when the cost model keeps it (cheaper than its subprogram: else 'not kept'), and "
              "a round that enters nothing backs off:", ""]
    for r in rows:
        text = "; ".join(f"step {x['step'] + 1}: " + ", ".join(str(v) for v in x["counts"].values())
                         + f" ({x['seconds']:.2f} s)" for x in r["rounds"])
        if _unseen(r):
            text = ("not in the report: the model was partitioned (" + r["stopped_by"]["quiet"][0].split(" / ")[1]
                    + "), and the partition's summary keeps no piece's rounds ('—' in the table: not measured)")
        lines.append(f"- {r['workload']}: {text or 'no round'}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", choices=[[], *WORKLOADS], default=[], metavar="WORKLOAD",
                    help=f"some of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--cost", default="h100", help="the cost model (default h100)")
    ap.add_argument("--reps", type=int, default=2, help="quiet runs with and without the generator (default 2)")
    ap.add_argument("--time-s", type=float, default=600.0, help="saturation's time limit (default 600: far off)")
    ap.add_argument("--ilp-s", type=float, default=300.0, help="the ILP's time limit (default 300: far off)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    ap.add_argument("--one", choices=WORKLOADS, help=argparse.SUPPRESS)  # one run, this process: JSON on stdout
    ap.add_argument("--without", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.cost, not args.without, args.time_s, args.ilp_s)))
        return 0
    from benchmarks.meta import run_meta

    meta = run_meta(ROOT, cost=args.cost, cpus=os.cpu_count(), reps=args.reps, time_s=args.time_s,
                    ilp_s=args.ilp_s)
    commit = meta["commit"][:10] + (" (with uncommitted changes)" if meta["dirty"] else "")
    earlier = []
    if args.workloads and (args.out / "mutate.json").is_file():  # a subset updates its rows, keeps the others
        earlier = json.loads((args.out / "mutate.json").read_text())["results"]
    rows = []
    for name in args.workloads or WORKLOADS:
        row = bench(name, args.cost, args.reps, args.time_s, args.ilp_s)
        row["run"] = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "reps": args.reps}
        rows.append(row)
        print(f"{name:>13}: {row['seconds']['with']:.1f} s with, {row['seconds']['without']:.1f} s without "
              f"({row['ratio']:.2f}x), loaded {row['seconds']['loaded']:.1f} s, deterministic "
              f"{row['deterministic']}, stopped by {row['stopped_by']}, within limits {row['within_limits']}",
              flush=True)
        done = {r["workload"]: r for r in earlier} | {r["workload"]: r for r in rows}
        table = [done[w] for w in WORKLOADS if w in done]
        meta["model"] = table[0]["model"]
        args.out.mkdir(parents=True, exist_ok=True)  # written after each workload: a long run keeps what it did
        (args.out / "mutate.json").write_text(json.dumps({"meta": meta, "results": table}, indent=1))
        (args.out / "mutate.md").write_text(markdown(table, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
