"""The side-by-side harness: `python -m benchmarks.harness [names] [--gpu] [--out DIR]`.

The CPU run (`make bench`) takes every workload and the ONNX zoo's models (`zoo_*`) at batch 1
(the CPU sizes of `CPU_SIZES` unless `--paper-sizes`): it optimizes each with `einsat.optimize`
under the measured CPU cost model (`--cost cpu`: the candidates' ops profiled on onnxruntime
into a profile cache, `--profile-cache`; the result checked against the input), then
measures the input ONNX and the einsat-optimized ONNX on onnxruntime side by side
(`benchmarks.cpu_bench`: interleaved, all of onnxruntime's optimizations on), the cost
model's prediction error per program, the weights of both files, and PyTorch eager on the CPU
where the side environment has torch (`--torch-python`). `--numpy` adds the NumPy backend's
times. With `--gpu` and a CUDA device it measures the original and the optimized program on
einsat's CuPy backend beside PyTorch eager and torch.compile (`benchmarks.gpu_bench`), at the
papers' sizes by default (`make bench-gpu`).

It writes <kind>.json, <kind>.md and <kind>.png (kind: `cpu`, or `gpu` with `--gpu`) to
benchmarks/results/, stamped with the commit, machine, load and versions, after every workload
(`--resume` keeps the finished ones of an interrupted run). A workload that fails is recorded
with its error, the others go on; the exit status is 1 then.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.workloads import CPU_SIZES, WORKLOADS, zoo
from einsat.cost.models import DEFAULT_COST
from einsat.runtime import random_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PACKAGES = ("numpy", "scipy", "onnx", "onnxruntime", "egglog", "highspy", "cupy-cuda13x", "torch", "matplotlib")


def numpy_ms(graph, feeds: dict, reps: int = 3, budget_s: float = 20.0) -> tuple[float, dict]:
    """Median wall time of `einsat.run` on NumPy after one warm-up run (fewer reps past the budget;
    `reps=0`: the first run's time)."""
    from einsat import run
    t0 = time.perf_counter()
    outs = run(graph, feeds)
    first = time.perf_counter() - t0
    if reps == 0:
        return 1e3 * first, outs
    times = []
    for _ in range(reps if first * reps < budget_s else 1):
        t0 = time.perf_counter()
        run(graph, feeds)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), outs


def optimize_summary(result) -> dict:
    """The numbers the harness keeps from an `einsat.optimize` result."""
    r = result.report
    out = {"model": r.model, "unit": r.unit, "cost_before": r.cost_before, "cost_after": r.cost_after,
           "speedup": r.speedup, "nodes_before": sum(r.ops_before.values()),
           "nodes_after": sum(r.ops_after.values()), "ops_after": dict(r.ops_after),
           "times": {k: round(v, 3) for k, v in r.times.items()}}
    s = r.saturation
    if s is not None:
        out.update(enodes=s.enodes, eclasses=s.eclasses, stop_reason=s.stop_reason, iterations=s.iterations,
                   node_limit=s.node_limit, egglog_nodes=s.egglog_nodes)
    x = r.extraction
    out["extraction"] = {k: getattr(x, k, None) for k in ("method", "status", "gap")}
    v = r.verification
    if v is not None:
        # a program identical to the input is not run again: no error or tolerance was measured (null)
        ran = v.status != "identical"
        out["verification"] = {"status": v.status, "max_error": v.max_error if ran else None,
                               "tolerance": v.tolerance if ran else None, "trials": v.trials}
    if r.profile is not None:
        out["profile"] = r.profile
    if r.measured is not None:
        out["measured"] = r.measured
    out["kept_input"] = r.kept_input
    return out


def cases() -> dict:
    """Every benchmark case by name: the workloads, then the ONNX zoo's models."""
    return {**WORKLOADS, **zoo()}


