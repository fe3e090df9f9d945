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
from einsat.pipeline.plan import VERIFY_MARGIN, Planner, check_estimate
from einsat.pipeline.report import SaturationSummary, Verification

log = logging.getLogger("einsat.optimize")  # the logger the phases have always logged on


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


def reference(state: State) -> None:
    """With a deadline: the input's verification runs now, and the candidate's (as long, with a
    margin) held back for the verify phase; with a measured model, the check's rounds too."""
    planner, o = state.planner, state.options
    if not planner.bounded:
        return
    if o.verify:
        with planner.phase("reference"):
            state.notify(ProgressEvent("load", "running the input program on the verification's inputs"))
            state.reference, candidate_s = checks.prepare_reference(state.graph, examples=state.examples)
            planner.hold("verify", VERIFY_MARGIN * candidate_s)
    if measure.measured(state.model):
        reps = o.measuring.check_reps or measure.CHECK_REPS
        planner.hold("check", check_estimate(state.model.graph_cost(state.graph), reps))


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


def extract(state: State, seconds: float | None):
    """The run's e-graph extracted under its cost model and `Limits` (extractor, ILP size bound),
    one ILP solve taking at most `seconds`, from the input program, under the run's budget."""
    from einsat.extract import extract as extract_egraph
    limits = state.options.saturation_limits()

    def forward(message: str, cost: float) -> None:
        state.notify(ProgressEvent("extract", message))

    return extract_egraph(state.data, state.model, method=limits.extractor, time_limit=seconds, start=state.graph,
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


def check(state: State, candidate: Graph, what: str = "the result") -> None:
    """With a measured model: the input and `candidate` timed side by side on the target; a
    result not faster beyond noise is not returned (`state.result` is the input then, and
    `kept_input` says why). The verdict is kept across runs (`measure.checked`)."""
    planner, model = state.planner, state.model
    planner.release("check")
    state.result = candidate
    differs = state.verification.feeding_differs if state.verification is not None else []
    if differs:  # no verdict either way (einsat.verify.numeric): never return what may be wrong
        state.result = state.graph
        state.kept_input = (f"the verification was inconclusive: output(s) {', '.join(map(repr, differs))} agree, "
                            "but the values feeding their last op differ")
        return
    if not measure.measured(model) or state.budget.cancelled:
        return
    with planner.phase("measure", plan="check"):
        state.notify(ProgressEvent("measure", f"the input and {what} side by side on {model.target}"))
        units = measure.profile(model, model.unit_signatures(candidate), planner.seconds("check"))  # its fused groups
        state.checked_profile = units
        state.result, state.measured, state.kept_input = never_slower(
            model, state.graph, candidate, state.options.measuring.check_reps or measure.CHECK_REPS,
            state.options.measuring.recheck)


def never_slower(model, graph: Graph, result: Graph, reps: int, recheck: bool = False):
    """(the program to return, the measured comparison or None, why the input is returned or None);
    the comparison is kept across runs (`measure.checked`; `recheck` measures again)."""
    if checks.same_program(graph, result):
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
