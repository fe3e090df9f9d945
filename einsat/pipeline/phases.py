"""The phases of one run, in order: load, (reference), profile, saturate, extract, choose,
verify, check, and the command line's write. Each takes the run's state (`State`) and leaves
what it made there; each takes its seconds from the run's planner (`einsat.pipeline.plan`)
and is timed under its name in the report (`times`; the measured choice's timing counts as
profiling, its extractions as extraction, the check as "measure").

`einsat.pipeline.run` calls them; partitioning (`einsat.partition.driver`) calls `verify` and
`check` on the stitched program. Tests replace `saturate` (`monkeypatch.setattr(phases,
"saturate", ...)`) to hand the run an e-graph of their own.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from einsat.budget import hold, stop_if_interrupted_twice
from einsat.errors import EinsatError
from einsat.ir.graph import Graph
from einsat.pipeline import measure
from einsat.pipeline import verification as checks
from einsat.pipeline.events import ProgressEvent
from einsat.pipeline.options import Options
from einsat.pipeline.plan import GIVEN_BLOCKS, VERIFY_MARGIN, Planner, check_estimate
from einsat.pipeline.report import SaturationSummary, Verification

log = logging.getLogger("einsat.optimize")  # the logger the phases have always logged on

ALT_VERIFY = "alternative verify"  # the planner's holds for the modeled alternative's verification
ALT_CHECK = "alternative check"    # and its side-by-side check (`reference`)
GIVEN = "given"  # the planner's hold for timing the given ONNX file against the one written (`pipeline.given`)


@dataclass
class Alternative:
    """A measured run's second candidate (issue #37): the e-graph extracted again under the
    default modeled cost model (`einsat.optimize`'s, `cost.models.DEFAULT_COST`), verified like
    any result and timed against the input beside the measured choice (`check`).

    `status`: "extracted" (a candidate still), "compared" (timed against the input), "same as the
    input", "same as the measured choice" (nothing more to do), "dropped" (its extraction or its
    verification failed: never returned) or "skipped" (the budget had no room, the run was
    stopped); `why` says why it was not compared. `returned` is the candidate the run returned:
    "alternative", "measured choice", "input" or "modeled run". The same record holds the whole
    program optimized again under that model (`modeled_whole`): a partitioned run's alternative,
    an unpartitioned run's third candidate (`kind` "modeled run"), `extraction` its `Result`."""

    model: str
    kind: str = "alternative"  # "modeled run": an unpartitioned measured run's third candidate (`modeled_whole`)
    status: str = "extracted"
    why: str | None = None
    extraction: Any = None
    # "modeled" (the default model) and "measured" (the run's): {"model", "unit", "input", "choice", "alternative"}
    modeled: dict = field(default_factory=dict)
    verification: Verification | None = None
    comparison: Any = None        # its `Comparison` against the input (None: not timed)
    kept_input: str | None = None  # why it was not returned as faster (`never_slower`)
    choice: Any = None            # the measured choice's `Comparison` against the input (None: not timed)
    returned: str | None = None

    @property
    def graph(self) -> Graph | None:
        return None if self.extraction is None else self.extraction.graph

    def to_dict(self) -> dict:
        """For the report (`Report.alternative`): plain data."""
        def verdict(c):
            return None if c is None else measure.verdict_record(c)
        return {"model": self.model, "kind": self.kind, "status": self.status, "why": self.why,
                "returned": self.returned,
                "modeled": self.modeled, "verification": None if self.verification is None else str(self.verification),
                "verdict": verdict(self.comparison), "kept_input": self.kept_input, "choice": verdict(self.choice),
                "ops": None if self.graph is None else self.graph.op_counts()}