def optimize(graph, cost: str, extract_s: float | None, **options) -> tuple[dict, object]:
    """Optimize `graph` if `einsat.optimize` can run here (it needs egglog and HiGHS); `extract_s`:
    one ILP solve's seconds (None: `Limits`' default)."""
    try:
        import egglog  # noqa: F401  (the GPU machine may lack it: then the optimizer is skipped)

        from einsat import optimize as einsat_optimize
        from einsat.egraph import Limits
    except ImportError as e:
        return {"skipped": f"einsat.optimize is not available here ({e})"}, None
    try:
        limits = None if extract_s is None else Limits(extract_s=extract_s)
        result = einsat_optimize(graph, cost=cost, limits=limits, **options)
    except Exception as e:  # recorded in the results: one workload's failure stops no other
        return {"error": f"{type(e).__name__}: {e}"}, None
    return optimize_summary(result), result


def bench_workload(name: str, args, log=print) -> dict:
    builder, defaults, description, source = cases()[name]
    sizes = {} if args.paper_sizes or args.gpu else CPU_SIZES.get(name, {})
    kwargs = {**defaults, **sizes}
    if args.batch is not None:
        kwargs["batch"] = args.batch
    rec: dict = {"name": name, "source": source, "description": description, "kwargs": kwargs}
    t0 = time.perf_counter()
    graph = builder(**kwargs)
    rec.update(build_s=round(time.perf_counter() - t0, 3), nodes=len(graph), gflop=graph.flops() / 1e9,
               weights_mb=sum(a.nbytes for a in graph.weights.values()) / 1e6)
    feeds = random_inputs(graph)
    reference = None
    if args.gpu or args.numpy:
        # on the GPU machine NumPy only gives the reference outputs (at the papers' sizes): one run
        rec["numpy_ms"], reference = numpy_ms(graph, feeds, reps=0 if args.gpu else 3)
    log(f"  {name}: {len(graph)} nodes, {rec['gflop']:.2f} GFLOP", flush=True)
    optimized = result = None
    if args.no_optimize:
        rec["optimize"] = {"skipped": "--no-optimize"}
    else:
        from einsat import Measure
        options = {} if args.gpu else {"measure": Measure(profile_s=args.profile_budget, check_reps=args.reps_cpu)}
        rec["optimize"], result = optimize(graph, args.cost, args.extract_s, **options)
        optimized = result.graph if result is not None else None
        o = rec["optimize"]
        log("    optimize: " + (f"modeled {o['speedup']:.2f}x, {o.get('enodes', 0):,} e-nodes, "
                                f"{o['times'].get('total', 0):.1f} s" if "speedup" in o else str(o)), flush=True)
    if optimized is not None and args.numpy:
        rec["optimized_numpy_ms"], _ = numpy_ms(optimized, feeds, reps=3)
    if not args.gpu:
        from benchmarks.cpu_bench import measure as cpu_measure
        target = optimized if optimized is not None else graph
        report = result.report if result is not None else None
        try:
            rec["cpu"] = cpu_measure(graph, target, report, reps=args.reps_cpu, torch_python=args.torch_python,
                                     predict=result is not None)
        except Exception as e:  # recorded: the optimize figures stay
            rec["cpu"] = {"error": f"{type(e).__name__}: {e}"}
        c = rec["cpu"]
        if "ort" in c:
            ort = c["ort"]
            log(f"    onnxruntime: {ort['input']['median_ms']:.2f} -> {ort['optimized']['median_ms']:.2f} ms, "
                f"{c['ort']['speedup']:.3f}x measured ({c['returned']} returned)", flush=True)
    if args.gpu:
        from benchmarks.gpu_bench import measure
        rec["gpu"] = measure(graph, optimized, feeds, reference, reps=args.reps, compile=not args.no_compile,
                             log=log)
    return rec


