"""`einsat.optimize`: a program in, a cheaper equivalent program out, and a report.

    result = einsat.optimize("model.onnx", cost="h100")
    result.graph            # the optimized ir.Graph
    print(result.report)    # modeled cost before/after, e-graph, extraction, verification, times

The pipeline: load -> e-graph session (the input program, then the rewrite schedule under
limits) -> export -> extraction (ILP or greedy, started from the input's own program, so the
modeled cost never goes up) -> numeric verification against the input, which always runs: a
mismatch raises `VerificationError`, never returns a wrong program.

A run can have a time budget for the whole of it (`budget=`: seconds, or an `einsat.budget.Budget`
shared with the caller) and can be stopped: a first Ctrl-C (or `Budget.cancel()`) during the
search ends saturation after its current phase and the ILP at its next check, and the best
program found so far is extracted, verified and returned (`report.interrupted`). A second
Ctrl-C raises `KeyboardInterrupt`. Phases are logged on the `einsat.optimize` logger.

This module imports HiGHS and egglog only when `optimize` runs: `import einsat` stays light
(the GPU machine has neither); the cost models' names (`einsat.cost.models`) need neither.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from einsat import budget as budgets
from einsat import measure
from einsat.cost.models import DEFAULT_COST, cost_model
from einsat.errors import EinsatError, VerificationError
from einsat.extract.extraction import METHODS
from einsat.ir.graph import Graph
from einsat.ir.precision import convert, half_dtype
from einsat.ir.types import is_float
from einsat.memory import MemoryWatch
from einsat.optimize_report import Report, SaturationSummary, Verification
from einsat.progress import ProgressEvent

EXTRACTION_TIME_LIMIT = 5.0  # seconds of ILP by default
SATURATION_SHARE = 0.5       # of a run's budget, at most, for saturation
CHECK_SHARE = 0.2            # of what is left after saturation, kept for the rebuild
VERIFY_MARGIN = 1.5          # the candidate's verification runs, held back from a budget: this times the reference's

log = logging.getLogger(__name__)


@dataclass
class Result:
    """The optimized program, the report of how it was found and checked, and the input program."""

    graph: Graph
    report: Report
    input: Graph | None = None
    recipe: Graph | None = None  # with optimize(recipe=True): the result's new weights from the input's


    def __iter__(self):  # `graph, report = einsat.optimize(g)`
        return iter((self.graph, self.report))

    def _repr_html_(self) -> str:
        from einsat.viz.report import report_html
        return report_html(self.report, before=self.input, after=self.graph, standalone=False)


def optimize(program, example_inputs=None, *, cost=DEFAULT_COST, rules=None, limits=None, extractor: str = "ilp",
             time_limit: float | None = None, budget=None, verify: bool | str = True, progress=None,
             profile_budget: float | None = None, check_reps: int | None = None, recheck: bool = False,
             recipe: bool = False, partition=None, input_shapes=None, fill_weights: str | None = None,
             seed: int = 0, threads: int | None = None, precision: str = "fp32", half_io: bool = False) -> Result:
    """Optimize `program`: an `ir.Graph`, an ONNX path/bytes/ModelProto, or an imperative
    NumPy-style function, functionalized first on `example_inputs` (see `einsat.functionalize`).

    example_inputs: for a function, its example arguments (a tuple, as for `functionalize`);
        for any program, inputs to verify on (a tuple in input order, or a dict by name) besides
        random ones. Index-valued inputs need them: random integers may fall out of range, so
        a program with integer inputs and example inputs is verified on the examples only.

    cost: a cost model or its name (`einsat.cost.models`: "h100", "h200", "cpu", ...). A model
        that measures its target ("cpu": onnxruntime on this machine) is profiled: the input's
        signatures before saturation (the search's generators cost by them), the candidates'
        after it (`einsat.measure`: those the cached profile lacks, within `profile_budget`
        seconds together, default 120), and the result is timed against the input on
        the target (`check_reps` interleaved rounds, default 15): a result not faster beyond
        noise is not returned, the input is, and the report says so (`report.kept_input`).
        The verdict is kept beside the profile: a later run that extracts the same result from
        the same input reuses it (the report says when it was measured); `recheck=True` times
        the two programs again.
    rules: a rewrite schedule (default: `einsat.rewrites.schedule.default_schedule()`).
    limits: saturation limits (`einsat.egraph.session.Limits`; default: its defaults), and the
        run's memory: `memory_gb` (default 4) bounds the resident memory the run adds to the
        process (`einsat.memory.MemoryWatch`, sampled from a thread). Past it the run stops as
        a Ctrl-C stops it: the best program found so far is extracted, verified and returned,
        `report.stop == "memory limit"`. The peak is in `report.memory` either way.
    extractor: "ilp" (HiGHS, warm-started from greedy and from the input) or "greedy".
    time_limit: seconds for the ILP (default 5).
    budget: seconds for the whole run (or a `Budget`, which the caller may also cancel). The
        input program runs on the verification's inputs first (their time is the "reference"
        phase), and the candidate's runs are held back from the budget (as long as the
        reference's, with a margin); saturation gets at most half of what is left when it starts,
        the ILP what is left after keeping a fifth for the rebuild. The run may pass it by the
        e-graph's set-up and one saturation phase (egglog cannot be interrupted) and by a
        candidate much slower on NumPy than the input.
    verify: check the result numerically against the input on random inputs (default: yes;
        a mismatch raises `VerificationError`; the report says whether the check "proved" the
        result or was "inconclusive": outputs that do not vary could not have failed).
        "prove": an inconclusive check raises `VerificationError` too. Turning it off
        (False) is reported loudly.
    progress: a callable receiving `ProgressEvent`s (the CLI passes a `ProgressDisplay`).
    recipe: also return `Result.recipe`, the weights the optimizer made (folded weight-only
        values) as a program over the input's weights (`einsat.egraph.weights.weight_recipe`):
        running it on other weights of the same shapes gives the result's weights for those.
        A partitioned program's recipe joins its pieces' (`partition.driver.joined_recipe`).
    input_shapes, fill_weights, seed: for an ONNX model, how it is imported (`einsat.load_onnx`):
        `input_shapes={name: shape}` fixes its symbolic dims, `fill_weights="random"` gives its
        stripped or placeholder weights seeded (`seed`) random values.
    partition: how a large program is split into pieces optimized apart (`einsat.partition`):
        None (the default) partitions programs above `Partitioning().above` nodes, a
        `Partitioning` sets the piece size, reuse and parallelism, False never partitions.
        The pieces' reports are in `report.partition`.
    threads: the intra-op threads `cost="cpu"` profiles and measures at: the count the program
        will be deployed with (default 1; a verdict taken at one thread says nothing of sixteen).
        The CPU profile is kept per count, and the report says which was measured.
    precision: "fp32" (the default), "tf32" (the same fp32 program: only a GPU's matrix products
        would read it, to run on TF32 tensor cores), "bf16" or "fp16": an fp32 program is first
        converted (`einsat.ir.precision.convert`: weights cast once, products in half with fp32
        accumulation, statistics in fp32, outputs cast back) and the conversion verified against
        it (`einsat.verify.precision`: a bound from the precision and the program's depth; past
        it, `PrecisionError` names the worst output and the first value where the error grows);
        the half program is then optimized, and the result checked against the fp32 input with
        the same bound. The error distribution is in `report.precision`. A program already in
        half is optimized as it is.
    half_io: with a half precision, the program's inputs and outputs are half too.
    """
    method = extractor
    if method not in METHODS:
        raise EinsatError(f"unknown extractor {extractor!r}; choose 'ilp' or 'greedy'")
    model = _with_threads(cost_model(cost), threads, cost)
    run = budgets.of(budget)
    importing = dict(input_shapes=input_shapes, fill_weights=fill_weights, seed=seed)
    if half_dtype(precision) is not None:  # (an unknown precision is refused here)
        source = _load(program, example_inputs, importing)
        half = convert(source, precision, half_io)
        if half is not source:
            examples = _examples(source, example_inputs)
            from einsat.verify.precision import verify_conversion

            conversion = verify_conversion(source, half, precision, inputs=examples, seed=seed)
            result = optimize(half, _retyped(half, examples), cost=cost, rules=rules, limits=limits,
                              extractor=extractor, time_limit=time_limit, budget=run, verify=bool(verify),
                              progress=progress, profile_budget=profile_budget, check_reps=check_reps,
                              recheck=recheck, recipe=recipe, partition=partition, seed=seed, threads=threads)
            result.report.precision = conversion
            if verify:  # the proof: the result against the fp32 input, within the precision's bound
                result.report.precision = verify_conversion(source, result.graph, precision, inputs=examples,
                                                            seed=seed)
                result.report.verification = _precision_verification(result.report.precision, verify)
            return result
    if partition is not False:
        from einsat.partition import Partitioning, optimize_partitioned

        settings = partition if partition is not None else Partitioning()
        if not isinstance(settings, Partitioning):
            raise EinsatError(f"partition= takes a Partitioning, None or False, not {type(partition).__name__}")
        graph = _load(program, example_inputs, importing)
        if verify:
            _before_search(graph, program, verify, _examples(graph, example_inputs))
        if len(graph.nodes) > settings.above:
            with _watch(_limits(limits), run) as watch:  # this process's memory: pieces in workers are their own
                result = optimize_partitioned(graph, settings, example_inputs=example_inputs, cost=model,
                                              rules=rules, limits=limits, extractor=extractor,
                                              time_limit=time_limit, budget=run, verify=verify, progress=progress,
                                              profile_budget=profile_budget, check_reps=check_reps, recheck=recheck,
                                              recipe=recipe)
            result.report.memory = watch.summary()
            return result
        program, importing = graph, None  # imported once

    def notify(event: ProgressEvent) -> None:
        log.info("%s", event)
        if progress is not None:
            progress(event)

    times: dict[str, float] = {}
    start = time.perf_counter()

    def phase(name: str, t0: float) -> float:
        now = time.perf_counter()
        times[name] = now - t0
        return now

    t = start
    limits = _limits(limits)
    with _watch(limits, run) as watch:
        reference, held = None, 0.0
        try:
            with run.interruptible():
                notify(ProgressEvent("load", "reading the program"))
                graph = _load(program, example_inputs, importing)
                examples = _examples(graph, example_inputs)
                if verify and partition is False:  # else checked above
                    _before_search(graph, program, verify, examples)
                t = phase("load", t)
                if verify and run.seconds is not None:  # the verification's time, known before the search
                    notify(ProgressEvent("load", "running the input program on the verification's inputs"))
                    reference, candidate_s = prepare_reference(graph, examples=examples)
                    held = run.reserve(VERIFY_MARGIN * candidate_s)
                    t = phase("reference", t)
                profiled, first, seconds = None, None, 0.0
                if measure.measured(model):  # the input's ops first: the search's generators cost by them
                    seconds = measure.PROFILE_BUDGET_S if profile_budget is None else profile_budget
                    if run.seconds is not None:
                        seconds = min(seconds, max(0.0, 0.5 * run.remaining()))
                    notify(ProgressEvent("profile", f"timing the input's ops on {model.target}"))
                    first = measure.profile_input(model, graph, seconds,
                                                  lambda text: notify(ProgressEvent("profile", text)))
                    t = phase("profile", t)
                notify(ProgressEvent("saturate", f"{len(graph.nodes)} nodes into the e-graph"))
                data, saturation = _saturate(graph, rules, _within(limits, run), model, notify, run)
                t = phase("saturate", t)
                if first is not None:
                    notify(ProgressEvent("profile", f"timing the candidates' ops on {model.target}"))
                    profiled = measure.profile_candidates(model, data, graph, max(0.0, seconds - first.seconds),
                                                          lambda text: notify(ProgressEvent("profile", text)))
                    profiled = profiled.after(first)
                    input_s = times["profile"]
                    t = phase("profile", t)
                    times["profile"] += input_s
                notify(ProgressEvent("extract", f"{method} over {data.num_nodes():,} e-nodes", nodes=data.num_nodes(),
                                     classes=len(data.classes)))
                ilp_seconds = EXTRACTION_TIME_LIMIT if time_limit is None else time_limit
                seconds = min(ilp_seconds, max(0.05, run.remaining() * (1 - CHECK_SHARE)))
                if profiled is not None:  # chosen on measured costs where the budget allows
                    def extract_again():
                        left = min(seconds, max(0.05, run.remaining() * (1 - CHECK_SHARE)))
                        return _extract(data, model, method, left, graph, run, notify)

                    timed = profiled.seconds
                    extraction, profiled = measure.choose(model, extract_again, profiled,
                                                          progress=lambda text: notify(ProgressEvent("profile", text)))
                    t = phase("extract", t)
                    times["extract"] -= profiled.seconds - timed  # the chosen ops' timing is profiling
                    times["profile"] += profiled.seconds - timed
                else:
                    extraction = _extract(data, model, method, seconds, graph, run, notify)
                    t = phase("extract", t)
        finally:  # the verification's seconds go back to the budget, whatever happened
            run.release(held)
        if run.cancelled and not (run.reason == "interrupted" and run.on_interrupt is not None):  # else said
            log.warning("%s: verifying the best program found so far", run.reason)
        verification = None
        if verify and identical_program(graph, extraction.graph):  # nothing a run could tell apart
            verification = Verification(trials=0, max_error=0.0, tolerance=0.0, output=graph.outputs[0],
                                        method="optimize.identical_program", status="identical")
            t = phase("verify", t)
        elif verify:
            notify(ProgressEvent("verify", "running both programs on random inputs"))
            verification = verify_equivalent(graph, extraction.graph, examples=examples,
                                             require_proof=verify == "prove", reference_runs=reference)
            t = phase("verify", t)
        if verification is not None:  # what a second Ctrl-C writes from here on (the CLI)
            run.verified = extraction.graph
        result, measured, kept_input = extraction.graph, None, None
        if measure.measured(model) and not run.cancelled:
            notify(ProgressEvent("measure", f"the input and the result side by side on {model.target}"))
            measure.profile(model, model.unit_signatures(result), None)  # the result's fused groups, for the prediction
            result, measured, kept_input = _never_slower(model, graph, result, check_reps or measure.CHECK_REPS,
                                                         recheck)
            t = phase("measure", t)
    times["total"] = t - start
    before = model.graph_cost(graph)
    after = model.graph_cost(result) if measure.measured(model) else extraction.cost
    if measured is not None:  # the modeled figures of the two programs measured, beside the measurement
        measured = {**measured.to_dict(), "measured_at": getattr(measured, "measured_at", None),
                    "threads": model.machine.get("threads"),
                    "predicted_ms": [before / 1e3, model.graph_cost(extraction.graph) / 1e3]}
    report = Report(name=graph.name, model=model.name, model_label=model.label, unit=model.unit, cost_before=before,
                    cost_after=after, ops_before=graph.op_counts(),
                    ops_after=result.op_counts(), saturation=saturation,
                    extraction=extraction.summary(), verification=verification, times=times,
                    cost_by_op_before=model.cost_by_op(graph), cost_by_op_after=model.cost_by_op(result),
                    interrupted=run.cancelled, stop=run.reason, memory=watch.summary(),
                    profile={**profiled.to_dict(), "threads": model.machine.get("threads")} if profiled else None,
                    measured=measured, kept_input=kept_input)
    notify(ProgressEvent("done", f"modeled cost {before:,.1f} -> {after:,.1f} {model.unit}"))
    made = None
    if recipe and result is extraction.graph:  # the input returned (never slower) makes no weights
        from einsat.egraph.weights import weight_recipe
        new = {k: c for k, c in extraction.weight_classes.items() if k not in graph.weights}
        made = weight_recipe(data, new, {k: graph.types[k] for k in graph.weights}, name=f"{graph.name}_recipe")
    return Result(result, report, graph, made)


def identical_program(a: Graph, b: Graph) -> bool:
    """Whether `b` computes what `a` does because it is `a`: the same interface, the same ops in
    the same order with equal attributes, each reading the corresponding values (inputs by name,
    weights by content, node outputs by position). Conservative: False whenever unsure (another
    node order, attributes that do not compare), and the numeric check runs instead."""
    if (len(a.nodes) != len(b.nodes) or a.input_types() != b.input_types() or a.outputs != b.outputs):
        return False
    to_b = {n: n for n in a.inputs}
    try:
        for x, y in zip(a.nodes, b.nodes):
            if x.op is not y.op or len(x.inputs) != len(y.inputs) or len(x.outputs) != len(y.outputs) \
                    or not bool(x.attrs == y.attrs):
                return False
            for i, j in zip(x.inputs, y.inputs):
                if i in a.weights:
                    if j not in b.weights or not np.array_equal(a.weights[i], b.weights[j]) \
                            or a.weights[i].dtype != b.weights[j].dtype:
                        return False
                elif to_b.get(i, i if not i else None) != j:  # "" (an absent optional input) maps to ""
                    return False
            to_b.update(zip(x.outputs, y.outputs))
    except (ValueError, TypeError):  # attributes that do not compare (arrays, graphs)
        return False
    return all(to_b.get(o) == o for o in a.outputs)


def same_program(a: Graph, b: Graph) -> bool:
    """Whether `b` is `a` node for node (op, attributes, types) with equal weights: nothing to measure."""
    if len(a.nodes) != len(b.nodes) or a.weights.keys() != b.weights.keys():
        return False
    try:
        return (all(x.op is y.op and x.attrs == y.attrs and a.node_types(x) == b.node_types(y)
                    for x, y in zip(a.nodes, b.nodes))
                and all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights))
    except (ValueError, TypeError):  # attributes that do not compare (arrays, graphs): measure instead
        return False


def _with_threads(model, threads: int | None, cost):
    """`model` profiling and measuring at `threads` intra-op threads (`optimize(threads=)`):
    for `cost="cpu"` the CPU model of that count (its own profile); None leaves `model` as it is."""
    if threads is None:
        return model
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise EinsatError(f"threads= takes a positive number of intra-op threads, not {threads!r}")
    if not (measure.measured(model) and model.target == "onnxruntime"):
        raise EinsatError(f"threads= sets the intra-op threads cost=\"cpu\" measures onnxruntime at; the cost "
                          f"model {model.name!r} does not measure onnxruntime")
    if model.threads == threads:
        return model
    if cost != "cpu":
        raise EinsatError(f"the cost model given measures at {model.threads} intra-op thread(s), not threads={threads}:"
                          f" pass cost=\"cpu\" with threads=, or einsat.extract.cpu_model(threads={threads})")
    from einsat.cost.target import cpu_model
    return cpu_model(threads=threads)


def _never_slower(model, graph: Graph, result: Graph, reps: int, recheck: bool = False):
    """(the program to return, the measured comparison or None, why the input is returned or None);
    the comparison is kept across runs (`measure.checked`; `recheck` measures again)."""
    if same_program(graph, result):
        return graph, None, "the extraction chose the input program itself"
    try:
        comparison, measured_at = measure.checked(model, graph, result, reps, recheck)
    except Exception as e:  # noqa: BLE001 - a program the target cannot run is not returned as faster
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return graph, None, (f"the programs could not be measured on {model.target} ({type(e).__name__}: {first}): "
                             "the input is returned")
    comparison.measured_at = measured_at  # None: measured by this run
    if comparison.faster:
        return result, comparison, None
    return graph, comparison, (f"the optimized program was not measured faster beyond noise on {comparison.backend} "
                               f"({comparison}): the input is returned")


def _load(program, example_inputs, importing=None) -> Graph:
    """The program as a Graph; `importing`: `load_onnx`'s options, for an ONNX model only."""
    importing = importing or {}
    onnx_model = isinstance(program, (str, os.PathLike, bytes)) or hasattr(program, "graph")
    if not onnx_model and (importing.get("input_shapes") is not None or importing.get("fill_weights") is not None):
        raise EinsatError(f"input_shapes= and fill_weights= apply to an ONNX model, not to "
                          f"{'an einsat Graph' if isinstance(program, Graph) else type(program).__name__}")
    if isinstance(program, Graph):
        return program
    if onnx_model:
        from einsat.ir.onnx.io import load_onnx
        return load_onnx(program, **importing)
    if callable(program):
        if example_inputs is None or isinstance(example_inputs, dict):
            raise EinsatError(f"optimize({getattr(program, '__name__', 'fn')}) needs its example arguments "
                              "as a tuple: einsat.optimize(fn, (x, y, ...))")
        from einsat.frontend import functionalize
        return functionalize(program, tuple(example_inputs))
    raise EinsatError("optimize takes an einsat Graph, an ONNX model or a NumPy-style function, "
                      f"not {type(program).__name__}")


