"""Timing op signatures on the GPU with CUDA events, and filling the profile database.

For each signature the profiler builds the one-node program (`Signature.graph`), compiles it
(`CompiledProgram`: kernels compiled, cuDNN algorithms chosen, CUDA graph captured) and then
measures two times, each the median over `reps` repetitions after `warmup` untimed ones:

- `us` (cold): before each repetition a memset of `flush_bytes` (≥ 4 × L2, at least 256 MB)
  evicts the inputs from L2 and keeps the GPU busy while the host enqueues the replay, so the
  event pair around the replay measures device time, not launch latency (triton's do_bench);
- `warm_us`: a program of `copies` back-to-back copies of the op, replayed as one CUDA graph,
  divided by `copies`: the per-op time inside a whole-program graph. The copies share the
  first input (L2-resident when it fits, as an op's input fresh from the op before it) and
  read their own copies of the other inputs (weights come from memory: `replicated`).
  End-to-end predictions sum these.

Each entry records the cuDNN algorithms chosen for its convolutions (`cudnn`: the choice and
every candidate's median time over `CHOICE_REPS` repetitions, each a graph of `CHOICE_COPIES`
calls: `CupyDevice.time_ms`) and, timed the same way, the algorithms chosen for its GEMMs
(`gemm`: cuBLAS's default or a cuBLASLt heuristic candidate, `kernels/cublaslt.py`).

Ops that issue no kernel (views) get 0 for both without timing. Inputs are random (normal
floats; valid indices for gather). Only the GPU machine runs this; nothing here needs egglog.

`Profiler.profile` runs its signatures, one per batch, through the timing loop every target
shares (`einsat.runtime.profiler.profile_into`: the time budget, failures kept per signature,
progress, each entry written into the `ProfileDB` as it is measured), and summarizes each
series with the CPU's statistics (`runtime.profiler.summarize`: median, 10th/90th percentiles).

`program_runner(graph, dev)` makes a compiled program a runner of the shared profiler
(`einsat.runtime.profiler`: interleaved rounds, medians, outliers, the time budget), which
`einsat.pipeline.measure` uses for a measured model whose target is "cupy" (`measure.cupy_model`,
cached in the same profile cache as the CPU's, keyed by `device_info`). On a CUDA device a run
is the replay between two CUDA events (after an L2 flush that keeps the GPU busy while the host
enqueues); on a device without events (the host emulation of the tests) it is the replay's wall
time.
"""

from __future__ import annotations

import subprocess
from typing import Callable, Iterable

import numpy as np

from einsat.cost.profile_db import ProfileDB, device_kind
from einsat.gpu.program import CompiledProgram
from einsat.gpu.timing import event_times
from einsat.ir.graph import Graph, Node
from einsat.ir.signature import Signature
from einsat.runtime import random_inputs
from einsat.runtime.profiler import ProfileRun, profile_into, summarize, wall_runner


def replicated(graph: Graph, copies: int) -> Graph:
    """`copies` sequential copies of a one-node graph; the last is the output.

    Every copy reads the same first input (in a program an op's data input was just written
    by the op before it: L2-resident when it fits) and its own copy of each other input
    (weights and second operands come from memory: a program's weights, BERT's far beyond L2,
    are each read once). Signatures do not say which inputs are weights; the first one rarely is.
    """
    node = graph.nodes[0]
    types = graph.input_types()
    own = lambda name, k: name if not name or name == node.inputs[0] else f"{name}_c{k}"  # noqa: E731
    nodes, inputs = [], {}
    for k in range(copies):
        ins = tuple(own(i, k) for i in node.inputs)
        inputs.update({i_k: types[i] for i, i_k in zip(node.inputs, ins) if i})
        nodes.append(Node(node.op, ins, tuple(f"{o}_c{k}" for o in node.outputs), dict(node.attrs), f"copy{k}"))
    outs = tuple(f"{o}_c{copies - 1}" for o in node.outputs)
    return Graph(nodes, inputs, outs, name=f"{graph.name}x{copies}")


