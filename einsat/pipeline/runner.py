"""The run: one program, its `Options`, the phases in order under one planner, the `Result`.

    from einsat.pipeline import Options, run
    result = run(graph, None, Options.of(cost="h100", budget=30))

`run` is what `einsat.optimize` and the command line call (through `einsat.optimize.run`,
which adds partitioning), and what partitioning calls for each piece. In order:

1. precision: a half precision converts the fp32 input first, verifies the conversion, runs
   the half program, and checks the result against the fp32 input (`einsat.verify.precision`);
2. load (import, functionalize; what would fail any verification, found now);
3. partitioning: a program above `Partitioning.above` nodes is handed to `split` (the caller's
   partitioned driver: this package does not import `einsat.partition`, which imports it);
4. reference, profile, saturate, profile, extract or choose, verify, check
   (`einsat.pipeline.phases`), under the memory watch and, for the search, Ctrl-C;
5. the report and, with `recipe`, the result's new weights from the input's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import einsat.budget as _budget
from einsat.ir.graph import Graph
from einsat.ir.precision import convert, half_dtype
from einsat.pipeline import measure, phases
from einsat.pipeline import verification as checks
from einsat.pipeline.events import ProgressEvent
from einsat.pipeline.memory import MemoryWatch
from einsat.pipeline.options import Options, Partitioning
from einsat.pipeline.plan import Planner
from einsat.pipeline.report import Report


@dataclass
class Result:
    """The optimized program, the report of how it was found and checked, and the input program."""

    graph: Graph
    report: Report
    input: Graph | None = None
    recipe: Graph | None = None  # with Options(recipe=True): the result's new weights from the input's
    opset: int | None = None     # optimize(opset=): the cap `save` writes under (None: the newest onnxruntime opens)
    contrib: bool = False        # the run's cost model is onnxruntime's (cost "cpu"): `save` may write its contrib ops
    # cost "cpu" on an ONNX file: the file as given, where it was measured faster than einsat's writing
    # of the result (`einsat.pipeline.given`; `report.given` says what was compared); `save` writes it
    given: bytes | None = field(default=None, repr=False)

    def save(self, path) -> None:
        """Write the optimized program to `path` as ONNX under the run's opset cap (atomically),
        with onnxruntime's com.microsoft ops where the run's target is onnxruntime (`contrib`);
        the given file unchanged where it was measured faster than that (`given`)."""
        if self.given is not None:
            from einsat.ir.onnx.export import write_atomically
            write_atomically(self.given, path)
            return
        from einsat.ir.onnx.io import save_onnx
        save_onnx(self.graph, path, opset=self.opset, contrib=self.contrib)

    def onnx_bytes(self) -> bytes:
        """The file `save` writes, as bytes."""
        if self.given is not None:
            return self.given
        from einsat.ir.onnx.io import to_onnx
        return to_onnx(self.graph, opset=self.opset, contrib=self.contrib).SerializeToString()

    def __iter__(self):  # `graph, report = einsat.optimize(g)`
        return iter((self.graph, self.report))

    def _repr_html_(self) -> str:
        from einsat.viz.report import report_html
        return report_html(self.report, before=self.input, after=self.graph, standalone=False)


# split(graph, options, state) -> Result: the partitioned run of a loaded program (einsat.partition)
Split = Callable[[Graph, Options, "phases.State"], Result]


def run(program, example_inputs, options: Options, split: Split | None = None) -> Result:
    """Optimize `program` with `options` (see `einsat.optimize` for both); `split`: how a
    program above the partitioning threshold is optimized (None: as one e-graph)."""
    if half_dtype(options.precision) is not None:
        return _in_half(program, example_inputs, options, split)
    state = phases.State(options, options.model(), Planner.of(options), options.progress)
    run_budget = state.budget
    start = time.perf_counter()
    with MemoryWatch(_memory_bytes(options), run_budget) as watch:
        try:
            with run_budget.interruptible():  # one context, one count of Ctrl-Cs: loading, the search or the pieces
                phases.load(state, program, example_inputs)
                settings = options.partition if options.partition is not None else Partitioning()
                result = None
                unsearched = _too_small(state)  # the input, said why: no search
                parts = settings is not False and split is not None and len(state.graph.nodes) > settings.above
                if not unsearched and parts:
                    try:  # the whole input's verification runs now, the stitched result's held back
                        phases.reference(state, alternative=False)  # the pieces have theirs, the whole modeled_whole
                        result = split(state.graph, options.replace(partition=settings), state)  # stitched, checked
                    finally:
                        state.planner.release("verify")
                elif not unsearched:
                    try:
                        phases.reference(state)
                        phases.profile_input(state)
                        phases.saturate_phase(state)
                        phases.profile_candidates(state)
                        phases.extract_phase(state)
                        _budget.stop_if_interrupted_twice()  # one HiGHS swallowed, before this context closes
                    finally:  # the verification's seconds go back to the budget, whatever happened
                        state.planner.release("verify")
                said = _budget.acknowledged()  # a Ctrl-C was acknowledged (the CLI, a worker's parent)
            if result is None and unsearched:
                phases.verify(state, state.graph)  # identical: nothing to run
            elif result is None:
                if run_budget.cancelled and not (run_budget.reason == "interrupted" and said):
                    phases.log.warning("%s: verifying the best program found so far", run_budget.reason)
                phases.verify(state)
                phases.verify_alternative(state)  # a measured run's modeled alternative (issue #37)
                phases.check(state, state.extraction.graph)
                if split is not None:  # the top-level run (a piece's has no `split`): the default run's program too
                    _modeled_run(state, options, split)
        finally:
            state.planner.release_all()
    if result is not None:  # partitioned: the pieces' own reports say what they did
        result.report.memory = watch.summary()
        return _reported(result, split)
    state.times["total"] = time.perf_counter() - start
    return _reported(_result(state, watch), split)


def _modeled_run(state: phases.State, options: Options, split: Split) -> None:
    """A measured run's third candidate (`phases.modeled_whole`): the program `einsat.optimize`
    returns without `cost=` (`modeled_run`), timed against the input after the measured choice
    and the e-graph's modeled extraction; kept as `state.modeled_run` (its `extraction` the
    run's `Result`, recipe included), and, where it is returned, as the result."""
    if not measure.measured(state.model):
        return
    tried = [state.extraction.graph] + ([state.alternative.graph] if state.alternative is not None
                                        and state.alternative.graph is not None else [])
    state.result, _, state.modeled_run = phases.modeled_whole(
        state, state.graph, options, state.result, None, tried,
        lambda graph, examples, opts: modeled_run(graph, examples, opts, split), "the measured choice",
        kind="modeled run")
    if state.modeled_run.returned == "modeled run" and state.alternative is not None:
        state.alternative.returned = "modeled run"


