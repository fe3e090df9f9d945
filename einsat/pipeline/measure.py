"""Measuring on the target: what `optimize(cost="cpu")` does besides modeling.

Two steps of the pipeline, for a cost model that measures its target (`TargetCost`):

1. `profile_candidates(model, data, graph)`, after saturation: the distinct signatures of every
   e-node (the extraction's candidates) and of the input's fusion groups, less those the
   cached profile already holds, are timed by `einsat.runtime.profiler` within a time budget;
   the entries go into the model (its fallback is refitted on them) and its cache file.
2. `check_measured(input, result)`, after extraction and verification: both programs timed side
   by side on the target (`runtime.profiler.compare_programs`: interleaved rounds, a fixed
   number of them); a result that is not faster beyond noise is not returned (see `optimize`).
   `checked` keeps each verdict beside the profile (`verdicts_path`), keyed by the two
   programs' contents and the rounds: a second run that extracts the same result from the
   same input on the same machine takes the verdict measured before (the report says when)
   instead of timing both programs again; `Measure(recheck=True)` measures again.

Both steps run on the model's target through the one profiler (`runtime.profiler`):
"onnxruntime" (`cost="cpu"`) times one-node sessions and whole-program sessions; "cupy"
(`cupy_model()`) times compiled programs on a CUDA device (`gpu.profiler.program_runner`), or on
any `gpu.device` (the tests' host emulation). `ProfileSummary` is what the report says about
step 1. `choose`, the measured choice, extracts again on measured costs between the two steps.
This module is part of the pipeline because it joins extract (the model, the e-graph's
signatures), runtime and gpu (the timing); the seconds of each step come from the run's
planner (`einsat.pipeline.plan`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone

import numpy as np

from einsat.cost.profiled import signatures_of_egraph
from einsat.cost.target import TargetCost
from einsat.errors import EinsatError
from einsat.ir.graph import Graph
from einsat.ir.signature import Signature, atomic_write_json, signature_of, signatures_of_graph
from einsat.pipeline.plan import CHOICE_S, PROFILE_S
from einsat.runtime.profiler import SAMPLE_US, Comparison, compare_programs, profile_signatures

PROFILE_BUDGET_S = PROFILE_S  # seconds of profiling per optimize run, by default
CHOICE_ROUNDS = 3          # extractions again after timing the chosen program's unmeasured ops
CHOICE_BUDGET_S = CHOICE_S  # seconds of profiling for each of those rounds, and for all of the exploration's
EXPLORE_ROUNDS = 6         # extractions on what unmeasured ops might cost at best (`choose`)
PROFILE_REPS = 15          # interleaved rounds per signature
CHECK_REPS = 15            # interleaved rounds of the input against the result

log = logging.getLogger(__name__)


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
    chosen: int = 0           # of the measured, timed after an extraction chose them (`choose`)
    failures: dict[str, str] = field(default_factory=dict)  # signature key -> why it could not be timed
    pieces: int = 0           # a partitioned run: the pieces whose profiles this one sums (`of_pieces`)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def of_pieces(profiles: list[dict]) -> ProfileSummary | None:
        """The profiles of a partitioned run's pieces (their reports' `profile`) as one: counts and
        seconds summed (a signature two pieces need counts in each; a piece run after another
        finds what that one measured in the cache), failures joined (each signature once)."""
        if not profiles:
            return None
        names = {f.name for f in fields(ProfileSummary)}
        first = {k: v for k, v in profiles[0].items() if k in names}
        failures = {k: v for p in profiles for k, v in (p.get("failures") or {}).items()}
        total = {k: sum(p.get(k) or 0 for p in profiles)
                 for k in ("needed", "cached", "measured", "left", "seconds", "chosen")}
        return ProfileSummary(**{**first, **total, "failed": len(failures) if failures else
                                 sum(p.get("failed") or 0 for p in profiles),
                                 "failures": failures, "pieces": len(profiles)})

    def after(self, earlier: ProfileSummary) -> ProfileSummary:
        """This summary and an earlier one of the same run (the input's signatures, which this
        one finds cached) as one: what the earlier call measured or failed counts as measured or
        failed by the run, not as cached."""
        return replace(self, cached=self.cached - earlier.measured - earlier.failed,
                       measured=self.measured + earlier.measured, failed=self.failed + earlier.failed,
                       seconds=self.seconds + earlier.seconds, failures={**earlier.failures, **self.failures})

    def then(self, later: ProfileSummary) -> ProfileSummary:
        """This summary and a later profiling of signatures it left to the roofline (`choose`)."""
        return replace(self, measured=self.measured + later.measured, failed=self.failed + later.failed,
                       left=max(0, self.left - later.measured - later.failed), seconds=self.seconds + later.seconds,
                       chosen=self.chosen + later.measured, failures={**self.failures, **later.failures})

    def also(self, later: ProfileSummary) -> ProfileSummary:
        """This summary and a later profiling of other signatures (the check's: the result's fused
        groups), those it found in the cache not counted again."""
        new = later.measured + later.failed + later.left
        return replace(self, needed=self.needed + new, measured=self.measured + later.measured,
                       failed=self.failed + later.failed, left=self.left + later.left,
                       seconds=self.seconds + later.seconds, failures={**self.failures, **later.failures})

    def __str__(self) -> str:
        over = f" over {self.pieces} piece{'s' if self.pieces > 1 else ''}" if self.pieces else ""
        text = (f"{self.needed} signatures on {self.target}{over}: {self.cached} from the cache, {self.measured} "
                f"measured now in {self.seconds:.1f} s")
        if self.failed:
            text += f", {self.failed} failed"
        if self.chosen:
            text += f" ({self.chosen} of them after an extraction chose them)"
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
                                 make_runner=make_runner, overhead=overhead, layout_ops=model.layout_ops)
        model.add(run.entries, run.method, run.failures, todo)
        model.save()
    return ProfileSummary(model.target, model.path, len(sigs), cached, len(run.entries) if run else 0,
                          len(run.failures) if run else 0, len(run.left) if run else 0,
                          run.seconds if run else 0.0, budget_s, model.call_overhead_us,
                          failures=dict(run.failures) if run else {})


def failure_text(key: str, why: str, target: str) -> str:
    """A signature that could not be timed, in einsat's words: its op, input shapes, attributes
    and the error's first line (onnxruntime's names the node: the one-node session's is the op)."""
    op, types, attrs = (key.split("|", 2) + ["", ""])[:3]
    first = why.strip().splitlines()[0] if why.strip() else "no message"
    return (f"could not time {op} on {target} (inputs {types or 'none'}{f'; {attrs}' if attrs else ''}): {first}; "
            "costed by the calibrated roofline instead")