def _before_search(graph: Graph, program, verify, examples) -> None:
    """What would make the verification fail whatever the search found, found before the search:
    an ONNX node nothing implements (`ExecutionError`, naming the file when `program` is one),
    and, with verify="prove", stripped or placeholder weights that leave the input's outputs
    constant (`VerificationError`, "inconclusive")."""
    from einsat.runtime.onnx_nodes import check_runnable

    check_runnable(graph, os.fspath(program) if isinstance(program, (str, os.PathLike)) else None)
    hint = weights_hint(graph) if verify == "prove" else None
    if hint is None:
        return
    from einsat.verify.numeric import equivalent

    with np.errstate(all="ignore"):  # the input against itself: what any comparison with it can show
        reports = [equivalent(graph, graph, inputs, trials=n) for inputs, n in verification_plan(graph, None, examples)]
    if not any(r.status == "proved" for r in reports):
        raise VerificationError(f"the verification of {graph.name!r} would be inconclusive (a proof was required): "
                                f"the input program's outputs do not vary with its inputs, so no comparison with "
                                f"it could fail. {hint}.\n{reports[-1]}", report=reports[-1], status="inconclusive")


def _precision_verification(report, verify) -> Verification:
    """The verification of a half result: `einsat.verify.precision`'s comparison with the fp32
    input (the half program's own check against the converted program, within twice the bound,
    only guards the search). Inconclusive where an output does not vary by u between draws."""
    from einsat.verify.informative import informative

    worst = report.worst
    still = [f"output {o.name!r} varies in {o.varying:.1%} of its elements between input draws"
             for o in report.outputs if not informative(o.varying)]
    verification = Verification(trials=1, max_error=worst.max, tolerance=worst.bound, output=worst.name,
                                method=f"einsat.verify.precision against the fp32 input ({report.precision}, "
                                       "NumPy and ml_dtypes)",
                                status="inconclusive" if still else "proved", notes=still,
                                varying={o.name: o.varying for o in report.outputs})
    if still and verify == "prove":
        raise VerificationError(f"the {report.precision} verification is inconclusive (a proof was required): "
                                + "; ".join(still) + f"\n{report}", report=report, status="inconclusive")
    return verification