def modeled_run(graph: Graph, examples: dict | None, options: Options, split: Split) -> Result:
    """The whole program's run under `options` (the default modeled cost's: `_modeled_run`),
    partitioned as `optimize` partitions it (tests replace this)."""
    return run(graph, examples, options, split)


MIN_SEARCH_S = 0.5  # a budget leaving less than this after loading searches nothing: the input is returned


def _too_small(state: phases.State) -> bool:
    """Whether the run's budget left less than `MIN_SEARCH_S` after loading the program: then the
    input is the result, at once (issue #39: the budget kept, not overrun by a search and a
    verification that cannot fit), with the reason in the report and a warning."""
    budget = state.budget
    if budget.seconds is None or budget.cancelled or budget.remaining() >= MIN_SEARCH_S:
        return False
    from einsat.extract.extraction import Extraction
    left = max(budget.remaining(), 0.0)
    state.kept_input = (f"the budget ({budget.seconds:g} s) had {left:.2f} s left after loading the program, too "
                        f"little for any search (at least {MIN_SEARCH_S:g} s): the input is returned unsearched")
    phases.log.warning("%s", state.kept_input)
    cost = state.model.graph_cost(state.graph)
    state.extraction = Extraction(graph=state.graph, selection={}, cost=cost, method="none",
                                  status="no search: the budget was spent loading", starts={"input": cost})
    state.result = state.graph
    return True


def _reported(result: Result, split: Split | None) -> Result:
    """`result`, what its profiling could not time reported (`measure.report_failures`) by a run
    that may partition (`split`: `optimize`'s): once per run, in the process that called it. A
    piece's run (no `split`, maybe in a worker process) leaves its failures to the whole's report."""
    if split is not None:
        measure.report_failures(result.report.profile)
    return result


