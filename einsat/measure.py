"""Measuring on the target: what `optimize(cost="cpu")` does besides modeling.

Two steps of the pipeline, for a cost model that measures its target (`TargetCost`):

1. `profile_candidates(model, data, graph)`, after saturation: the distinct signatures of every
   e-node (the extraction's candidates) and of the input's fusion groups, less those the
   cached profile already holds, are timed by `einsat.runtime.profiler` within a time budget;
   the entries go into the model (its fallback is refitted on them) and its cache file.
2. `check_measured(input, result)`, after extraction and verification: both programs timed side
   by side on the target (`runtime.profiler.compare_programs`: interleaved rounds, a fixed
   number of them); a result that is not faster beyond noise is not returned (see `optimize`).

`ProfileSummary` is what the report says about step 1. This module sits at the top level
because it joins extract (the model, the e-graph's signatures) and runtime (the timing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from einsat.extract.profiled import signatures_of_egraph
from einsat.extract.target import TargetCost
from einsat.ir.graph import Graph
from einsat.runtime.profiler import Comparison, compare_programs, profile_signatures

PROFILE_BUDGET_S = 120.0   # seconds of profiling per optimize run, by default
PROFILE_REPS = 15          # interleaved rounds per signature
CHECK_REPS = 15            # interleaved rounds of the input against the result


@dataclass
class ProfileSummary:
    """How the cost figures of one run were obtained."""

    target: str
    path: str                 # the profile's cache file
    needed: int               # distinct signatures among the candidates and the input's units
    cached: int               # of them, already in the profile (from earlier runs)
    measured: int             # timed by this run
    failed: int               # could not be timed (costed by the fallback)
    left: int                 # left to the calibrated roofline by the time budget
    seconds: float
    budget_s: float | None
    call_overhead_us: float

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        text = (f"{self.needed} signatures on {self.target}: {self.cached} from the cache, {self.measured} "
                f"measured now in {self.seconds:.1f} s")
        if self.failed:
            text += f", {self.failed} failed"
        if self.left:
            text += f", {self.left} left to the calibrated roofline (budget {self.budget_s:.0f} s)"
        return text + f"; profile {self.path}"


def measured(model) -> bool:
    """Whether `model` measures its target (and so is profiled and checked by `optimize`)."""
    return isinstance(model, TargetCost)


def profile(model: TargetCost, sigs, budget_s: float | None = PROFILE_BUDGET_S,
            progress: Callable[[str], None] | None = None, reps: int = PROFILE_REPS) -> ProfileSummary:
    """Time the signatures of `sigs` that `model`'s profile lacks, into it and its cache file."""
    sigs = list({s.key: s for s in sigs}.values())
    todo = model.missing(sigs)
    cached = len(sigs) - len(todo)
    run = None
    if todo:
        run = profile_signatures(todo, reps=reps, budget_s=budget_s, progress=progress, threads=model.threads)
        model.add(run.entries, run.method, run.failures, todo)
        model.save()
    return ProfileSummary(model.target, model.path, len(sigs), cached, len(run.entries) if run else 0,
                          len(run.failures) if run else 0, len(run.left) if run else 0,
                          run.seconds if run else 0.0, budget_s, model.call_overhead_us)


def profile_candidates(model: TargetCost, data, graph: Graph, budget_s: float | None = PROFILE_BUDGET_S,
                       progress: Callable[[str], None] | None = None) -> ProfileSummary:
    """Profile the input's units first (the prediction of the input needs them), then every
    e-node's signature (`data`: the exported e-graph)."""
    return profile(model, [*model.unit_signatures(graph), *signatures_of_egraph(data)], budget_s, progress)


def check_measured(model: TargetCost, baseline: Graph, candidate: Graph, reps: int = CHECK_REPS) -> Comparison:
    """The input and the result timed side by side on the model's target (`compare_programs`)."""
    return compare_programs(baseline, candidate, reps=reps, threads=model.threads)