def _retyped(graph: Graph, examples: dict | None) -> dict | None:
    """Example inputs in the dtypes of `graph`'s inputs (half, for a half_io conversion)."""
    return None if examples is None else {n: np.asarray(examples[n]).astype(graph.types[n].dtype)
                                          for n in graph.inputs}


def _examples(graph: Graph, example_inputs) -> dict[str, np.ndarray] | None:
    """The example inputs by graph input name (positional ones in the graph's input order)."""
    if example_inputs is None:
        return None
    if isinstance(example_inputs, dict):
        return {k: np.asarray(v) for k, v in example_inputs.items()}
    arrays = [np.asarray(v) for v in example_inputs]
    if len(arrays) != len(graph.inputs):
        raise EinsatError(f"{len(arrays)} example inputs for {graph.name!r}, which takes "
                          f"{len(graph.inputs)}: {list(graph.inputs)}")
    return dict(zip(graph.inputs, arrays))


def _watch(limits, run: budgets.Budget) -> MemoryWatch:
    """The memory watch of a run under `limits.memory_gb` (see `einsat.memory`)."""
    return MemoryWatch(None if limits.memory_gb is None else int(limits.memory_gb * 2**30), run)


def _limits(limits):
    """`limits`, or the defaults (`einsat.egraph.session.Limits`)."""
    from einsat.egraph.session import Limits

    return limits or Limits()