def report_failures(profile: dict | None) -> None:
    """Log each signature a run's profiling could not time (`failure_text`), once, as a warning
    on einsat's logger (the command line's -q leaves it out): called once per run, in the process
    that called `optimize`, with the report's `profile` (a partitioned run's joins its pieces')."""
    if not profile:
        return
    for key, why in sorted((profile.get("failures") or {}).items()):
        log.warning("%s", failure_text(key, why, profile.get("target", "the target")))


def input_signatures(model: TargetCost, graph: Graph) -> list[Signature]:
    """The input program's signatures a run profiles before saturation (`profile_input`): its
    fused units', its nodes', and for each operator EinNet could derive, the two reference ops
    its derivation gate holds it against (`derive.generator.floors_of`: a GEMM of its FLOPs, a
    stream of its bytes), else a measured operator would be held against the roofline's guesses."""
    from einsat.rewrites.derive.generator import DERIVED, floors_of  # the search's, only for these names
    refs = []
    for node in graph.nodes:
        if node.op in DERIVED and all(node.inputs):
            try:
                refs += [signature_of(op, {}, ins) for op, ins, _ in
                         floors_of(node.op, node.attrs, [graph.types[i] for i in node.inputs])]
            except EinsatError:  # an operator the floors cannot be made for is costed as before
                continue
    return [*model.unit_signatures(graph), *signatures_of_graph(graph), *refs]


def profile_input(model: TargetCost, graph: Graph, budget_s: float | None = PROFILE_BUDGET_S,
                  progress: Callable[[str], None] | None = None) -> ProfileSummary:
    """Profile `input_signatures` before saturation: the search's generators choose by the
    session's cost model (EinNet's derivations only for the operators that can pay, PET's
    mutants by their cost), and an operator the profile lacks is costed by the calibrated
    roofline's guess. With an empty profile the derivation gate never derived
    einnet_conv_transpose's ConvTranspose, whose derivation runs 2.29x faster on onnxruntime."""
    return profile(model, input_signatures(model, graph), budget_s, progress)