def _git(*cmd: str) -> str:
    try:
        return subprocess.run(["git", *cmd], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def metadata(kind: str, cost: str) -> dict:
    from einsat.cost.profile_db import cpu_name

    cpu = cpu_name()
    versions = {"python": platform.python_version()}
    versions.update({p: v for p in PACKAGES if (v := _version(p))})
    gpu = None
    if kind == "gpu":
        from benchmarks.gpu_bench import device_name
        gpu = device_name()
    return {"kind": kind, "commit": _git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", "einsat", "benchmarks",
                               ":(exclude)benchmarks/results")),  # results written meanwhile are not code
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                       f"load average {os.getloadavg()[0]:.1f} at the start",
            "gpu": gpu, "cost_model": cost, "versions": versions}


def _atomic_write(path: str, text: str) -> None:
    """Write `path` whole or not at all (a temporary file beside it, then a rename)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_results(results: dict, out_dir: str, kind: str, log=print, chart_too: bool = True) -> list[str]:
    from benchmarks.report import chart, markdown, summary
    os.makedirs(out_dir, exist_ok=True)
    if kind == "cpu":
        results["summary"] = summary(results)
    paths = [os.path.join(out_dir, f"{kind}.{ext}") for ext in ("json", "md", "png")]
    _atomic_write(paths[0], json.dumps(results, indent=1, default=str))
    _atomic_write(paths[1], markdown(results))
    if not chart_too:
        return paths[:2]
    try:
        chart(results, paths[2])
    except ImportError as e:  # matplotlib is the `bench` extra
        log(f"no chart: {e} (pip install -e '.[bench]')")
        paths.pop()
    return paths


def _limit_memory(gb: float):
    """A child's address-space cap: an allocation past it fails in that child (MemoryError, or an
    abort in native code) instead of waking the machine's OOM killer, which might pick anyone."""
    def apply():
        import resource
        cap = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return apply