def _within(limits, run: budgets.Budget):
    """`limits` with saturation's time cut to its share of the run's budget."""
    if run.seconds is None:
        return limits
    return dataclasses.replace(limits, time_s=max(0.01, min(limits.time_s, SATURATION_SHARE * run.remaining())))


def _saturate(graph: Graph, rules, limits, model, notify, run: budgets.Budget | None = None):
    """Grow the e-graph of `graph` with `rules` under `limits`; the export and a summary.
    Generators see the cost model and the greedy program of the e-graph (`Session.best`)."""
    from einsat.egraph.session import Session
    from einsat.extract.greedy import greedy_program

    session = Session(limits, cost=model, best=lambda data: greedy_program(data, model))
    session.add_graph(graph)
    if rules is None:
        from einsat.rewrites.schedule import default_schedule
        rules = default_schedule()

    def forward(step: int, nodes: int, elapsed: float) -> None:
        notify(ProgressEvent("saturate", step=step, nodes=nodes, elapsed=elapsed))

    report = session.run(rules, progress=forward, budget=run)
    data = session.export()
    return data, SaturationSummary.of(report, data, session.limits)


def _extract(data, model, method: str, seconds: float, graph: Graph, run: budgets.Budget | None = None,
             notify=None):
    from einsat.extract import extract

    def forward(message: str, cost: float) -> None:
        if notify is not None:
            notify(ProgressEvent("extract", message))

    return extract(data, model, method=method, time_limit=seconds, start=graph, name=graph.name, budget=run,
                   progress=forward)