@dataclass
class State:
    """One run: its options, cost model and planner, and what each phase made."""

    options: Options
    model: Any
    planner: Planner
    progress: Callable[[ProgressEvent], None] | None = None
    graph: Graph | None = None          # the input program (load)
    examples: dict | None = None        # the example inputs by name (load)
    reference: Any = None               # the input's verification runs, taken ahead (reference)
    first: Any = None                   # the input's profiling (profile)
    profiled: Any = None                # all of the run's profiling (profile, choose)
    data: Any = None                    # the e-graph's export (saturate)
    saturation: SaturationSummary | None = None
    extraction: Any = None              # the `Extraction` (extract, choose)
    verification: Verification | None = None
    result: Graph | None = None         # what the run returns (check: the input when not faster)
    measured: Any = None                # the check's `Comparison`
    checked_profile: Any = None         # the check's profiling of the result's fused groups (check)
    kept_input: str | None = None       # why the input is returned
    alternative: Alternative | None = None  # a measured run's modeled extraction (`alternative`)
    modeled_run: Alternative | None = None  # and the default cost's whole run (`modeled_whole`)
    extras: dict = field(default_factory=dict)

    @property
    def budget(self):
        return self.planner.budget

    @property
    def times(self) -> dict[str, float]:
        return self.planner.times

    def notify(self, event: ProgressEvent) -> None:
        log.info("%s", event)
        if self.progress is not None:
            self.progress(event)
        stop_if_interrupted_twice()  # a second Ctrl-C a C library swallowed (HiGHS's callbacks) ends the run here
        if event.step is None:
            hold(event.phase)  # test-only: EINSAT_TEST_HOLD (einsat.budget)

    def say(self, phase: str) -> Callable[[str], None]:
        """A text callback sending `phase` events."""
        return lambda text: self.notify(ProgressEvent(phase, text))


# -- load ---------------------------------------------------------------------------------------
def load(state: State, program, example_inputs) -> None:
    """The program as a Graph (imported, functionalized), its example inputs by name, and what
    would make any result's verification fail, found now (`verification.before_search`)."""
    o = state.options
    with state.planner.phase("load"):
        state.notify(ProgressEvent("load", "reading the program"))
        state.graph = load_program(program, example_inputs, o.loading)
        # an ONNX file given as such is timed against the written one after the run (`einsat.optimize.run`)
        if not isinstance(program, Graph) and not callable(program):
            from einsat.pipeline import given  # it imports onnx: not on a Graph's or a function's path
            state.extras["given_file"] = given.is_file(program) and given.why_not(None, o) is None
        state.examples = checks.examples_by_name(state.graph, example_inputs)
        if o.verify:
            checks.before_search(state.graph, program, o.verify, state.examples)


