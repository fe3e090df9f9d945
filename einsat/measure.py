"""Measuring on the target: what `optimize(cost="cpu")` does besides modeling.

Two steps of the pipeline, for a cost model that measures its target (`TargetCost`):

1. `profile_candidates(model, data, graph)`, after saturation: the distinct signatures of every
   e-node (the extraction's candidates) and of the input's fusion groups, less those the
   cached profile already holds, are timed by `einsat.runtime.profiler` within a time budget;
   the entries go into the model (its fallback is refitted on them) and its cache file.
2. `check_measured(input, result)`, after extraction and verification: both programs timed side
   by side on the target (`runtime.profiler.compare_programs`: interleaved rounds, a fixed
   number of them); a result that is not faster beyond noise is not returned (see `optimize`).

Both steps run on the model's target through the one profiler (`runtime.profiler`):
"onnxruntime" (`cost="cpu"`) times one-node sessions and whole-program sessions; "cupy"
(`cupy_model()`) times compiled programs on a CUDA device (`gpu.profiler.program_runner`), or on
any `gpu.device` (the tests' host emulation). `ProfileSummary` is what the report says about
step 1. This module sits at the top level because it joins extract (the model, the e-graph's
signatures), runtime and gpu (the timing).
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


def cupy_model(device=None, machine: dict | None = None, path=None) -> TargetCost:
    """A measured model of the CuPy backend on `device` (default: this machine's CUDA device),
    profiled on demand into the profile cache, keyed by `machine` (default: the device's
    `gpu.profiler.device_info`: name, driver and library versions)."""
    if machine is None:
        from einsat.gpu.profiler import device_info
        if device is None:
            from einsat.gpu.device import CupyDevice
            device = CupyDevice()
        machine = {**device_info(device), "backend": "cupy"}
    model = TargetCost("cupy", machine, path, name=f"measured-{machine.get('kind', 'gpu')}-cupy")
    model.device = device
    return model


def _runners(model: TargetCost):
    """(signature runner factory, overhead runner, program runner factory) for the model's
    target; None where `runtime.profiler`'s onnxruntime defaults apply."""
    if model.target == "onnxruntime":
        return None, None, None
    if model.target == "cupy":
        from einsat.gpu.profiler import program_runner
        dev = getattr(model, "device", None)
        if dev is None:
            from einsat.gpu.device import CupyDevice
            dev = model.device = CupyDevice()
        return (lambda sig: program_runner(sig.graph(), dev)), (lambda: 0.0), \
            (lambda g, seed: program_runner(g, dev, seed))
    raise ValueError(f"no profiler for the target {model.target!r}")


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
        make_runner, overhead, _ = _runners(model)
        run = profile_signatures(todo, reps=reps, budget_s=budget_s, progress=progress, threads=model.threads,
                                 make_runner=make_runner, overhead=overhead)
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
    _, _, program_runner = _runners(model)
    comparison = compare_programs(baseline, candidate, reps=reps, threads=model.threads, runner=program_runner)
    comparison.backend = model.target
    return comparison