def program_runner(graph: Graph, dev, seed: int = 0, flush=None, replays: int = 1):
    """A runner (`runtime.profiler.Runner`: one call, one time in µs) replaying `graph` compiled
    on `dev` with random inputs (see the module docstring); `replays` back-to-back replays
    between the two events (after one flush), the time divided by them: a program of a few
    microseconds is timed over several launches, as a deployment replays it."""
    prog = CompiledProgram(graph, device=dev)
    prog.run(random_inputs(graph, seed))  # inputs in place: each replay reads them
    cp = getattr(dev, "cp", None)
    if cp is None:  # the host emulation: no events
        timed = wall_runner(lambda: [prog.replay() for _ in range(replays)])
        return lambda: timed() / replays

    def run() -> float:
        with prog._on_stream():
            if flush is not None:
                flush.fill(0)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(prog._stream)
            for _ in range(replays):
                prog.replay()
            end.record(prog._stream)
            end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e3 / replays
    return run


def device_info(dev) -> dict:
    """The device, driver and library versions a profile was measured with."""
    cp = dev.cp
    props = dev.properties
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    info = {"name": name, "kind": device_kind(name), "compute_capability": f"{props['major']}.{props['minor']}",
            "sm_count": int(props["multiProcessorCount"]), "l2_bytes": int(props["l2CacheSize"]),
            "memory_bytes": int(props["totalGlobalMem"]), "cuda_driver": int(cp.cuda.runtime.driverGetVersion()),
            "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()), "cupy": cp.__version__, "tf32": dev.tf32}
    for lib in ("cudnn", "cublas"):
        try:
            info[lib] = getattr(dev, lib).version()
        except Exception as e:  # the profile says why a version is missing
            info[lib] = f"unavailable: {e}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        driver, clock, power = (s.strip() for s in smi.stdout.strip().splitlines()[0].split(","))
        info.update(driver=driver, max_sm_clock=clock, power_limit=power)
    except Exception:
        info["driver"] = "unknown (nvidia-smi failed)"
    return info


def stale(entry: dict) -> bool:
    """Whether a profile entry's cuDNN algorithms were chosen otherwise than this device chooses
    them now (`device.CHOICE_TIMER`): its times are of other algorithms, so it is measured again.
    Until 2026-11-26 each candidate was timed one call at a time, and on an H100 the choice
    then varied from run to run (ResNet-18 as a CUDA graph: 1.47 to 1.86 ms; 0.86 ms once the
    candidates were timed in a graph). Likewise its GEMMs' algorithms (`"gemm"`, chosen among
    cuBLAS's default and cuBLASLt's candidates since 2026-11-27); a floating-point GEMM entry that
    records none ran cuBLAS's default only, and is measured again."""
    from einsat.gpu.device import CHOICE_TIMER
    if any(c.get("timer") != CHOICE_TIMER for c in (*entry.get("cudnn", ()), *entry.get("gemm", ()))):
        return True
    sig = entry.get("signature", {})
    from einsat.gpu.lower import GEMM_LOWERED  # the ops whose entries record GEMM algorithm choices
    return (sig.get("op") in GEMM_LOWERED and entry.get("kernels", 0) > 0 and "gemm" not in entry
            and all(i.get("dtype", "").startswith(("float", "bfloat")) for i in sig.get("inputs", ()) if i))


class Profiler:
    """Times signatures on one device (a `CupyDevice`)."""

    def __init__(self, dev=None, reps: int = 50, warmup: int = 5, copies: int = 10, flush_bytes: int | None = None,
                 seed: int = 0):
        if dev is None:
            from einsat.gpu.device import CupyDevice
            dev = CupyDevice()
        self.dev, self.reps, self.warmup, self.copies = dev, reps, warmup, copies
        cp = dev.cp
        l2 = int(dev.properties["l2CacheSize"])
        self.flush_bytes = flush_bytes or max(4 * l2, 256 << 20)
        self.flush = cp.empty(self.flush_bytes, dtype=np.uint8)
        self.rng = np.random.default_rng(seed)

    @property
    def method(self) -> dict:
        from einsat.gpu.device import CHOICE_COPIES, CHOICE_REPS, CHOICE_WARMUP
        return {"reps": self.reps, "warmup": self.warmup, "copies": self.copies, "flush_bytes": self.flush_bytes,
                "statistic": "median", "timer": "cuda events, one synchronization per series",
                "warm": "copies share the first input, each reads its own copy of the others",
                "cudnn_choice": {"warmup": CHOICE_WARMUP, "reps": CHOICE_REPS, "statistic": "median",
                                 "timer": f"{CHOICE_COPIES} calls captured in a CUDA graph (timing.graph_times)"}}

    def _events(self, prog: CompiledProgram, flush: bool, reps: int) -> list[float]:
        before = (lambda: self.flush.fill(0)) if flush else None
        ms = event_times(self.dev.cp, prog.replay, reps, self.warmup, prog._stream, before)
        return [t * 1e3 for t in ms]  # µs

    def time_program(self, prog: CompiledProgram, inputs: dict[str, np.ndarray], flush: bool = True,
                     reps: int | None = None) -> dict:
        """Median device time of one replay of a compiled program (µs), and its spread."""
        prog.run(inputs)
        stats = summarize(self._events(prog, flush, reps or self.reps))
        return {"us": stats["median_us"], "p10_us": stats["p10_us"], "p90_us": stats["p90_us"], "mode": prog.mode,
                "graph_fallback": prog.graph_fallback}

    def time_signature(self, sig: Signature) -> dict:
        graph = sig.graph()
        inputs = random_inputs(graph, self.rng)
        before, choices_before = self.dev.launches, len(self.dev.conv_choices)
        gemms_before = len(getattr(self.dev, "gemm_choices", ()))
        probe = CompiledProgram(graph, device=self.dev, use_graph=False)
        issued = self.dev.launches - before  # the trace, and the planned run, issue them once each
        kernels = issued // 2 if probe.mode != "eager" else issued
        entry = {"flops": sig.flops(), "bytes": sig.bytes(), "kernels": kernels, "reps": self.reps}
        if kernels == 0:  # a view: no device work
            return {"us": 0.0, "warm_us": 0.0, **entry}
        del probe
        cold = self.time_program(CompiledProgram(graph, device=self.dev), inputs, flush=True)
        copies = replicated(graph, self.copies)
        warm = self.time_program(CompiledProgram(copies, device=self.dev), random_inputs(copies, self.rng),
                                 flush=False)
        entry.update(self._choices(choices_before, gemms_before))
        return {"us": cold["us"], "warm_us": warm["us"] / self.copies, "p10_us": cold["p10_us"],
                "p90_us": cold["p90_us"], "graph": cold["mode"], **entry,
                **({"graph_fallback": cold["graph_fallback"]} if cold.get("graph_fallback") else {})}

    def _choices(self, before: int, gemms_before: int = 0) -> dict:
        """The cuDNN algorithms chosen since `before` choices were made and the GEMM algorithms
        since `gemms_before` (each with every candidate's time), for the profile entry."""
        made = self.dev.conv_choices[before:]
        gemms = list(getattr(self.dev, "gemm_choices", ())[gemms_before:])
        return {**({"cudnn": made} if made else {}), **({"gemm": gemms} if gemms else {})}

    def profile(self, sigs: Iterable[Signature], db: ProfileDB | None = None, time_budget_s: float | None = None,
                skip_known: bool = True, progress: Callable[[str], None] | None = None) -> ProfileDB:
        """Time every signature (within the time budget) into `db`; failures are recorded, not fatal.
        `skip_known` skips the signatures `db` has, unless their entry is `stale`. The signatures
        go one at a time through the shared timing loop (`runtime.profiler.profile_into`)."""
        db = db if db is not None else ProfileDB()
        db.device = db.device or device_info(self.dev)
        db.method = self.method
        todo = [s for s in sigs if not (skip_known and s.key in db and not stale(db.entries[s.key]))]
        profile_into(db, todo, lambda batch: ({sig.key: self.time_signature(sig) for sig in batch}, {}),
                     budget_s=time_budget_s, progress=progress, describe=_describe)
        return db


def _describe(done: int, total: int, batch: list[Signature], run: ProfileRun) -> str:
    """The GPU profiler's progress line for one signature: its cold and warm times, or failed."""
    key = batch[0].key
    e = run.entries.get(key)
    return f"[{done}/{total}] {key}: " + (f"{e['us']:.2f} us cold, {e['warm_us']:.2f} us warm" if e else "failed")