def profile_candidates(model: TargetCost, data, graph: Graph, budget_s: float | None = PROFILE_BUDGET_S,
                       progress: Callable[[str], None] | None = None) -> ProfileSummary:
    """Profile the input's signatures first (`input_signatures`: the prediction of the input
    needs its units), then every e-node's signature (`data`: the exported e-graph)."""
    return profile(model, [*input_signatures(model, graph), *signatures_of_egraph(data)], budget_s, progress)


def choose(model: TargetCost, extract: Callable[[], object], summary: ProfileSummary,
           rounds: int = CHOICE_ROUNDS, budget_s: float | None = CHOICE_BUDGET_S,
           progress: Callable[[str], None] | None = None, explore: int = EXPLORE_ROUNDS,
           seconds: float | None = None):
    """Extract (`extract()`: an `Extraction`) on measured costs wherever the budget allows.

    Where the profiling budget left signatures to the calibrated roofline (`summary.left`), two
    ways a guess can mislead are checked:
    1. an op the roofline overestimates is never chosen, so never timed: first, at most `explore`
       times, the extraction runs with the ops the profile lacks at what they might cost at
       best (`TargetCost.optimistic`), and the ops it chooses are timed. Once it chooses a
       program whose every op is measured, that program is the best on measured costs that any
       guess could not beat, and it is returned;
    2. an op the roofline underestimates looks cheap: then, at most `rounds` times, the
       extraction runs on the calibrated guesses, and while its program has ops the profile
       lacks, those are timed and it runs again.
    Each way times within `budget_s`, and all of the choice's timing within `seconds` (the
    planner's share of a run's budget; None: no bound but `budget_s`). Returns (extraction, the
    summary with what was timed)."""
    deadline = None if seconds is None else time.monotonic() + seconds

    def within(left):  # `left` seconds of a way, cut to what the phase has
        if deadline is None:
            return left
        rest = deadline - time.monotonic()
        return rest if left is None else min(left, rest)

    def timed(todo, left):
        nonlocal summary
        left = within(left)
        if left is not None and left <= 0:
            return 0
        if progress:
            progress(f"timing the {len(todo)} op(s) the extraction chose that the profile lacks")
        later = profile(model, todo, left, progress)
        summary = summary.then(later)
        return later.measured

    exhausted = False  # a timing that measured nothing: the budget is spent
    if summary.left and explore:
        start = time.monotonic()
        for _ in range(explore):
            with model.optimistic():
                extraction = extract()
            sigs = signatures_of_graph(extraction.graph)
            if all(s.key in model.db.entries for s in sigs):
                return extraction, summary
            todo = model.missing(sigs)
            left = None if budget_s is None else budget_s - (time.monotonic() - start)
            if not todo or (left is not None and left <= 0):
                break
            if not timed(todo, left):
                exhausted = True
                break
    extraction = extract()
    for _ in range(0 if exhausted else rounds):
        todo = model.missing(signatures_of_graph(extraction.graph))
        if not todo or not timed(todo, budget_s):
            break
        extraction = extract()
    return extraction, summary


def at_threads(model: TargetCost, threads: int) -> TargetCost:
    """`model`'s target (onnxruntime on this CPU) at another intra-op thread count: that count's
    own profile and kept verdicts, in the folder of `model`'s profile, named as the cache names
    them (`Measure(not_slower_at=)`)."""
    from einsat.cost.profile_db import machine_key

    if model.target != "onnxruntime":
        raise EinsatError(f"only onnxruntime's CPU target runs at a number of intra-op threads, not {model.target!r}")
    if threads == model.threads:
        return model
    machine = {**model.machine, "threads": threads}
    path = os.path.join(os.path.dirname(model.path), machine_key(machine) + ".json")
    return TargetCost(model.target, machine, path, name=model.name)


def verdict_record(comparison: Comparison) -> dict:
    """A verdict as the report keeps it: the comparison's figures, when it was measured if it was
    kept from an earlier run (`measured_at`; None: measured now) and its verdicts at other thread
    counts (`other_threads`; None: none asked)."""
    return {**comparison.to_dict(), "measured_at": getattr(comparison, "measured_at", None),
            "other_threads": getattr(comparison, "other_threads", None)}