def run_isolated(name: str, args, forwarded: list[str]) -> dict:
    """`bench_workload(name)` in a child process under a time limit and a memory cap."""
    fd, path = tempfile.mkstemp(prefix=f"einsat-bench-{name}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.harness", "--child", name, "--child-out", path, *forwarded]
    try:
        # no cap on a GPU run: CUDA reserves far more address space than it uses
        cap = args.memory_gb if args.memory_gb and not args.gpu else None
        env = {**os.environ, "XDG_CACHE_HOME": os.path.abspath(args.profile_cache)} if args.profile_cache else None
        proc = subprocess.run(cmd, timeout=args.timeout, cwd=ROOT, preexec_fn=_limit_memory(cap) if cap else None,
                              env=env)
        with open(path) as f:
            text = f.read()
        if proc.returncode == 0 and text:
            return json.loads(text)
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        return {"name": name, "source": cases()[name].source,
                "error": f"the benchmark process died ({how}; memory cap {cap or 'none'} GB)"}
    except subprocess.TimeoutExpired:
        return {"name": name, "source": cases()[name].source, "error": f"timed out after {args.timeout} s"}
    finally:
        os.unlink(path)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"workloads (default: all): {', '.join(cases())}")
    p.add_argument("--out", default=RESULTS, help="results directory (default: benchmarks/results)")
    p.add_argument("--gpu", action="store_true", help="also measure on the GPU (needs CuPy and a device)")
    p.add_argument("--paper-sizes", action="store_true", help="the papers' sizes on the CPU too")
    p.add_argument("--batch", type=int, help="batch size (default: each workload's own)")
    p.add_argument("--cost", help=f"cost model (default: cpu for the CPU run, {DEFAULT_COST} with --gpu)")
    p.add_argument("--profile-budget", type=float, default=120.0,
                   help="seconds of op profiling per workload (--cost cpu; default 120)")
    p.add_argument("--profile-cache", default=os.path.join(ROOT, "build", "bench-profiles"),
                   help="XDG_CACHE_HOME for the measured profiles (default build/bench-profiles; '' for the "
                        "user's own cache)")
    p.add_argument("--reps-cpu", type=int, default=15, help="interleaved onnxruntime rounds (default 15)")
    p.add_argument("--numpy", action="store_true", help="also time both programs on the NumPy backend")
    p.add_argument("--torch-python", default=os.path.join(ROOT, ".torch-venv", "bin", "python"),
                   help="the Python of the side environment with torch (default .torch-venv)")
    p.add_argument("--resume", action="store_true",
                   help="keep the workloads of <out>/<kind>.json that finished without an error")
    p.add_argument("--extract-s", type=float, help="one ILP solve's seconds per workload (einsat.Limits.extract_s)")
    p.add_argument("--no-optimize", action="store_true", help="skip einsat.optimize")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile on the GPU")
    p.add_argument("--reps", type=int, default=100, help="GPU repetitions (at least 100)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per workload (default 1200)")
    p.add_argument("--memory-gb", type=float, default=8, help="memory cap per workload (0: none)")
    p.add_argument("--in-process", action="store_true", help="no child process per workload (debugging)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    return p, p.parse_args(argv)


def forwarded_options(args) -> list[str]:
    out = [flag for flag, on in (("--gpu", args.gpu), ("--paper-sizes", args.paper_sizes),
                                 ("--no-optimize", args.no_optimize), ("--no-compile", args.no_compile),
                                 ("--numpy", args.numpy)) if on]
    for flag, value in (("--batch", args.batch), ("--extract-s", args.extract_s)):
        if value is not None:
            out += [flag, str(value)]
    return out + ["--cost", args.cost, "--reps", str(args.reps), "--profile-budget", str(args.profile_budget),
                  "--reps-cpu", str(args.reps_cpu), "--torch-python", args.torch_python]


def main(argv=None) -> int:
    p, args = parse_args(argv)
    args.cost = args.cost or (DEFAULT_COST if args.gpu else "cpu")
    if args.child:  # one workload, for run_isolated
        rec = bench_workload(args.child, args)
        with open(args.child_out, "w") as f:
            json.dump(rec, f, default=str)
        return 0
    known = cases()
    names = args.names or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    kind = "gpu" if args.gpu else "cpu"
    if args.gpu:
        from benchmarks.gpu_bench import device_name
        if device_name() is None:
            print("--gpu: CuPy finds no CUDA device here; run the CPU part (make bench) instead")
            return 2
    results = {"meta": metadata(kind, args.cost), "workloads": []}
    done: dict = {}
    if args.resume and os.path.exists(os.path.join(args.out, f"{kind}.json")):
        with open(os.path.join(args.out, f"{kind}.json")) as f:
            done = {w["name"]: w for w in json.load(f)["workloads"]
                    if "error" not in w and "error" not in w.get("optimize", {}) and "error" not in w.get("cpu", {})}
    if args.profile_cache and args.in_process:
        os.environ["XDG_CACHE_HOME"] = os.path.abspath(args.profile_cache)
    print(f"einsat harness ({kind}) at {results['meta']['commit'][:10]}: {len(names)} workloads", flush=True)
    for name in names:
        if name in done:
            print(f"  {name}: kept from the earlier run (--resume)", flush=True)
            results["workloads"].append(done[name])
            continue
        if not args.in_process:
            rec = run_isolated(name, args, forwarded_options(args))
        else:
            try:
                rec = bench_workload(name, args)
            except Exception as e:  # a workload that cannot even build or run is recorded as such
                rec = {"name": name, "source": known[name].source, "error": f"{type(e).__name__}: {e}"}
        if "error" in rec:
            print(f"  {name}: ERROR {rec['error']}", flush=True)
        results["workloads"].append(rec)
        results["meta"]["load_average_end"] = round(os.getloadavg()[0], 2)
        write_results(results, args.out, kind, chart_too=False)  # after each: an interrupted run keeps them
    for path in write_results(results, args.out, kind):
        print(f"wrote {path}")
    failed = [w["name"] for w in results["workloads"]
              if "error" in w or "error" in w.get("optimize", {})]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