def load_program(program, example_inputs, load=None) -> Graph:
    """The program as a Graph; `load`: how an ONNX model is read (`Options.load`, a `Load`)."""
    importing = {} if load is None else dict(input_shapes=load.input_shapes, fill_weights=load.fill_weights,
                                             seed=load.seed)
    onnx_model = isinstance(program, (str, os.PathLike, bytes)) or hasattr(program, "graph")
    if not onnx_model and (importing.get("input_shapes") is not None or importing.get("fill_weights") is not None):
        raise EinsatError(f"Load(input_shapes=, fill_weights=) apply to an ONNX model, not to "
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


def reference(state: State, alternative: bool = True) -> None:
    """With a deadline: the input's verification runs now, and the candidate's (as long, with a
    margin) held back for the verify phase; with a measured model, the check's rounds too, and
    with `alternative` (a run that searches one e-graph) the same again for the modeled
    alternative's verification and check (`ALT_VERIFY`, `ALT_CHECK`), and, for an ONNX file
    measured on onnxruntime, two of the check's three blocks for timing the given file against
    the written one (`GIVEN`, held to the run's end: `einsat.pipeline.given`)."""
    planner, o = state.planner, state.options
    if not planner.bounded:
        return
    candidate_s = 0.0
    if o.verify:
        with planner.phase("reference"):
            state.notify(ProgressEvent("load", "running the input program on the verification's inputs"))
            state.reference, candidate_s = checks.prepare_reference(state.graph, examples=state.examples)
            planner.hold("verify", VERIFY_MARGIN * candidate_s)
    if measure.measured(state.model):
        reps = o.measuring.check_reps or measure.CHECK_REPS
        predicted_us = state.model.graph_cost(state.graph)
        check_s = measured_check_estimate(state.model, o, predicted_us)
        planner.hold("check", check_s)
        if state.extras.get("given_file") and state.model.target == "onnxruntime":
            # kept until the run ends (`Planner.release_all`): the files' comparison comes after it,
            # and on a file einsat's import alone makes faster it is the one that finds the gain
            # (resnet18: the check and the alternative's took the last seconds, the given file was
            # written unchanged untimed, 1.00x where einsat's writing of its input ran 1.28x)
            planner.hold(GIVEN, check_estimate(predicted_us, reps, blocks=GIVEN_BLOCKS))
        if alternative:
            planner.hold(ALT_VERIFY, VERIFY_MARGIN * candidate_s)
            planner.hold(ALT_CHECK, check_s)


def measured_check_estimate(model, options, predicted_us: float) -> float:
    """Seconds a measured check of a whole program may take (`check_estimate`): at the model's
    thread count, and again at each other count of `Measure(not_slower_at=)`, a program running
    longer at fewer threads (in proportion, at most)."""
    reps = options.measuring.check_reps or measure.CHECK_REPS
    seconds = check_estimate(predicted_us, reps)
    for threads in options.measuring.not_slower_at:
        if threads != model.threads:
            seconds += check_estimate(predicted_us * max(1.0, model.threads / threads), reps)
    return seconds


# -- profile, saturate --------------------------------------------------------------------------
def profile_input(state: State) -> None:
    """A measured model's profiling of the input's signatures, before the search (its generators
    cost by them); the phase's seconds are shared with `profile_candidates`."""
    if not measure.measured(state.model):
        return
    with state.planner.phase("profile"):
        seconds = state.planner.seconds("profile")
        state.extras["profile_s"] = seconds
        state.notify(ProgressEvent("profile", f"timing the input's ops on {state.model.target}"))
        state.first = measure.profile_input(state.model, state.graph, seconds, state.say("profile"))


def saturate_phase(state: State) -> None:
    """Grow the e-graph under the limits, saturation's time cut to its share of the budget."""
    limits = state.options.saturation_limits()
    seconds = state.planner.seconds("saturate")
    if state.planner.bounded:
        limits = dataclasses.replace(limits, time_s=seconds)
    with state.planner.phase("saturate"):
        state.notify(ProgressEvent("saturate", f"{len(state.graph.nodes)} nodes into the e-graph"))
        state.data, state.saturation = saturate(state.graph, state.options.rules, limits, state.model,
                                                state.notify, state.budget)


def saturate(graph: Graph, rules, limits, model, notify, run=None):
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


def profile_candidates(state: State) -> None:
    """A measured model's profiling of every e-node's signature, in what the input's left."""
    if state.first is None:
        return
    with state.planner.phase("profile"):
        state.notify(ProgressEvent("profile", f"timing the candidates' ops on {state.model.target}"))
        seconds = state.extras["profile_s"]
        left = None if seconds is None else max(0.0, seconds - state.first.seconds)
        state.profiled = measure.profile_candidates(state.model, state.data, state.graph, left,
                                                    state.say("profile")).after(state.first)


# -- extract, choose ----------------------------------------------------------------------------
def extract_phase(state: State) -> None:
    """The cheapest program of the e-graph (ILP or greedy, started from the input); with a
    measured model, the measured choice (`choose`) instead."""
    data, method = state.data, state.options.saturation_limits().extractor
    state.notify(ProgressEvent("extract", f"{method} over {data.num_nodes():,} e-nodes", nodes=data.num_nodes(),
                               classes=len(data.classes)))
    if state.profiled is not None:
        choose(state)
        alternative(state)
        return
    with state.planner.phase("extract"):
        state.extraction = extract(state, state.planner.seconds("extract"))


def choose(state: State) -> None:
    """The measured choice (`measure.choose`): extract, time the ops it chose that the profile
    lacks, extract again; its timing within the planner's share, each extraction within the
    extract phase's. Its timing counts as profiling, the rest as extraction."""
    planner = state.planner
    timed = state.profiled.seconds
    seconds = planner.seconds("choose")

    def extract_again():
        return extract(state, planner.seconds("extract"))

    with planner.phase("extract"):
        state.extraction, state.profiled = measure.choose(
            state.model, extract_again, state.profiled, progress=state.say("profile"),
            budget_s=measure.CHOICE_BUDGET_S, seconds=seconds if planner.bounded else None)
    planner.spent("extract", -(state.profiled.seconds - timed))
    planner.spent("profile", state.profiled.seconds - timed, plan="choose")


def alternative(state: State) -> None:
    """After the measured choice: the e-graph extracted again under the default modeled cost
    model (`modeled_extraction`), kept as `state.alternative` unless it is the input or the
    measured choice. Under a budget it takes the extract phase's share, and is skipped (the
    reason said) when what is left beyond the holds of both candidates' verification and check
    is under the extract phase's floor."""
    from einsat.cost.models import DEFAULT_COST
    from einsat.pipeline.plan import FLOORS
    planner = state.planner
    alt = state.alternative = Alternative(model=str(DEFAULT_COST))

    def stop(status: str, why: str) -> None:
        alt.status, alt.why = status, why
        planner.release(ALT_VERIFY)  # nothing more to verify or time: the seconds go back to the run
        planner.release(ALT_CHECK)

    if state.budget.cancelled:
        return stop("skipped", f"the run was stopped ({state.budget.reason}) before it")
    if planner.bounded and state.budget.remaining() <= FLOORS["extract"]:
        held = sum(planner.held.values())
        left = max(0.0, state.budget.remaining() + held)
        return stop("skipped", f"the budget ({state.budget.seconds:g} s) had no room for it: {left:.2f} s left "
                               f"before the deadline, {held:.2f} s held for the verifications and side-by-side checks")
    state.notify(ProgressEvent("extract", f"the e-graph again under the modeled cost ({alt.model})"))
    with planner.phase("extract"):
        try:
            alt.extraction = modeled_extraction(state, planner.seconds("extract"))
        except Exception as e:  # noqa: BLE001 - a second candidate that cannot be had is not returned, said why
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            log.warning("the modeled alternative could not be extracted: %s: %s", type(e).__name__, first)
            return stop("dropped", f"its extraction failed ({type(e).__name__}: {first})")
    graph, choice = alt.graph, state.extraction.graph
    alt.modeled = modeled_costs(state.model, state.graph, choice, graph)
    if checks.same_program(state.graph, graph):
        return stop("same as the input", "the modeled extraction chose the input program itself")
    if checks.same_program(choice, graph):
        return stop("same as the measured choice", "the modeled extraction chose the measured choice's program")


def modeled_costs(model, graph: Graph, choice: Graph, alternative: Graph) -> dict:
    """`Alternative.modeled`: the input's, the measured choice's and the alternative's costs under
    the default modeled cost model ("modeled") and the run's own (`model`, "measured")."""
    from einsat.cost.models import DEFAULT_COST, cost_model
    return {key: {"model": m.name, "unit": m.unit, "input": m.graph_cost(graph), "choice": m.graph_cost(choice),
                  "alternative": m.graph_cost(alternative)}
            for key, m in (("modeled", cost_model(DEFAULT_COST)), ("measured", model))}


def modeled_extraction(state: State, seconds: float | None):
    """The run's e-graph extracted under the default modeled cost model (what `einsat.optimize`
    uses without `cost=`), as `extract` does under the run's own (tests replace this)."""
    from einsat.cost.models import DEFAULT_COST, cost_model
    return extract(state, seconds, cost_model(DEFAULT_COST))


def extract(state: State, seconds: float | None, model=None):
    """The run's e-graph extracted under its cost model (or `model`) and `Limits` (extractor, ILP
    size bound), one ILP solve taking at most `seconds`, from the input program, under the run's
    budget."""
    from einsat.extract import extract as extract_egraph
    limits = state.options.saturation_limits()

    def forward(message: str, cost: float) -> None:
        state.notify(ProgressEvent("extract", message))

    return extract_egraph(state.data, state.model if model is None else model, method=limits.extractor,
                          time_limit=seconds, start=state.graph,
                          name=state.graph.name, budget=state.budget, progress=forward,
                          ilp_candidates=limits.ilp_candidates)


# -- verify, check ------------------------------------------------------------------------------
def verify(state: State, candidate: Graph | None = None, identical: bool = True) -> None:
    """`candidate` (default: the extraction's program) against the input on random inputs (and
    the examples), reusing the input's runs taken ahead (`reference`); with `identical`, a program
    identical to the input needs no run. Raises `VerificationError` on a mismatch (or on an
    inconclusive check under verify="prove"). Once verified, the candidate is what a second
    Ctrl-C writes (`Budget.verified`)."""
    o, planner = state.options, state.planner
    planner.release("verify")
    if not o.verify:
        return
    candidate = state.extraction.graph if candidate is None else candidate
    with planner.phase("verify"):
        if identical and checks.identical_program(state.graph, candidate):  # nothing a run could tell apart
            state.verification = Verification(trials=0, max_error=0.0, tolerance=0.0, output=state.graph.outputs[0],
                                              method="optimize.identical_program", status="identical")
        else:
            state.notify(ProgressEvent("verify", "running both programs on random inputs"))
            state.verification = checks.verify_equivalent(state.graph, candidate, examples=state.examples,
                                                          require_proof=o.verify == "prove",
                                                          reference_runs=state.reference)
    state.budget.verified = candidate  # what a second Ctrl-C writes from here on (the CLI)


def verify_alternative(state: State) -> None:
    """The modeled alternative (`state.alternative`, a candidate still) against the input, as
    `verify` checks any result; one that fails (or whose check is inconclusive where the result's
    would return the input) is dropped, the reason in the report, and never returned."""
    from einsat.errors import VerificationError
    o, planner, alt = state.options, state.planner, state.alternative
    planner.release(ALT_VERIFY)
    if alt is None or alt.status != "extracted" or not o.verify:
        return
    if state.budget.cancelled:
        alt.status, alt.why = "skipped", f"the run was stopped ({state.budget.reason}) before its verification"
        return
    with planner.phase("verify"):
        state.notify(ProgressEvent("verify", "running the input and the modeled alternative on random inputs"))
        try:
            verification = checks.verify_equivalent(state.graph, alt.graph, examples=state.examples,
                                                    require_proof=o.verify == "prove", reference_runs=state.reference)
        except VerificationError as e:
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            log.warning("the modeled alternative failed verification and is dropped: %s", first)
            alt.status, alt.why = "dropped", f"it failed verification ({first})"
            return
    if verification.feeding_differs:
        alt.status, alt.why = "dropped", ("its verification was inconclusive: output(s) "
                                          f"{', '.join(map(repr, verification.feeding_differs))} agree, but the "
                                          "values feeding their last op differ")
        return
    alt.verification = verification


def check(state: State, candidate: Graph, what: str = "the result") -> None:
    """With a measured model: the input and `candidate` timed side by side on the target; a
    result not faster beyond noise is not returned (`state.result` is the input then, and
    `kept_input` says why). The verdict is kept across runs (`measure.checked`). Where the run
    has a modeled alternative (`state.alternative`), it is timed against the input too, and of
    the candidates measured faster the one with the better measured ratio is returned
    (`check_alternative`)."""
    planner, model = state.planner, state.model
    planner.release("check")
    state.result = candidate
    differs = state.verification.feeding_differs if state.verification is not None else []
    if differs:  # no verdict either way (einsat.verify.numeric): never return what may be wrong
        state.result = state.graph
        state.kept_input = (f"the verification was inconclusive: output(s) {', '.join(map(repr, differs))} agree, "
                            "but the values feeding their last op differ")
    elif measure.measured(model) and not state.budget.cancelled:
        with planner.phase("measure", plan="check"):
            state.notify(ProgressEvent("measure", f"the input and {what} side by side on {model.target}"))
            units = measure.profile(model, model.unit_signatures(candidate), planner.seconds("check"))  # fused groups
            state.checked_profile = units
            state.result, state.measured, state.kept_input = never_slower(
                model, state.graph, candidate, state.options.measuring.check_reps or measure.CHECK_REPS,
                state.options.measuring.recheck, state.options.measuring.keep, state.options.measuring.not_slower_at)
    if state.alternative is not None:
        check_alternative(state)


def check_alternative(state: State) -> None:
    """The modeled alternative, a verified candidate still, timed against the input by the same
    rule (`never_slower`, its verdict kept across runs); it is returned where it is measured
    faster and the measured choice is not, or is by a smaller measured ratio."""
    planner, model, alt = state.planner, state.model, state.alternative
    planner.release(ALT_CHECK)
    alt.choice = state.measured
    if alt.status == "extracted" and state.budget.cancelled:
        alt.status, alt.why = "skipped", f"the run was stopped ({state.budget.reason}) before its check"
    if alt.status == "extracted":
        with planner.phase("measure", plan="check"):
            state.notify(ProgressEvent("measure", f"the input and the modeled alternative side by side on "
                                                  f"{model.target}"))
            units = measure.profile(model, model.unit_signatures(alt.graph), planner.seconds("check"))
            state.checked_profile = units if state.checked_profile is None else state.checked_profile.also(units)
            returned, alt.comparison, alt.kept_input = never_slower(
                model, state.graph, alt.graph, state.options.measuring.check_reps or measure.CHECK_REPS,
                state.options.measuring.recheck, state.options.measuring.keep, state.options.measuring.not_slower_at)
        alt.status = "compared"
        choice_faster = state.result is not state.graph
        if returned is alt.graph and (not choice_faster or alt.comparison.speedup > state.measured.speedup):
            state.result, state.measured, state.kept_input = alt.graph, alt.comparison, None
            if alt.verification is not None:
                state.verification = alt.verification
            state.budget.verified = alt.graph
            alt.returned = "alternative"
            return
        if state.kept_input is not None:
            state.kept_input += f"; the modeled alternative ({alt.model}) was not returned either: {alt.kept_input}"
    alt.returned = "input" if state.result is state.graph else "measured choice"


MIN_MODELED_S = 1.0  # a budget leaving less than this beside a check runs no modeled run


def modeled_whole(state: State, graph: Graph, options: Options, current: Graph, made: Graph | None,
                  tried: list[Graph], run: Callable, what: str, kind: str = "alternative"):
    """The whole program optimized again under the default modeled cost model, by a run of its
    own (`run(graph, examples, options)`: the program `einsat.optimize` returns without `cost=`,
    partitioned where it would be), verified by that run and timed against the input by the same
    rule (`check`, `never_slower`); of the candidates measured faster the one with the better
    measured ratio is returned. `current`: the program the run returns so far (`what`, for the
    report, unless it is the modeled alternative), `made` its recipe; `tried`: the programs
    already timed (the modeled run's is not timed again where it is one of them). A partitioned
    run calls it on its stitched whole (`partition.driver.modeled_whole`, the run's alternative,
    `kind` "alternative"); an
    unpartitioned one after its measured choice and the e-graph's modeled extraction (`kind`
    "modeled run": that extraction's e-graph was grown by the measured model's generators, and
    the default run grows another: efficientnet_dynamo's default-cost file ran 1.04x-1.06x its
    export on onnxruntime, where the measured run and its extraction wrote the export). Returns
    the program the run returns, its recipe and the candidate's record (None under a model that
    does not measure). Skipped, the reason said, where the budget has no room for that run and
    another check."""
    from einsat.cost.models import DEFAULT_COST
    if not measure.measured(state.model):
        return current, made, None
    alt = Alternative(model=str(DEFAULT_COST), kind=kind)
    label = "the modeled alternative" if kind == "alternative" else f"the {kind}"
    previous = state.alternative.returned if state.alternative is not None else None
    kept = "input" if state.result is state.graph else previous or "measured choice"  # what is returned without it
    check_s = measured_check_estimate(state.model, state.options, state.model.graph_cost(graph))
    seconds = None
    if state.budget.cancelled:
        alt.status, alt.why = "skipped", f"the run was stopped ({state.budget.reason}) before it"
    elif state.planner.bounded:
        seconds = state.budget.remaining() - check_s
        if seconds < MIN_MODELED_S:
            alt.status, alt.why = "skipped", (f"the budget ({state.budget.seconds:g} s) had no room for it: "
                                              f"{max(0.0, state.budget.remaining()):.2f} s left")
    if alt.status == "skipped":
        alt.returned = kept
        return current, made, alt
    state.notify(ProgressEvent("optimize", f"the whole program again under the modeled cost ({alt.model})"))
    try:
        modeled_options = options.replace(cost=DEFAULT_COST, measure=None, budget=seconds, progress=None, load=None,
                                          precision="fp32", half_io=False)
        found = run(graph, state.examples, modeled_options)
    except EinsatError as e:  # a further candidate that cannot be had is not returned, said why
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        log.warning("%s could not be made: %s", label, first)
        alt.status, alt.why, alt.returned = "dropped", f"its run failed ({first})", kept
        return current, made, alt
    alt.extraction = found  # its `graph` is the candidate
    alt.modeled = modeled_costs(state.model, graph, current, found.graph)
    verification = found.report.verification
    alt.returned = kept
    if checks.identical_program(graph, found.graph):
        alt.status, alt.why = "same as the input", "the modeled run returned the input program"
        return current, made, alt
    if any(checks.same_program(program, found.graph) for program in tried):
        alt.status, alt.why = "same as the measured choice", "the modeled run returned a program already timed"
        return current, made, alt
    if verification is not None and verification.feeding_differs:  # (None: the caller's verify=False)
        alt.status, alt.why = "dropped", "its verification was inconclusive"
        return current, made, alt
    before = state.result, state.kept_input, state.verification, state.measured, state.budget.verified
    choice = state.measured
    state.verification = alt.verification = verification
    state.budget.verified = found.graph
    held, state.alternative = state.alternative, None  # `check` times this candidate alone
    try:
        check(state, found.graph, f"{label} ({alt.model})")
    finally:
        state.alternative = held
    alt.status, alt.choice, alt.comparison = "compared", choice, state.measured
    if state.result is found.graph and (kept == "input" or state.measured.speedup > choice.speedup):
        alt.returned = kind
        return found.graph, found.recipe, alt
    what = "the modeled alternative" if kept == "alternative" else what
    alt.kept_input = state.kept_input or (f"measured {state.measured.speedup:.2f}x, {what} "
                                          f"{choice.speedup:.2f}x")
    state.result, state.kept_input, state.verification, state.measured, state.budget.verified = before
    if kept == "input":  # the report's verdict stays the one before, and says why the input is returned
        state.kept_input = f"{state.kept_input}; {label} ({alt.model}) was not returned either: " \
                           f"{alt.kept_input}"
    return current, made, alt


def never_slower(model, graph: Graph, result: Graph, reps: int, recheck: bool = False, keep: str = "faster",
                 not_slower_at: tuple[int, ...] = ()):
    """(the program to return, the measured comparison or None, why the input is returned or None);
    the comparison is kept across runs (`measure.checked`; `recheck` measures again). `keep`
    (`Measure.keep`): "faster" returns `result` only when it is measured faster beyond noise,
    "not slower" unless it is measured slower beyond noise (a partitioned run's pieces: a gain of
    a few percent in each piece is within one piece's noise, and their stitched whole is judged
    by the "faster" rule). Under "faster", a result measured faster is timed again at each of
    `not_slower_at`'s intra-op thread counts (`Measure.not_slower_at`) and returned only if it is
    not measured slower beyond noise at any of them; those verdicts ride on the comparison
    (`other_threads`)."""
    if checks.same_program(graph, result):
        return graph, None, "the extraction chose the input program itself"
    try:
        comparison, measured_at = measure.checked(model, graph, result, reps, recheck)
    except Exception as e:  # noqa: BLE001 - a program the target cannot run is not returned as faster
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return graph, None, (f"the programs could not be measured on {model.target} ({type(e).__name__}: {first}): "
                             "the input is returned")
    comparison.measured_at = measured_at  # None: measured by this run
    if comparison.faster and keep == "faster" and not_slower_at:
        slower = other_threads(model, graph, result, reps, recheck, not_slower_at, comparison)
        if slower is not None:
            return graph, comparison, slower
    if comparison.faster or (keep == "not slower" and not comparison.slower):
        return result, comparison, None
    if keep == "not slower":
        return graph, comparison, (f"the optimized program was measured slower beyond noise on "
                                   f"{comparison.backend} ({comparison}): the input is returned")
    return graph, comparison, (f"the optimized program was not measured faster beyond noise on {comparison.backend} "
                               f"({comparison}): the input is returned")


def other_threads(model, graph: Graph, result: Graph, reps: int, recheck: bool, counts: tuple[int, ...],
                  comparison) -> str | None:
    """`result`, measured faster than `graph` at the model's thread count (`comparison`), timed
    against it at each of `counts` (`never_slower`), the verdicts appended to
    `comparison.other_threads`; returns why the input is returned (None: slower at none)."""
    comparison.other_threads = []
    for threads in counts:
        if threads == model.threads:
            continue
        try:
            there, measured_at = measure.checked(measure.at_threads(model, threads), graph, result, reps, recheck)
        except Exception as e:  # noqa: BLE001 - as at the deployment count: not returned where it cannot be timed
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            return (f"the optimized program, measured faster at {model.threads} intra-op thread(s) ({comparison}), "
                    f"could not be measured at {threads} ({type(e).__name__}: {first}): the input is returned")
        comparison.other_threads.append(measure.count_record(threads, there, measured_at))
        if there.slower:
            return (f"the optimized program was measured faster at {model.threads} intra-op thread(s) ({comparison}) "
                    f"but slower beyond noise at {threads} ({there}), a count it must not be slower at "
                    "(Measure(not_slower_at=)): the input is returned")
    return None


# -- write (the command line) -------------------------------------------------------------------
def write(graph: Graph, path, planner: Planner | None = None, save: Callable | None = None) -> float:
    """Write `graph` as ONNX at `path` with `save` (default `ir.onnx.io.save_onnx`: atomically,
    nothing is left there if it fails), the seconds held for it released first; returns the
    seconds it took (also the planner's "write" time)."""
    import time

    if save is None:
        from einsat.ir.onnx.io import save_onnx as save
    if planner is not None:
        planner.release("write")
    t0 = time.perf_counter()
    save(graph, path)
    seconds = time.perf_counter() - t0
    if planner is not None:
        planner.spent("write", seconds)
    return seconds