def count_record(threads: int, comparison: Comparison, measured_at: str | None = None) -> dict:
    """One entry of a comparison's `other_threads`: its verdict at `threads` intra-op threads
    (`Measure(not_slower_at=)`)."""
    return {"threads": threads, "speedup": comparison.speedup, "wins": comparison.wins, "rounds": comparison.rounds,
            "p_value": comparison.p_value, "slower": comparison.slower, "measured_at": measured_at}


def check_measured(model: TargetCost, baseline: Graph, candidate: Graph, reps: int = CHECK_REPS) -> Comparison:
    """The input and the result timed side by side on the model's target (`compare_programs`)."""
    _, _, program_runner = _runners(model)
    return compare_programs(baseline, candidate, reps=reps, threads=model.threads, runner=program_runner,
                            backend=model.target)


# -- verdicts kept across runs ------------------------------------------------------------------
def program_digest(graph: Graph) -> str:
    """A digest of what `graph` computes as the target runs it: its nodes (op, attributes,
    wiring), value types, interface and weights (by value). Value names count too: two
    programs equal up to renaming get two digests (a verdict is then measured twice, never
    shared wrongly)."""
    h = hashlib.sha256()

    def put(v) -> None:
        if isinstance(v, np.ndarray):
            a = np.ascontiguousarray(v)
            h.update(f"<{a.dtype.str}{a.shape}>".encode())
            h.update(a.tobytes())
        elif isinstance(v, Graph):
            h.update(program_digest(v).encode())
        elif isinstance(v, (tuple, list)):
            h.update(b"(")
            for x in v:
                put(x)
            h.update(b")")
        else:
            h.update(f"{type(v).__name__}:{v!r};".encode())

    put(list(graph.inputs))
    put(list(graph.outputs))
    for node in graph.nodes:
        put((node.op.value, node.inputs, node.outputs))
        for key in sorted(node.attrs):
            put((key, node.attrs[key]))
    for name in sorted(graph.types):
        put((name, str(graph.types[name])))
    for name in sorted(graph.weights):
        put((name, graph.weights[name]))
    return h.hexdigest()


def verdicts_path(model: TargetCost) -> str:
    """The file of `model`'s kept verdicts: beside its profile (one per machine and versions)."""
    root, _ = os.path.splitext(model.path)
    return root + ".verdicts.json"


def _load_verdicts(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError):  # none yet, or a damaged file: measured again, then rewritten
        return {}
    return data if isinstance(data, dict) else {}


def _comparison(record) -> Comparison | None:
    """A kept verdict as a `Comparison`, None when the record is not one."""
    try:
        names = {f.name for f in fields(Comparison)}
        values = {k: record[k] for k in names if k in record}
        for k in ("baseline_spread_ms", "candidate_spread_ms", "outliers"):
            values[k] = tuple(values[k])
        return Comparison(**values)
    except (KeyError, TypeError, ValueError):
        return None


def checked(model: TargetCost, baseline: Graph, candidate: Graph, reps: int = CHECK_REPS,
            recheck: bool = False) -> tuple[Comparison, str | None]:
    """`check_measured`'s verdict on `baseline` against `candidate`, taken from the verdicts
    kept beside `model`'s profile when these two programs were compared with `reps` rounds (on
    onnxruntime, of samples of `SAMPLE_US`) on this machine before (and `recheck` is off);
    otherwise measured now and kept. Returns the verdict and when it was measured (None: now)."""
    path = verdicts_path(model)
    key = f"{program_digest(baseline)}:{program_digest(candidate)}:{reps}"
    if model.target == "onnxruntime":  # its samples' length is part of how the verdict was measured
        key += f":{SAMPLE_US:g}us"
    verdicts = _load_verdicts(path)
    if not recheck and isinstance(verdicts.get(key), dict):
        kept = _comparison(verdicts[key])
        if kept is not None:
            return kept, str(verdicts[key].get("measured_at", "an earlier run"))
    comparison = check_measured(model, baseline, candidate, reps)
    verdicts = _load_verdicts(path)  # another run may have written meanwhile: keep its verdicts
    verdicts[key] = {**asdict(comparison),
                     "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_write_json(path, verdicts)
    return comparison, None
