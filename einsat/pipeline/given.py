"""The file as given: under a cost model that measures onnxruntime (cost "cpu"), the file `save`
would write is timed against the ONNX file the user gave, and where the given file is measured
faster beyond noise, it is the one written, unchanged.

einsat reads a file into its own program (constants folded, BatchNorm folded into convolutions,
views simplified) and writes its program back in its own way; onnxruntime then applies its own
graph fusions to whichever file it opens, and those differ. On BERT's legacy export onnxruntime
fuses eight SkipLayerNormalizations in einsat's leaner writing and none in the export, a kernel
measured slower on the development machine (docs/dynamic-shapes.md): a run that returned its input
still wrote a file 0.949x to 0.963x as fast as the one it was given
(benchmarks/results/dynamic_quiet.md). The optimizer's own side-by-side check
compares programs in einsat's writing (`pipeline.measure`); this one compares the files, at the
run's shapes, and for a symbolic program at each size the user named (`Load(sizes=)`), so the
file written is never measured slower than the one given on the target it was measured for.

Which file must show that it is faster depends on what the run returns. An optimized result was
measured faster than einsat's writing of the input; it is written unless the given file is
measured faster than it beyond noise at some size. When the run returned its input, einsat's
writing of it replaces the given file only where it is measured faster beyond noise at every
size, and not measured slower beyond noise at any other thread count the file will run at
(`Measure(not_slower_at=)`): BatchNorm folded into hf_mobilenet_v2's convolutions ran 2.822x
and 3.068x at 1 and 2 threads (benchmarks/results/peers_bf54075.md);
otherwise the file is the one
given, byte for byte.

The check is skipped, and the report says why, where the given file is not the same program
(`Load(fill_weights=)` replaced its weights; a half-precision run) or cannot be written as it is
(`opset=` below the file's opset, external weight files). Under a budget, a size whose rounds
would not fit in what is left is not timed, and the file that needs no proof is written: the
given one where the run returned its input, else the result.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import onnx

log = logging.getLogger("einsat.optimize")

SOURCES = (str, bytes, bytearray, memoryview, onnx.ModelProto)


def is_file(program) -> bool:
    """Whether `program` is an ONNX model given as a path, bytes or a ModelProto."""
    import os
    return isinstance(program, SOURCES) or isinstance(program, os.PathLike)


def _file_opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _external(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def _raw_bytes(source) -> bytes | None:
    """The given file's bytes as the user handed them: a path's contents, or the bytes themselves."""
    import os
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read()
    return None


def why_not(model: onnx.ModelProto | None, options) -> str | None:
    """Why the given file cannot stand for the result, or None when it can (`model` None: what the
    options alone say, before the file is read)."""
    if options.loading.fill_weights is not None:
        return "Load(fill_weights=) gave it other weights"
    if options.precision != "fp32":
        return f"the run converts it to {options.precision}"
    if model is None:
        return None
    if options.opset is not None and _file_opset(model) > options.opset:
        return f"its opset {_file_opset(model)} is above opset={options.opset}"
    if _external(model):
        return "its weights are in external files"
    return None


def keep_given(result, source, options, left_s: float | None = None):
    """`result` with `result.given` set to the given file's bytes where that file wins (the module
    docstring: an optimized result stands unless the given file is measured faster beyond noise at
    some size; einsat's writing of an input it returned must be measured faster at every size);
    `result.report.given` says what was compared. Does nothing unless the run's model measures
    onnxruntime (cost "cpu"). `left_s`: the seconds the run's budget has left (None: no budget).
    A size whose rounds would not fit in what is left (estimated from the run's own side-by-side
    check, scaled by the modeled cost at that size) is not measured, and the file that needs no
    proof is written: the given one where the run returned its input, else the result."""
    from einsat.ir.onnx.read import read_model
    from einsat.pipeline import measure

    model = options.model()
    if not measure.measured(model) or model.target != "onnxruntime" or result.input is None:
        return result
    start = time.perf_counter()
    report = result.report
    skip = why_not(None, options)
    if not skip:
        # the file's own bytes where it came as bytes or a path (written back as they are), read once
        raw = _raw_bytes(source)
        given, label = read_model(source if raw is None else raw)
        label = label if raw is None or isinstance(source, (bytes, bytearray, memoryview)) else str(source)
        given_bytes = given.SerializeToString() if raw is None else raw
        skip = why_not(given, options)
    if skip:
        report.given = {"compared": False, "why": skip}
        return result
    from einsat.runtime.profiler import SAMPLE_US
    reps = options.measuring.check_reps or measure.CHECK_REPS
    named = [r for r in report.sizes or [] if r.get("named") and "error" not in r]
    rows = [(r["sizes"], r.get("cost_before")) for r in named] or [(None, report.cost_before)]
    each_ms = (report.measured or {}).get("baseline_ms")  # the input at the run's (or the probe's) shapes

    def need_s(cost) -> float:  # two files, warm-up and rounds, and a confirming block
        if each_ms is None or not cost or not report.cost_before:
            return 0.0
        return 2 * 2 * (reps + 3) * max(each_ms * cost / report.cost_before, SAMPLE_US / 1e3) / 1e3

    written = result.onnx_bytes()
    returned_input = bool(report.kept_input)
    compared: list[dict[str, Any]] = []
    kept, why = None, None
    for sizes, cost in rows:
        if left_s is not None and time.perf_counter() - start + need_s(cost) > left_s:
            at = f" at {shown(sizes)}" if sizes else ""
            why = (f"the budget left too little to time the files{at} (about {need_s(cost):.1f} s): "
                   + ("the given file is written" if returned_input else "einsat's result stands"))
            kept = (sizes or {}) if returned_input else None
            break
        try:
            if returned_input:  # is einsat's writing of the input faster (and not slower at the other counts)?
                c = compare_files(result.input, sizes, given_bytes, written, written, reps, model.threads)
                einsat_speedup, decides = c.speedup, not c.faster
                c.other_threads = []
                for threads in options.measuring.not_slower_at:
                    if decides or threads == model.threads:
                        continue
                    there = compare_files(result.input, sizes, given_bytes, written, written, reps, threads)
                    c.other_threads.append(measure.count_record(threads, there))
                    decides = there.slower
            else:  # is the given file faster than einsat's result?
                c = compare_files(result.input, sizes, written, given_bytes, written, reps, model.threads)
                einsat_speedup, decides = 1 / c.speedup if c.speedup else 0.0, c.faster
        except Exception as e:  # noqa: BLE001 - a file onnxruntime cannot run here is not timed; said so
            report.given = {"compared": False, "why": f"onnxruntime could not run the two files: {e}"}
            return result
        compared.append({"sizes": sizes, "einsat_speedup": einsat_speedup,
                         "comparison": measure.verdict_record(c)})
        if decides:
            kept = sizes or {}
            break
    if not compared:
        report.given = {"compared": False, "kept": kept is not None, "why": why}
    else:
        report.given = {"compared": True, "kept": kept is not None, "returned_input": returned_input, "file": label,
                        "per_size": compared, "stopped": why, "seconds": time.perf_counter() - start}
        report.times["given"] = report.given["seconds"]
    if kept is not None:
        at = " at " + shown(kept) if kept else ""
        log.warning("%s: %s%s: the given file is written unchanged", label,
                    why or ("einsat's writing of the input it returned was not measured faster" if returned_input
                            else "the given file was measured faster than einsat's result"), at if not why else "")
        result.given = given_bytes
    return result


def shown(sizes) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def compare_files(graph, sizes, baseline: bytes, candidate: bytes, written: bytes, reps: int, threads: int):
    """Two files timed side by side on onnxruntime (`runtime.profiler.compare_programs`: interleaved,
    a verdict of faster confirmed on new sessions) on the same random inputs: those of `graph` (the
    run's input program) at `sizes` (None: its own shapes). `written` is the one einsat wrote (its
    session leaves off the optimizers onnxruntime gets wrong on einsat's programs); the other runs
    as onnxruntime runs it for the user."""
    from einsat.cost.profile_db import SPINNING
    from einsat.ir.graph import Graph
    from einsat.ir.symbolic import instantiate
    from einsat.runtime.backend_onnxruntime import new_session, unsafe_optimizers
    from einsat.runtime.inputs import random_inputs
    from einsat.runtime.profiler import compare_programs, sampled_runner

    at: Graph = instantiate(graph, sizes) if sizes else graph
    feeds = random_inputs(at, 0)

    def runner(data: bytes, seed: int):
        session = new_session(data, threads=threads, spinning=SPINNING,  # as every session einsat times
                              disabled_optimizers=unsafe_optimizers(at) if data is written else ())
        names = {i.name for i in session.get_inputs()}
        mine = {k: v for k, v in feeds.items() if k in names}
        return sampled_runner(lambda: session.run(None, mine))

    return compare_programs(baseline, candidate, reps=reps, runner=runner, threads=threads)


def given_lines(report, other_threads=lambda comparison: "") -> list[str]:
    """The report's lines on the given file (`report.given`), empty when it was not compared;
    `other_threads(comparison)`: the text of a comparison's verdicts at other thread counts (the
    report's `other_threads_text`)."""
    g = getattr(report, "given", None)
    if not g:
        return []
    if not g["compared"]:
        if g.get("kept"):
            return [f"  file: the GIVEN FILE is written unchanged, not timed ({g['why']})"]
        return [f"  file: einsat's writing was not timed against the given file ({g['why']})"]
    measured = "; ".join(f"{row['einsat_speedup']:.3f}x" + (f" at {shown(row['sizes'])}" if row["sizes"] else "")
                         + other_threads(row["comparison"]) for row in g["per_size"])
    stopped = f"; then {g['stopped']}" if g.get("stopped") else ""
    if g["kept"] and g["returned_input"]:
        slower = any(o["slower"] for row in g["per_size"] for o in row["comparison"].get("other_threads") or ())
        why = ("measured slower beyond noise at another thread count it will run at (Measure(not_slower_at=))"
               if slower else "not measured faster beyond noise")
        return [f"  file: the GIVEN FILE is written unchanged: einsat returned its input, and its writing of it was "
                f"{why} (einsat's file against the given one: {measured}{stopped})"]
    if g["kept"]:
        return [f"  file: the GIVEN FILE is written unchanged: measured faster than einsat's result beyond noise "
                f"(einsat's file against it: {measured})"]
    if g["returned_input"]:
        return [f"  file: einsat's writing of the input, measured faster than the given file beyond noise at every "
                f"size: {measured}"]
    return [f"  file: einsat's result measured against the given file: {measured} (not slower beyond noise{stopped})"]
