"""GPU latencies of one program, four ways, on the same inputs and weights.

- einsat on its CuPy backend, the original and the optimized program: `CompiledProgram` replays
  (static memory plan, one CUDA graph launch), and the interpreter loop over device-resident
  values for comparison (inputs and weights uploaded once, nothing copied back while timed);
- PyTorch eager (cuDNN, cuBLAS) and `torch.compile` in the two modes a user would pick instead
  of einsat, "reduce-overhead" (CUDA graphs) and "max-autotune" (Inductor autotuning its GEMMs
  and convolutions, and CUDA graphs), all built from the original graph by
  `benchmarks.torch_baseline` with the graph's own weights. Each compile is given
  `torch_baseline.COMPILE_TIMEOUT_S` (max-autotune can take minutes on convolutions); one that
  takes longer is recorded as `{"error": "compile timed out after ... s"}`, never waited out.

All in fp32 with TF32 off in cuBLAS and cuDNN (einsat's backend and PyTorch alike). Each
latency is the median of at least 100 repetitions after warm-up, timed with CUDA events on the
stream the work runs on, all repetitions enqueued before one synchronization (so an interval
holds the host's launch gaps only where the host, not the GPU, is the bottleneck). Outputs are
checked against NumPy before timing. Needs CuPy and a device; PyTorch parts need torch.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

MIN_REPS = 100


def device_name() -> str | None:
    """The CUDA device CuPy finds, or None (no CuPy, no driver, no device)."""
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no CuPy, no driver or no device: the CPU part of the harness runs alone
        return None


def summary(times: list[float]) -> dict:
    ts = sorted(times)
    return {"median_ms": statistics.median(ts), "min_ms": ts[0], "p90_ms": ts[int(0.9 * (len(ts) - 1))],
            "reps": len(ts)}


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    want = np.asarray(want, dtype=np.float64)
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max(initial=0.0) / scale)


def cuda_event_times(fn, reps: int, warmup: int = 10, stream=None) -> list[float]:
    """CUDA-event times (ms) of `reps` calls of `fn` on `stream` (default: the current one), after
    `warmup` untimed calls; every repetition is enqueued before one synchronization."""
    import cupy as cp

    from einsat.gpu.timing import event_times
    return event_times(cp, fn, reps, warmup, stream)


def op_by_op(graph, backend, inputs: dict):
    """A call running `graph` through einsat's interpreter loop on `backend`, over the
    device-resident `inputs` (uploaded once; weights come through `backend.constant`, which the
    device caches), returning the outputs in order."""
    from einsat.runtime.interpreter import evaluate

    return lambda: list(evaluate(graph, inputs, backend).values())


def einsat_latency(graph, feeds: dict, reference: dict, reps: int = MIN_REPS, warmup: int = 10) -> dict:
    """`graph` on einsat's CuPy backend, two ways: `CompiledProgram` (static memory plan, one
    CUDA graph launch when the program allows it) and the interpreter loop (one launch per op,
    Python in between). Each with its error against `reference`."""
    import cupy as cp

    from einsat.gpu.interpreter import get_backend
    from einsat.gpu.program import CompiledProgram

    prog = CompiledProgram(graph)
    outs = prog.run(feeds)
    # the program replays on its own stream; CompiledProgram keeps it private (no public handle yet)
    stream = getattr(prog, "stream", None) or getattr(prog, "_stream", None) or cp.cuda.get_current_stream()
    compiled = {**summary(cuda_event_times(prog.replay, max(reps, MIN_REPS), warmup, stream)), "mode": prog.mode,
                "rel_error": max(rel_error(outs[n], reference[n]) for n in graph.outputs)}
    del prog

    be = get_backend("cupy")
    run_once = op_by_op(graph, be, {n: be.from_numpy(np.asarray(feeds[n])) for n in graph.inputs})
    err = max(rel_error(be.to_numpy(o), reference[n]) for n, o in zip(graph.outputs, run_once()))
    times = cuda_event_times(run_once, max(reps, MIN_REPS), warmup, cp.cuda.get_current_stream())
    return {**compiled, "interpreted": {**summary(times), "rel_error": err},
            "host_fallbacks": dict(getattr(be, "host_fallbacks", {}))}


def torch_latencies(graph, feeds: dict, reference: dict, reps: int = MIN_REPS, warmup: int = 10,
                    compile: bool = True, modes=None, compile_timeout_s: float | None = None) -> dict:
    """PyTorch eager and (optionally) torch.compile latencies of `graph`, same weights and inputs:
    {"eager": ..., "reduce-overhead": ..., "max-autotune": ...} (`modes`, default
    `torch_baseline.COMPILE_MODES`), each a latency summary with its error against `reference`
    and its first call's seconds (the compile), or {"error": ...} (a compile timed out, failed)."""
    import torch

    from benchmarks.torch_baseline import (
        COMPILE_MODES,
        COMPILE_TIMEOUT_S,
        TorchProgram,
        compiled,
        first_call,
        plain_graph,
        set_precision,
    )

    set_precision(tf32=False)
    dev = torch.device("cuda")
    module = TorchProgram(plain_graph(graph)).eval().to(dev)
    args = [torch.from_numpy(np.asarray(feeds[n])).to(dev) for n in graph.inputs]
    result = {"torch": torch.__version__}
    variants = [("eager", None)] + ([(m, m) for m in (modes or COMPILE_MODES)] if compile else [])
    for label, mode in variants:
        try:
            fn = module if mode is None else compiled(module, mode)
            with torch.inference_mode():
                t0 = time.perf_counter()
                outs = first_call(fn, args, compile_timeout_s or COMPILE_TIMEOUT_S)  # compiles (and autotunes)
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                err = max(rel_error(o.float().cpu().numpy(), reference[n]) for n, o in zip(graph.outputs, outs))
                for _ in range(warmup):
                    fn(*args)
                torch.cuda.synchronize()
                times = []
                for _ in range(max(reps, MIN_REPS)):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn(*args)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
            result[label] = {**summary(times), "rel_error": err, "first_call_s": first_s}
        except Exception as e:  # a compile that timed out or failed is a cell of the table, not a crash
            result[label] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return result


def measure(original, optimized, feeds: dict, reference: dict, reps: int = MIN_REPS, compile: bool = True,
            log=print) -> dict:
    """The four latencies of one workload; a part that fails is recorded with its error."""
    out: dict = {"device": device_name()}
    parts = [("einsat", lambda: einsat_latency(original, feeds, reference, reps))]
    if optimized is not None:
        parts.append(("einsat_optimized", lambda: einsat_latency(optimized, feeds, reference, reps)))
    parts.append(("pytorch", lambda: torch_latencies(original, feeds, reference, reps, compile=compile)))
    for label, fn in parts:
        try:
            out[label] = fn()
        except Exception as e:  # recorded in the results, never hidden
            out[label] = {"error": f"{type(e).__name__}: {e}"}
            log(f"    {label}: {out[label]['error']}")
    return out