def verification_plan(reference: Graph, trials: int | None = None, examples: dict | None = None) -> list[tuple]:
    """The comparisons `verify_equivalent` makes, in order: (inputs or None for random ones,
    trials) each; see there."""
    if trials is None:
        trials = 2 if reference.flops() < 2e9 else 1
    indexed = any(not is_float(t.dtype) for t in reference.input_types().values())
    plan = [] if examples is None else [(examples, trials)]
    if not (examples is not None and indexed):
        plan.append((None, trials))
    return plan


def prepare_reference(reference: Graph, trials: int | None = None, seed: int = 0,
                      examples: dict | None = None):
    """The reference's runs for `verify_equivalent(reference, ..., reference_runs=...)`, taken
    now, and the seconds the candidate's runs will take if it runs as fast as the reference
    (`einsat.verify.numeric.ReferenceRuns`)."""
    from einsat.verify.numeric import ReferenceRuns, draws

    runs = ReferenceRuns(reference)
    plan = verification_plan(reference, trials, examples)
    with np.errstate(all="ignore"):
        runs.prepare([d for inputs, n in plan for d in draws(reference, inputs, trials=n, seed=seed)])
    return runs, runs.typical_seconds * sum(n for _, n in plan)


def verify_equivalent(reference: Graph, candidate: Graph, trials: int | None = None,
                      seed: int = 0, examples: dict | None = None, require_proof: bool = False,
                      reference_runs=None) -> Verification:
    """Run both programs on the same random inputs and compare every output.

    The comparison is `einsat.verify.numeric.equivalent` (standard normal floats; a tolerance
    of eps(dtype) * 8 * (op count + sqrt(longest accumulation)), relative to each element and
    to the output's scale; NaN and inf must match; integers exactly), on `trials` random input
    draws (default: 2 for programs under 2 GFLOPs, else 1; the input program always runs on a
    second draw, to show whether its outputs vary). Raises
    `VerificationError` on a mismatch, with the worst element and the nodes behind it.
    `examples`: inputs checked first, with a shuffle of them as a second draw (compared as
    `trials` says, run on the input program at least); with integer-valued inputs (indices),
    only they are checked.

    The result's `status` is "proved" when every output varied between the draws (or, for a
    constant or saturated output, the values feeding its last op did and agree), else
    "inconclusive": the outputs agree, but the comparison could not have failed.
    `require_proof` makes an inconclusive verification a `VerificationError` too.
    `reference_runs`: the reference's runs taken ahead (`prepare_reference`), reused here.
    """
    from einsat.verify.numeric import equivalent

    if reference.input_types() != candidate.input_types() or reference.outputs != candidate.outputs:
        raise VerificationError(f"the optimized program changed the interface of {reference.name!r}: "
                                f"inputs {reference.input_types()} -> {candidate.input_types()}, "
                                f"outputs {list(reference.outputs)} -> {list(candidate.outputs)}")
    reports = []
    with np.errstate(all="ignore"):  # random inputs may take log of negatives: NaN must match
        for inputs, n in verification_plan(reference, trials, examples):
            reports.append(equivalent(reference, candidate, inputs, trials=n, seed=seed, reference=reference_runs))
            if not reports[-1]:
                break
    failed = next((r for r in reports if not r), None)
    if failed is not None:
        bad = next(o for o in failed.outputs if not o.ok)
        where = "the values feeding its last op differ" if bad.feeding and not all(f.ok for f in bad.feeding) \
            else "it differs"
        raise VerificationError(
            f"the optimized program differs from {reference.name!r} on output {bad.name!r} "
            f"({reference.types[bad.name]}) on random inputs ({where}): this is a bug in a rewrite or in "
            f"extraction.\n{failed}", report=failed)
    report = next((r for r in reports if r.status == "proved"), reports[-1])
    worst = max(report.outputs, key=lambda o: o.error)  # error: the fraction of the allowed error
    notes = report.inconclusive()
    hint = weights_hint(reference) if report.status != "proved" else None
    if hint:
        notes.append(hint)
    verification = Verification(trials=report.draws, max_error=worst.error * report.tolerance,
                                tolerance=report.tolerance, output=worst.name, status=report.status,
                                notes=notes,
                                varying={o.name: o.varying for o in report.outputs},
                                feeding={o.name: [f.name for f in o.feeding] for o in report.outputs if o.feeding})
    if require_proof and verification.status != "proved":
        raise VerificationError(f"the verification of {reference.name!r} is inconclusive (a proof was required): "
                                f"the outputs agree, but the comparison could not have failed"
                                f"{f'. {hint}' if hint else ''}.\n{report}", report=report, status="inconclusive")
    return verification


def weights_hint(graph: Graph) -> str | None:
    """Why a verification may have had nothing to compare, in the program's weights, and what to
    do about it: stripped weights (drawn as random inputs, they turn a network's outputs to NaN or
    a constant) or placeholder weights (every element one value, as in the ONNX model zoo's light
    models). None when its weights look real."""
    if graph.stripped_weights:
        return (f"Its {len(graph.stripped_weights)} stripped weights are random inputs here (the ONNX file does "
                "not hold them): import it with fill_weights='random' (--fill-weights random on the command "
                "line) to give them seeded random values")
    flat = sorted(n for n, a in graph.weights.items()
                  if a.size > 1 and is_float(a.dtype) and np.all(a == a.reshape(-1)[0]))
    if flat:
        shown = ", ".join(map(repr, flat[:3])) + (", ..." if len(flat) > 3 else "")
        return (f"{len(flat)} of its weights {'holds' if len(flat) == 1 else 'hold'} one value in every element "
                f"({shown}): placeholders? "
                "fill_weights='random' (--fill-weights random on the command line) gives such weights "
                "seeded random values")
    return None
