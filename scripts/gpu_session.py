"""GPU machine: all of einsat's GPU work in one run, every result written under one folder.

    PYTHONUNBUFFERED=1 python3 scripts/gpu_session.py --out "$OUT"          # see docs/gpu.md

Phases (`--phases`, in this order; each is skipped or cut short when `--deadline` seconds since
the start would be passed, and every phase rewrites the summary, so a run stopped early still
leaves its results):

  env      the device, driver, CUDA / cuDNN / cuBLAS / CuPy / torch versions, nvidia-smi
  tests    pytest tests/gpu (the GPU tests and the host ones), log in tests.log
  profile  the benchmark workloads' signatures (benchmarks/signatures/*.json, exported on a CPU
           machine by scripts/export_signatures.py), the end-to-end workloads' own first, into
           profile-<kind>.json (extending the committed einsat/gpu/profiles/<kind>.json)
  e2e      the unoptimized end-to-end workloads (ResNet-18, BERT) on einsat's backend, as a CUDA
           graph and through the interpreter loop, beside PyTorch eager, same weights and inputs;
           outputs checked against NumPy; the profile's prediction of each
  bench    the benchmark harness's GPU part (benchmarks.harness --gpu), into bench/
  profile-optimized, optimized
           the einsat-optimized programs packed on a CPU machine (scripts/export_optimized.py,
           `--optimized` folder): their new signatures profiled, then each against its input
           program, both as CUDA graphs, interleaved rounds, outputs checked against NumPy,
           measured speed-up beside the modeled one and MeasuredCost's prediction of both; beside
           them the input program in PyTorch eager and torch.compile, modes reduce-overhead and
           max-autotune (what a user would otherwise pick; a compile past --compile-timeout is
           recorded as timed out)
  check    `einsat check` on every optimized program (einsat.gpu.check): both as CUDA graphs,
           outputs compared, cost="cpu"'s never-slower rule (interleaved rounds, Wilcoxon, a
           verdict of faster confirmed on fresh compiles) keeps the optimized program or the
           input; the stale profile entries they meet are timed again into profile-<kind>.json,
           and the verdicts go beside it into verdicts-<kind>.json
  breakdown (opt-in, not in the default phases) where the time goes, for the optimized programs
           named by --breakdown (default bert_tensat and bert): for the input and the optimized
           program, the CUDA graph's time, each node's device time between CUDA events
           (`benchmarks.breakdown_bench.node_device_times`) beside MeasuredCost's prediction of
           it, the graph's kernels under torch.profiler; and torch.compile's kernels for the
           input program (--breakdown-compile-mode, default reduce-overhead), grouped alike
           (GEMMs, softmax, norms, fused kernels, copies); breakdown.md beside session.md

Outputs (at most 8 files, as the device tool returns: run bench and check in separate
sessions): session.md, session.json, tests.log, profile-<kind>.json, verdicts-<kind>.json,
session.log, bench/gpu.{json,md,png}, breakdown.md. Nothing here imports egglog.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from benchmarks.gpu_bench import cuda_event_times, op_by_op, rel_error, torch_latencies  # noqa: E402

PHASES = ("env", "tests", "profile", "e2e", "bench", "profile-optimized", "optimized", "check", "breakdown")
E2E = ("resnet18", "bert")
START = time.monotonic()


class Session:
    def __init__(self, out: str, deadline: float):
        self.out, self.deadline = out, deadline
        os.makedirs(out, exist_ok=True)
        self.data: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "phases": {}}
        self.logf = open(os.path.join(out, "session.log"), "a")

    def log(self, msg: str) -> None:
        line = f"[{time.monotonic() - START:6.0f}s] {msg}"
        print(line, flush=True)
        self.logf.write(line + "\n")
        self.logf.flush()

    def left(self) -> float:
        return self.deadline - (time.monotonic() - START)

    def save(self) -> None:
        with open(os.path.join(self.out, "session.json"), "w") as f:
            json.dump(self.data, f, indent=1, default=str)
        with open(os.path.join(self.out, "session.md"), "w") as f:
            f.write(summary_markdown(self.data))


# -- phases ---------------------------------------------------------------------------------

def phase_env(s: Session, args) -> dict:
    from einsat.gpu.device import CupyDevice
    from einsat.gpu.profiler import device_info
    info = {"python": platform.python_version(), "device": device_info(CupyDevice())}
    try:
        import torch
        info["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                         "cudnn": torch.backends.cudnn.version()}
    except Exception as e:
        info["torch"] = f"unavailable: {e}"
    try:
        import egglog  # noqa: F401
        info["egglog"] = "present (unexpected on the GPU machine)"
    except ImportError:
        info["egglog"] = "absent"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,"
                          "power.draw,memory.used,memory.total", "--format=csv"], capture_output=True, text=True)
    info["nvidia_smi"] = smi.stdout.strip()
    dev = info["device"]
    s.log(f"device: {dev.get('name')} driver {dev.get('driver')} "
          f"cuDNN {dev.get('cudnn')} cuBLAS {dev.get('cublas')} CuPy {dev.get('cupy')}")
    return info


def phase_tests(s: Session, args) -> dict:
    budget = max(60, min(args.test_budget, s.left() - 60))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/gpu", "tests/cost/test_profiled.py"]
    try:
        import xdist  # noqa: F401
        cmd += ["-n", str(min(8, os.cpu_count() or 1))]
    except ImportError:
        pass
    s.log(f"tests: {' '.join(cmd[2:])} (budget {budget:.0f} s)")
    with open(os.path.join(s.out, "tests.log"), "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=budget).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    tail = open(os.path.join(s.out, "tests.log")).read().strip().splitlines()[-1:]
    s.log(f"tests: rc={rc} {tail[0] if tail else ''}")
    return {"returncode": rc, "summary": tail[0] if tail else ""}


def signature_files(args) -> list[str]:
    files = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "signatures", "*.json")))
    first = [f for w in E2E for f in files if os.path.basename(f) == f"{w}.json"]
    return first + [f for f in files if f not in first]


def _profile_db(s: Session, kind: str):
    from einsat.cost.profile_db import ProfileDB, committed_profile
    path = os.path.join(s.out, f"profile-{kind}.json")
    if os.path.exists(path):
        return ProfileDB.load(path), path
    base = committed_profile(kind)
    return (ProfileDB.load(base) if base else ProfileDB()), path


def phase_profile(s: Session, args, only_e2e_programs: bool = False, graphs=None) -> dict:
    from benchmarks.workloads import build
    from einsat.gpu.device import CupyDevice
    from einsat.gpu.profiler import Profiler, device_info, stale
    from einsat.ir.signature import read_signatures, signatures_of_graph
    dev = CupyDevice()
    info = device_info(dev)
    db, path = _profile_db(s, info["kind"])
    db.device = info
    if graphs is not None:  # the programs' own signatures
        sigs = [sig for g in graphs for sig in signatures_of_graph(g)]
    elif only_e2e_programs:  # exactly what the end-to-end predictions need, built here
        sigs = [sig for w in E2E for sig in signatures_of_graph(build(w))]
    else:
        sigs = [sig for f in signature_files(args) for sig in read_signatures(f)]
    sigs = list({x.key: x for x in sigs}.values())
    budget = s.left() - args.reserve
    fresh = sum(x.key not in db for x in sigs)
    again = sum(x.key in db and stale(db.entries[x.key]) for x in sigs)
    s.log(f"profile: {len(sigs)} signatures ({fresh} new, {again} stale: their cuDNN choice was timed otherwise), "
          f"budget {budget:.0f} s")
    prof = Profiler(dev, reps=args.reps)
    done = 0
    chunk = 20
    for k in range(0, len(sigs), chunk):
        if s.left() - args.reserve <= 0:
            break
        prof.profile(sigs[k:k + chunk], db, time_budget_s=s.left() - args.reserve)
        done = min(k + chunk, len(sigs))
        db.save(path)
    s.log(f"profile: {len(db)} entries, {len(db.failures)} failures -> {os.path.basename(path)}")
    return {"path": os.path.basename(path), "entries": len(db), "failures": len(db.failures),
            "signatures_seen": done, "signatures_total": len(sigs)}


def _median_events(fn, reps: int, stream=None, warmup: int = 10) -> float:
    """Median ms between CUDA events recorded on `stream` (the one `fn` runs on) around `fn`."""
    return statistics.median(cuda_event_times(fn, reps, warmup, stream))


def predict_us(graph, db) -> tuple[float, float]:
    """Σ over nodes of the measured warm time (views 0): (µs, fraction of kernels measured)."""
    from einsat.ir.signature import signature_of
    total, hit, n = 0.0, 0, 0
    for node in graph.nodes:
        ins, outs = graph.node_types(node)
        if signature_of(node.op, node.attrs, ins) is None:
            continue
        n += 1
        t = db.lookup(node.op, node.attrs, ins, outs)
        if t is not None:
            hit += 1
            total += t
    return total, (hit / n if n else 1.0)


def e2e_workload(s: Session, name: str, args, db) -> dict:
    from benchmarks.workloads import build
    from einsat.gpu.backend_cupy import GpuBackend
    from einsat.gpu.interpreter import run
    from einsat.gpu.program import CompiledProgram
    graph = build(name)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(graph.types[n].shape).astype(graph.types[n].dtype) for n in graph.inputs}
    t0 = time.perf_counter()
    want = run(graph, feeds)
    res: dict = {"nodes": len(graph.nodes), "numpy_s": time.perf_counter() - t0, "reps": args.e2e_reps}
    backend = GpuBackend(tf32=False)
    t0 = time.perf_counter()
    prog = CompiledProgram(graph, device=backend.device)
    res["compile_s"] = time.perf_counter() - t0
    res["mode"] = prog.mode
    if prog.graph_fallback:
        res["graph_fallback"] = prog.graph_fallback
    got = prog.run(feeds)
    res["rel_error"] = max(rel_error(got[o], want[o]) for o in graph.outputs)
    res["arena_mb"] = prog.arena_bytes / 2**20
    res["einsat_graph_ms"] = _median_events(prog.replay, args.e2e_reps, prog._stream)
    # the interpreter loop on device-resident values (no CUDA graph)
    dev = backend.device
    eager = op_by_op(graph, backend, {n: dev.upload(feeds[n]) for n in graph.inputs})
    res["einsat_eager_ms"] = _median_events(eager, args.e2e_reps)
    res["host_fallbacks"] = dict(backend.host_fallbacks)
    try:
        import torch

        from benchmarks.torch_baseline import TorchProgram, plain_graph, set_precision
        set_precision(tf32=False)
        module = TorchProgram(plain_graph(graph)).eval().to("cuda")
        targs = [torch.from_numpy(feeds[n]).cuda() for n in graph.inputs]
        with torch.inference_mode():
            outs = module(*targs)
            res["torch_rel_error"] = max(rel_error(o.float().cpu().numpy(), want[n])
                                         for n, o in zip(graph.outputs, outs))
            for _ in range(10):
                module(*targs)
            torch.cuda.synchronize()
            times = []
            for _ in range(args.e2e_reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                module(*targs)
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
        res["torch_eager_ms"] = statistics.median(times)
        res["ratio_graph_vs_torch"] = res["einsat_graph_ms"] / res["torch_eager_ms"]
        res["ratio_eager_vs_torch"] = res["einsat_eager_ms"] / res["torch_eager_ms"]
    except Exception as e:
        res["torch_error"] = f"{type(e).__name__}: {e}"
    if db is not None:
        us, coverage = predict_us(graph, db)
        res["profile_sum_ms"] = us / 1e3
        res["profile_coverage"] = coverage
        res["prediction_ratio"] = res["profile_sum_ms"] / res["einsat_graph_ms"] if coverage else None
    s.log(f"e2e {name}: einsat graph {res['einsat_graph_ms']:.3f} ms, eager {res['einsat_eager_ms']:.3f} ms, "
          f"torch {res.get('torch_eager_ms', float('nan')):.3f} ms, rel err {res['rel_error']:.1e}, "
          f"predicted {res.get('profile_sum_ms', float('nan')):.3f} ms")
    return res


def _device_profile(s: Session):
    """(this GPU's kind, the session's profile of it: extended here, else the committed one)."""
    from einsat.gpu.device import CupyDevice
    from einsat.gpu.profiler import device_info
    kind = device_info(CupyDevice())["kind"]
    return kind, _profile_db(s, kind)[0]


def phase_e2e(s: Session, args) -> dict:
    _, db = _device_profile(s)
    return each_workload(s, "e2e", args.workloads.split(","), 45,
                         lambda name: e2e_workload(s, name, args, db if len(db) else None))


class DeadlineReached(Exception):
    pass


class deadline_alarm:
    """Raise `DeadlineReached` in the main thread once `seconds` have passed (SIGALRM), so one
    workload that runs long (a convolution network's cuDNN choices, say) cannot take the device
    call past its limit with the session's files unwritten. Elsewhere (no SIGALRM, another
    thread) it does nothing."""

    def __init__(self, seconds: float):
        self.seconds = max(1e-3, seconds)
        self.armed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    def _fire(self, signum, frame):
        raise DeadlineReached(f"stopped at the session's deadline ({self.seconds:.0f} s after it started)")

    def __enter__(self):
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


def each_workload(s: Session, phase: str, items, margin_s: float, measure) -> dict:
    """`measure(item)` for each item (a workload name, or a record with one), by name: skipped
    when fewer than `margin_s` seconds are left, stopped at the deadline (`deadline_alarm`), an
    error recorded (not raised) per workload, the session saved after each so that a run
    stopped early keeps what it measured."""
    out: dict = {}
    for item in items:
        name = item if isinstance(item, str) else item["name"]
        if s.left() < margin_s:
            out[name] = {"skipped": "deadline"}
            continue
        try:
            with deadline_alarm(s.left()):
                out[name] = measure(item)
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
            s.log(f"{phase} {name}: ERROR {out[name]['error']}")
        s.data["phases"][phase] = out
        s.save()
    return out


def optimized_records(args) -> list[dict]:
    """The packed optimized programs in `--optimized` (scripts/export_optimized.py), by name."""
    import pickle
    records = []
    for path in sorted(glob.glob(os.path.join(args.optimized, "*.pkl"))):
        with open(path, "rb") as f:
            records.append(pickle.load(f))
    return records


def optimized_pair(record: dict):
    """(input program, optimized program) of a packed record, rebuilt here; a weight the recipe
    rounded otherwise than the CPU machine is recorded, not refused (the outputs are checked)."""
    from benchmarks.workloads import build
    from scripts.export_optimized import unpack
    source = build(record["name"])
    return source, unpack(record, source, exact=False)


def phase_profile_optimized(s: Session, args) -> dict:
    graphs = []
    for record in optimized_records(args):
        try:
            graphs += optimized_pair(record)
        except Exception as e:  # the optimized phase reports it
            s.log(f"profile-optimized {record['name']}: skipped, {type(e).__name__}: {e}")
    return phase_profile(s, args, graphs=graphs)


def interleaved(a, b, rounds: int, reps: int) -> tuple[list[float], list[float]]:
    """Median CUDA-event ms of `a` and of `b` (CompiledPrograms) per round, alternating which runs
    first each round, so drift in clocks or load falls on both alike."""
    ta, tb = [], []
    for r in range(rounds):
        order = ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta))
        for prog, into in order:
            into.append(_median_events(prog.replay, reps, prog._stream, warmup=3))
    return ta, tb


def optimized_workload(s: Session, record: dict, source, opt, args, cost=None, device=None) -> dict:
    """`opt` against `source` on the device (see phase_optimized); `cost` predicts both."""
    from einsat.gpu.backend_cupy import GpuBackend
    from einsat.gpu.program import CompiledProgram
    from einsat.runtime import run
    from scripts.export_optimized import inexact_weights
    name = record["name"]
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(source.types[n].shape).astype(source.types[n].dtype) for n in source.inputs}
    want = run(source, feeds)
    m = record["modeled"]
    res: dict = {"nodes_before": len(source.nodes), "nodes_after": len(opt.nodes), "modeled_cost": m["cost"],
                 "modeled_before": m["before"], "modeled_after": m["after"],
                 "modeled_speedup": m["before"] / m["after"] if m["after"] else None,
                 "kept_input": record["kept_input"], "rounds": args.rounds, "reps": args.round_reps,
                 "recipe_inexact": inexact_weights(record, opt)}
    device = device or GpuBackend(tf32=False).device
    progs = {}
    for key, g in (("input", source), ("optimized", opt)):
        prog = CompiledProgram(g, device=device)
        got = prog.run(feeds)
        res[f"{key}_rel_error"] = max(rel_error(got[o], want[o]) for o in source.outputs)
        res[f"{key}_mode"] = prog.mode
        if prog.graph_fallback:
            res[f"{key}_graph_fallback"] = prog.graph_fallback
        progs[key] = prog
    ta, tb = interleaved(progs["input"], progs["optimized"], args.rounds, args.round_reps)
    ratios = sorted(x / y for x, y in zip(ta, tb))
    res.update(input_ms=statistics.median(ta), optimized_ms=statistics.median(tb),
               speedup=statistics.median(ratios), speedup_min=ratios[0], speedup_max=ratios[-1],
               faster_rounds=sum(x > y for x, y in zip(ta, tb)))
    if cost is not None:
        res.update(predicted_input_ms=cost.graph_cost(source) / 1e3, predicted_optimized_ms=cost.graph_cost(opt) / 1e3,
                   coverage_input=cost.coverage(source), coverage_optimized=cost.coverage(opt))
    if getattr(args, "torch", True):
        res.update(torch_columns(source, feeds, want, res["optimized_ms"], args))
    s.log(f"optimized {name}: {res['input_ms']:.3f} -> {res['optimized_ms']:.3f} ms, measured "
          f"{res['speedup']:.2f}x [{res['speedup_min']:.2f}, {res['speedup_max']:.2f}] (modeled "
          f"{res['modeled_speedup'] or float('nan'):.2f}x), rel err {res['input_rel_error']:.1e} / "
          f"{res['optimized_rel_error']:.1e}")
    return res


TORCH_KINDS = ("eager", "reduce-overhead", "max-autotune")


def torch_columns(source, feeds, want, optimized_ms: float, args) -> dict:
    """What a user would otherwise pick, beside einsat's optimized program: PyTorch eager and
    torch.compile in modes reduce-overhead and max-autotune (`gpu_bench.torch_latencies`: the
    same program and weights; each compile stopped after `--compile-timeout` s and recorded as
    timed out), as `torch_<kind>_ms` and `vs_torch_<kind>` (torch's ms over einsat's: above 1,
    einsat is faster), or `torch_<kind>_error`."""
    try:
        t = torch_latencies(source, feeds, want, reps=max(args.round_reps, 20),
                            compile_timeout_s=getattr(args, "compile_timeout", None))
    except Exception as e:  # no torch, no device: the columns say why
        return {"torch_error": f"{type(e).__name__}: {e}"[:300]}
    out: dict = {"torch_version": t.get("torch")}
    for kind in TORCH_KINDS:
        part = t.get(kind, {})
        if "median_ms" in part:
            out[f"torch_{kind}_ms"] = part["median_ms"]
            out[f"torch_{kind}_rel_error"] = part.get("rel_error")
            out[f"torch_{kind}_first_call_s"] = part.get("first_call_s")
            out[f"vs_torch_{kind}"] = part["median_ms"] / optimized_ms if optimized_ms else None
        else:
            out[f"torch_{kind}_error"] = part.get("error", "not run")
    return out


def _torch_cell(r: dict, kind: str) -> str:
    if f"torch_{kind}_ms" in r:
        return f"{r[f'torch_{kind}_ms']:.3f} ({r[f'vs_torch_{kind}']:.2f}x)"
    err = r.get(f"torch_{kind}_error") or r.get("torch_error") or "-"
    return "compile timed out" if "timed out" in err else err.split(":")[0]


def phase_optimized(s: Session, args) -> dict:
    from einsat.cost.profiled import MeasuredCost, calibrated_fallback
    kind, db = _device_profile(s)
    cost = MeasuredCost(db, fallback=calibrated_fallback(db, kind)) if len(db) else None  # fitted once
    return each_workload(s, "optimized", optimized_records(args), 20,
                         lambda record: optimized_workload(s, record, *optimized_pair(record), args, cost))


def check_workload(s: Session, record: dict, source, opt, args, db, profile_path: str, verdicts: dict,
                   device=None, runner=None) -> dict:
    """`einsat check` of one optimized program against its input (einsat.gpu.check): the
    verdict, with the stale profile entries the two programs meet timed again into `db` (saved
    at `profile_path`); the verdict also goes into `verdicts` and its file beside the profile."""
    from einsat.gpu.check import check_programs
    from einsat.ir.signature import atomic_write_json
    name = record["name"]
    if record.get("kept_input"):
        return {"skipped": "the CPU machine's optimize kept the input program"}
    if device is None:
        from einsat.gpu.device import CupyDevice
        device = CupyDevice(tf32=False)
    r = check_programs(source, opt, device, rounds=args.rounds, replays=args.round_reps, db=db, runner=runner,
                       progress=lambda text: s.log(f"check {name}: {text}"))
    if r.reprofiled or r.reprofile_failed:
        db.save(profile_path)
    m = record.get("modeled", {})
    res = {**r.to_dict(), "modeled_speedup": m["before"] / m["after"] if m.get("after") else None}
    verdicts[name] = res
    atomic_write_json(os.path.join(s.out, f"verdicts-{db.device.get('kind', 'gpu')}.json"), verdicts)
    c = r.comparison
    s.log(f"check {name}: {r.verdict}, {r.kept} kept" + (f": {c}" if c else f" (relative error {r.rel_error:.1e})"))
    return res


def phase_check(s: Session, args) -> dict:
    from einsat.gpu.device import CupyDevice
    from einsat.gpu.profiler import device_info
    kind = device_info(CupyDevice())["kind"]
    db, path = _profile_db(s, kind)
    db.device = db.device or {"kind": kind}
    verdicts: dict = {}
    return each_workload(s, "check", optimized_records(args), 20,
                         lambda record: check_workload(s, record, *optimized_pair(record), args, db, path, verdicts))


BREAKDOWN_KERNELS = 30  # kernels kept per program (largest first): the phase's output stays small
NODE_TIMER: dict = {}  # node_device_times' mark / elapsed_ms / sync (CuPy's events unless set: the host tests)


def breakdown_program(prog, graph, backend, feeds: dict, cost, args) -> dict:
    """One compiled program, kernel by kernel (see the module docstring's `breakdown`)."""
    from benchmarks.breakdown_bench import group_totals, modeled_nodes, node_device_times, node_group, profile_kernels
    prog.run(feeds)
    res: dict = {"graph_ms": _median_events(prog.replay, args.round_reps, prog._stream), "mode": prog.mode}
    dev = backend.device
    inputs = {n: dev.upload(feeds[n]) for n in graph.inputs}
    measured = node_device_times(graph, backend, inputs, reps=args.breakdown_reps, **NODE_TIMER)
    modeled = {r["node"]: r for r in modeled_nodes(graph, cost)} if cost is not None else {}
    rows = []
    for node in graph.nodes:
        m = modeled.get(node.name, {})
        if node.definition.view or node.definition.source:
            continue
        rows.append({"node": node.name, "op": node.op_name, "group": node_group(node),
                     "shape": list(graph.types[node.outputs[0]].shape) if node.outputs else [],
                     "us": measured.get(node.name), "modeled_us": m.get("us"), "from": m.get("source")})
    res.update(nodes=rows, node_sum_us=sum(r["us"] or 0.0 for r in rows), groups=group_totals(rows),
               modeled_groups=group_totals(rows, "modeled_us"))
    try:
        kernels = profile_kernels(prog.replay, calls=10)
        res.update(kernels=kernels[:BREAKDOWN_KERNELS], kernel_sum_us=sum(k["us"] for k in kernels),
                   kernel_launches=sum(k["launches"] for k in kernels), kernel_groups=group_totals(kernels))
    except Exception as e:  # no torch, or no CUPTI: the events above still say it
        res["kernels_error"] = f"{type(e).__name__}: {e}"[:300]
    return res


def torch_compile_kernels(source, feeds: dict, args) -> dict:
    """torch.compile's kernels for the input program (same weights), per call, grouped."""
    import torch

    from benchmarks.breakdown_bench import group_totals, profile_kernels
    from benchmarks.torch_baseline import TorchProgram, compiled, first_call, plain_graph, set_precision
    set_precision(tf32=False)
    module = TorchProgram(plain_graph(source)).eval().to("cuda")
    targs = [torch.from_numpy(feeds[n]).cuda() for n in source.inputs]
    fn = compiled(module, args.breakdown_compile_mode)
    with torch.inference_mode():
        t0 = time.perf_counter()
        first_call(fn, targs, args.compile_timeout)
        first = time.perf_counter() - t0
        times = []
        for _ in range(3):
            fn(*targs)
        torch.cuda.synchronize()
        for _ in range(args.round_reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*targs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        kernels = profile_kernels(lambda: fn(*targs), calls=10)
    return {"mode": args.breakdown_compile_mode, "first_call_s": first, "median_ms": statistics.median(times),
            "kernels": kernels[:BREAKDOWN_KERNELS], "kernel_sum_us": sum(k["us"] for k in kernels),
            "kernel_launches": sum(k["launches"] for k in kernels), "kernel_groups": group_totals(kernels)}


def breakdown_workload(s: Session, record: dict, source, opt, args, cost=None) -> dict:
    from einsat.gpu.backend_cupy import GpuBackend
    from einsat.gpu.program import CompiledProgram
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(source.types[n].shape).astype(source.types[n].dtype) for n in source.inputs}
    backend = GpuBackend(tf32=False)
    res: dict = {}
    for key, g in (("input", source), ("optimized", opt)):
        res[key] = breakdown_program(CompiledProgram(g, device=backend.device), g, backend, feeds, cost, args)
        p = res[key]
        s.log(f"breakdown {record['name']} {key}: graph {p['graph_ms']:.3f} ms, nodes {p['node_sum_us'] / 1e3:.3f} "
              f"ms, kernels {p.get('kernel_sum_us', float('nan')) / 1e3:.3f} ms")
    if getattr(args, "torch", True):
        try:
            res["torch_compile"] = torch_compile_kernels(source, feeds, args)
        except Exception as e:
            res["torch_compile"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return res


def phase_breakdown(s: Session, args) -> dict:
    from einsat.cost.profiled import MeasuredCost, calibrated_fallback
    kind, db = _device_profile(s)
    cost = MeasuredCost(db, fallback=calibrated_fallback(db, kind)) if len(db) else None
    wanted = args.breakdown.split(",")
    records = [r for r in optimized_records(args) if r["name"] in wanted]
    missing = sorted(set(wanted) - {r["name"] for r in records})
    if missing:
        s.log(f"breakdown: no packed optimized program for {missing} in {args.optimized}")
    out = each_workload(s, "breakdown", records, 30,
                        lambda record: breakdown_workload(s, record, *optimized_pair(record), args, cost))
    with open(os.path.join(s.out, "breakdown.md"), "w") as f:
        f.write(breakdown_markdown(out))
    return out


def _group_line(groups: dict, key: str = "us") -> str:
    return ", ".join(f"{g} {v[key]:.0f} ({100 * v['share']:.0f}%)" for g, v in groups.items()) or "-"


def breakdown_markdown(out: dict) -> str:
    """The breakdown phase's results as markdown: per workload and program, the graph time, the
    per-node sum and the kernel sum, by group, then the largest kernels beside torch.compile's."""
    lines = ["# Where the time goes (measured on the GPU: CUDA events per node, torch.profiler per kernel)", "",
             "Per workload: each program's CUDA-graph time; its nodes' device times run one after another "
             "between CUDA events (einsat's interpreter loop: what each node costs without the graph's "
             "overlap), beside MeasuredCost's prediction; the CUDA graph's kernels as torch.profiler "
             "lists them (µs per replay); torch.compile's kernels for the input program. Groups in µs (share).",
             ""]
    for name, r in out.items():
        if not isinstance(r, dict) or "optimized" not in r:
            lines += [f"## {name}: {r.get('error', r.get('skipped', r)) if isinstance(r, dict) else r}", ""]
            continue
        lines += [f"## {name}", "", "| program | graph ms | Σ nodes ms | Σ kernels ms | kernel launches | "
                  "by group, nodes measured µs | by group, modeled µs |", "|---|---|---|---|---|---|---|"]
        for key in ("input", "optimized"):
            p = r[key]
            lines.append(f"| einsat {key} | {p['graph_ms']:.3f} | {p['node_sum_us'] / 1e3:.3f} | "
                         f"{p.get('kernel_sum_us', float('nan')) / 1e3:.3f} | {p.get('kernel_launches', '-')} | "
                         f"{_group_line(p['groups'])} | {_group_line(p['modeled_groups'], 'modeled_us')} |")
        t = r.get("torch_compile", {})
        if "median_ms" in t:
            lines.append(f"| torch.compile {t['mode']} | {t['median_ms']:.3f} | - | {t['kernel_sum_us'] / 1e3:.3f} | "
                         f"{t['kernel_launches']} | {_group_line(t['kernel_groups'])} | - |")
        elif t:
            lines.append(f"| torch.compile | {t.get('error')} |")
        lines += ["", "| einsat optimized: kernel | group | launches | µs/replay | torch.compile: kernel | group | "
                  "launches | µs/call |", "|---|---|---|---|---|---|---|---|"]
        ek, tk = r["optimized"].get("kernels", []), t.get("kernels", [])
        for i in range(min(15, max(len(ek), len(tk)))):
            a = ek[i] if i < len(ek) else None
            b = tk[i] if i < len(tk) else None
            cell = lambda k: (f"{k['kernel'][:60]} | {k['group']} | {k['launches']:.0f} | {k['us']:.1f}"  # noqa: E731
                              if k else " | | | ")
            lines.append(f"| {cell(a)} | {cell(b)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def phase_bench(s: Session, args) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.harness", "--gpu", "--out", os.path.join(s.out, "bench")]
    cmd += args.bench_args.split()
    budget = s.left() - 10
    s.log(f"bench: {' '.join(cmd[2:])} (budget {budget:.0f} s)")
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(budget, 1))
        s.logf.write(p.stdout + p.stderr)
        return {"returncode": p.returncode, "tail": (p.stdout + p.stderr).strip().splitlines()[-5:]}
    except subprocess.TimeoutExpired:
        return {"returncode": "timeout"}


# -- summary --------------------------------------------------------------------------------

def summary_markdown(d: dict) -> str:
    lines = [f"# einsat GPU session ({d.get('started')})", ""]
    env = d["phases"].get("env", {})
    dev = env.get("device", {}) if isinstance(env, dict) else {}
    if dev:
        torch_info = env.get("torch")
        torch_version = torch_info.get("version") if isinstance(torch_info, dict) else torch_info
        lines += [f"Device: {dev.get('name')} (driver {dev.get('driver')}, CUDA runtime {dev.get('cuda_runtime')}, "
                  f"cuDNN {dev.get('cudnn')}, cuBLAS {dev.get('cublas')}, CuPy {dev.get('cupy')}); "
                  f"torch {torch_version}", ""]
    t = d["phases"].get("tests")
    if t:
        lines += [f"Tests: return code {t.get('returncode')}: {t.get('summary')}", ""]
    p = d["phases"].get("profile")
    if p:
        lines += [f"Profile: {p.get('entries')} entries, {p.get('failures')} failures "
                  f"({p.get('signatures_seen')}/{p.get('signatures_total')} signatures) in {p.get('path')}", ""]
    e = d["phases"].get("e2e")
    if e and "error" not in e:
        lines += ["| workload | einsat graph ms | einsat eager ms | torch eager ms | graph/torch | rel err | "
                  "profile sum ms | predicted/measured |", "|---|---|---|---|---|---|---|---|"]
        for name, r in e.items():
            if not isinstance(r, dict):
                continue
            f = lambda k, fmt="{:.3f}", r=r: (fmt.format(r[k]) if isinstance(r.get(k), (int, float))  # noqa: E731
                                              else str(r.get(k, "-")))
            lines.append(f"| {name} | {f('einsat_graph_ms')} | {f('einsat_eager_ms')} | {f('torch_eager_ms')} | "
                         f"{f('ratio_graph_vs_torch', '{:.2f}')} | {f('rel_error', '{:.1e}')} | "
                         f"{f('profile_sum_ms')} | {f('prediction_ratio', '{:.2f}')} |")
        lines.append("")
    o = d["phases"].get("optimized")
    if o and "error" not in o:
        lines += ["| workload | nodes | input ms | optimized ms | measured speed-up [min, max] | modeled | "
                  "rel err opt. | torch eager ms | torch.compile reduce-overhead ms | torch.compile max-autotune ms |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in o.items():
            if not isinstance(r, dict) or "speedup" not in r:
                lines.append(f"| {name} | {r.get('error', r.get('skipped', r)) if isinstance(r, dict) else r} |")
                continue
            lines.append(f"| {name} | {r['nodes_before']} → {r['nodes_after']} | {r['input_ms']:.3f} | "
                         f"{r['optimized_ms']:.3f} | {r['speedup']:.2f}x [{r['speedup_min']:.2f}, "
                         f"{r['speedup_max']:.2f}] | {r['modeled_speedup'] or float('nan'):.2f}x | "
                         f"{r['optimized_rel_error']:.1e} | "
                         + " | ".join(_torch_cell(r, k) for k in TORCH_KINDS) + " |")
        lines += ["", "torch columns: the input program in PyTorch, same weights (median CUDA-event ms; in "
                  "parentheses torch's ms over einsat's optimized ms: above 1x einsat is faster).", ""]
    c = d["phases"].get("check")
    if c and "error" not in c:
        lines += ["| workload | verdict | kept | input ms | optimized ms | speed-up | faster rounds | p | "
                  "stale entries re-timed |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in c.items():
            r = r if isinstance(r, dict) else {"error": r}
            cmp = r.get("comparison")
            if not cmp:
                what = r.get("verdict", r.get("error", r.get("skipped")))
                lines.append(f"| {name} | {what} | {r.get('kept', '-')} |")
                continue
            lines.append(f"| {name} | {r['verdict']} | {r['kept']} | {cmp['baseline_ms']:.3f} | "
                         f"{cmp['candidate_ms']:.3f} | {cmp['speedup']:.2f}x | {cmp['wins']}/{cmp['rounds']} | "
                         f"{cmp['p_value']:.3f} | "
                         f"{len(r.get('reprofiled', []))} |")
        lines.append("")
    for name, r in (d["phases"].items()):
        if isinstance(r, dict) and "error" in r:
            lines.append(f"Phase {name} failed: {r['error']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-session"))
    p.add_argument("--phases", default="env,tests,profile-e2e,e2e,profile",
                   help="comma-separated, in order: env, tests, profile-e2e (the e2e programs' signatures), "
                        "e2e, profile (all exported signatures), bench, profile-optimized, optimized, check, "
                        "breakdown (opt-in)")
    p.add_argument("--deadline", type=float, default=560.0, help="seconds from the start to finish by")
    p.add_argument("--reserve", type=float, default=20.0, help="seconds the profile leaves for the phases after it")
    p.add_argument("--test-budget", type=float, default=240.0)
    p.add_argument("--reps", type=int, default=30, help="repetitions per profiled signature")
    p.add_argument("--e2e-reps", type=int, default=100)
    p.add_argument("--workloads", default=",".join(E2E))
    p.add_argument("--optimized", default=os.path.join(ROOT, ".gpuopt"),
                   help="folder of packed optimized programs (scripts/export_optimized.py)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per optimized workload")
    p.add_argument("--round-reps", type=int, default=20, help="CUDA-graph replays per round")
    p.add_argument("--compile-timeout", type=float, default=300.0,
                   help="seconds a torch.compile (max-autotune) may take before it is recorded as timed out")
    p.add_argument("--no-torch", dest="torch", action="store_false",
                   help="the optimized phase times einsat only (no PyTorch eager or torch.compile beside it)")
    p.add_argument("--bench-args", default="--no-optimize --no-compile resnet18 bert")
    p.add_argument("--breakdown", default="bert_tensat,bert",
                   help="the optimized programs (by workload) the breakdown phase takes apart")
    p.add_argument("--breakdown-reps", type=int, default=20, help="runs of each program timed node by node")
    p.add_argument("--breakdown-compile-mode", default="reduce-overhead",
                   help="the torch.compile mode whose kernels the breakdown lists beside einsat's")
    args = p.parse_args(argv)
    s = Session(args.out, args.deadline)
    s.log(f"einsat GPU session: phases {args.phases}, deadline {args.deadline:.0f} s, out {args.out}")
    funcs = {"env": phase_env, "tests": phase_tests, "profile": phase_profile, "e2e": phase_e2e,
             "bench": phase_bench, "optimized": phase_optimized,
             "profile-optimized": phase_profile_optimized, "check": phase_check, "breakdown": phase_breakdown,
             "profile-e2e": lambda s_, a: phase_profile(s_, a, only_e2e_programs=True)}
    failed = False
    for ph in args.phases.split(","):
        if ph not in funcs:
            p.error(f"unknown phase {ph!r}")
        if s.left() < 15:
            s.data["phases"][ph] = {"skipped": "deadline"}
            continue
        try:
            s.data["phases"][ph] = funcs[ph](s, args)
        except Exception as e:
            failed = True
            s.data["phases"][ph] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            s.log(f"{ph}: ERROR {type(e).__name__}: {e}")
        s.save()
    print(summary_markdown(s.data))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