def _result(state: phases.State, watch: MemoryWatch) -> Result:
    """The report of a single-graph run, and its result."""
    graph, model, extraction, result = state.graph, state.model, state.extraction, state.result
    times = state.times
    before = model.graph_cost(graph)
    after = model.graph_cost(result) if measure.measured(model) else extraction.cost
    measured = state.measured
    alternative = state.alternative
    # the candidate returned: the modeled alternative where it was measured faster (issue #37)
    source = alternative.extraction if alternative is not None and alternative.returned == "alternative" \
        else extraction
    modeled = state.modeled_run
    by_run = modeled is not None and modeled.returned == "modeled run"  # the default run's program (its own recipe)
    if measured is not None:  # the modeled figures of the two programs measured, beside the measurement
        measured = {**measure.verdict_record(measured), "threads": model.machine.get("threads"),
                    "predicted_ms": [before / 1e3, model.graph_cost(modeled.graph if by_run else source.graph) / 1e3]}
    run_budget, profiled = state.budget, state.profiled
    if profiled is not None and state.checked_profile is not None:
        profiled = profiled.also(state.checked_profile)
    report = Report(name=graph.name, model=model.name, model_label=model.label, unit=model.unit, cost_before=before,
                    cost_after=after, ops_before=graph.op_counts(),
                    ops_after=result.op_counts(), saturation=state.saturation,
                    extraction=extraction.summary(), verification=state.verification, times=times,
                    cost_by_op_before=model.cost_by_op(graph), cost_by_op_after=model.cost_by_op(result),
                    interrupted=run_budget.cancelled, stop=run_budget.reason, memory=watch.summary(),
                    profile={**profiled.to_dict(), "threads": model.machine.get("threads")} if profiled else None,
                    measured=measured, kept_input=state.kept_input,
                    alternative=None if alternative is None else alternative.to_dict(),
                    modeled_run=None if modeled is None else modeled.to_dict())
    state.notify(ProgressEvent("done", f"modeled cost {before:,.1f} -> {after:,.1f} {model.unit}"))
    made = None
    # the input returned (never slower, or unsearched when the budget was spent loading) makes no weights
    if by_run:
        made = modeled.extraction.recipe
    elif state.options.recipe and result is source.graph and state.data is not None:
        from einsat.egraph.weights import weight_recipe
        new = {k: c for k, c in source.weight_classes.items() if k not in graph.weights}
        made = weight_recipe(state.data, new, {k: graph.types[k] for k in graph.weights}, name=f"{graph.name}_recipe")
    return Result(result, report, graph, made, opset=state.options.opset,
                  contrib=bool(getattr(model, "contrib_ops", False)))


def _in_half(program, example_inputs, options: Options, split: Split | None) -> Result:
    """A half precision: the fp32 program converted (and the conversion verified), the half
    program optimized, and the result checked against the fp32 input within the precision's bound."""
    options = options.replace(budget=options.run_budget())  # one budget: the conversion counts
    source = phases.load_program(program, example_inputs, options.loading)
    half = convert(source, options.precision, options.half_io)
    model = options.model()  # the run's cost model, for the two questions below
    if measure.measured(model):  # before the search: a target that cannot run the half program is refused
        _runs_on_onnxruntime(options.precision, half)
    plain = options.replace(precision="fp32", half_io=False, load=None)
    if half is source:  # already in half: optimized as it is
        return run(source, example_inputs, plain, split)
    examples = checks.examples_by_name(source, example_inputs)
    from einsat.verify.precision import verify_conversion

    conversion = verify_conversion(source, half, options.precision, inputs=examples, seed=options.loading.seed)
    result = run(half, checks.retyped(half, examples),
                 plain.replace(verify=bool(options.verify), budget=options.run_budget()), split)
    result.report.precision = conversion
    # the user's fp32 program beside the converted one (a model that measures profiled the half ops only)
    result.report.cost_fp32 = None if measure.measured(model) else model.graph_cost(source)
    if options.verify:  # the proof: the result against the fp32 input, within the precision's bound
        result.report.precision = verify_conversion(source, result.graph, options.precision, inputs=examples,
                                                    seed=options.loading.seed)
        result.report.verification = checks.precision_verification(result.report.precision, options.verify)
    return result


def _runs_on_onnxruntime(precision: str, half: Graph) -> None:
    """A half program for a target einsat measures (cost="cpu": onnxruntime here) must run there: a
    provider without kernels for its types (onnxruntime's CPU has no bfloat16 Conv) is refused now,
    not after the search, naming the first op it lacks."""
    from einsat.errors import EinsatError
    from einsat.runtime import random_inputs
    from einsat.runtime import run as run_graph

    try:
        run_graph(half, random_inputs(half), backend="onnxruntime")
    except Exception as e:  # onnxruntime's NOT_IMPLEMENTED, through einsat's ExecutionError
        reason = str(e).strip().splitlines()[0]
        reason = reason.split("NOT_IMPLEMENTED : ")[-1] if "NOT_IMPLEMENTED" in reason else reason
        raise EinsatError(f"precision {precision!r} with cost 'cpu': onnxruntime on this machine cannot "
                          f"run the {precision} program ({reason}). Choose a precision it runs (fp16 where "
                          f"it has fp16 kernels, or fp32), or a GPU cost model for a GPU target") from None


def _memory_bytes(options: Options) -> int | None:
    limits = options.saturation_limits()
    return None if limits.memory_gb is None else int(limits.memory_gb * 2**30)
