"""Never slower on the GPU: an optimized program against its input, both as CUDA graphs.

`check_programs(original, optimized, device)` is what `einsat check` and the GPU session's
`check` phase (scripts/gpu_session.py) run on the GPU machine, which has no egglog:

1. stale profile entries: the signatures of both programs whose entries in `db` (the GPU
   profile the cost model reads) are `profiler.stale` (their cuDNN algorithms were chosen
   otherwise than this device chooses them now) are timed again (`Profiler.profile`) before
   anything else compiles, so their new choices are recorded; the caller writes `db` back.
   An optimized fsrcnn ran 0.91x its input on an H100, chosen on convolution entries the last
   profiling run had marked stale: the next optimize on this profile costs them as they run.
2. outputs: both programs compiled (`CompiledProgram`: static memory plan, CUDA graph) and run
   on the same random inputs; each output of the optimized program must equal the input
   program's within `rtol` of the output's largest magnitude (`rel_error`; exactly, for
   integer and boolean outputs). Otherwise the verdict is "mismatch" and the input is kept.
3. time: `runtime.profiler.compare_programs`, the rule `optimize(cost="cpu")` judges by:
   interleaved rounds (every other one in reverse order) of the two programs after warm-up,
   medians with their 10th and 90th percentiles, Wilcoxon's signed-rank test on the per-round
   log ratios and a 2% margin; a verdict of faster is confirmed by a second block of rounds
   on freshly compiled programs. Each timed call is `replays` back-to-back CUDA-graph replays
   between two CUDA events (`profiler.program_runner`; on the tests' host emulation, the wall
   clock).

The optimized program is kept only when it is measured faster; else the input is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from einsat.errors import EinsatError
from einsat.gpu.profiler import program_runner, stale
from einsat.ir.graph import Graph
from einsat.ir.signature import Signature, signatures_of_graph
from einsat.ir.types import is_float
from einsat.runtime import random_inputs
from einsat.runtime.profiler import Comparison, Runner, compare_programs

FORMAT = "einsat-check/1"
RTOL = 1e-3      # the largest output difference allowed, relative to the output's largest magnitude
ROUNDS = 15      # interleaved rounds per block (a verdict of faster takes a second block)
REPLAYS = 20     # CUDA-graph replays per timed call
WARMUP = 3


@dataclass
class CheckResult:
    """The verdict on an optimized program against its input on one device."""

    verdict: str                      # "faster", "not faster" or "mismatch"
    kept: str                         # "optimized" or "input"
    device: str
    rel_error: float                  # the optimized program's largest output error, relative
    rtol: float
    comparison: Comparison | None     # None when the outputs did not match (nothing was timed)
    replays: int
    modes: dict[str, str] = field(default_factory=dict)  # each program's `CompiledProgram.mode`
    reprofiled: list[str] = field(default_factory=list)  # signature keys timed again (stale entries)
    reprofile_failed: dict[str, str] = field(default_factory=dict)
    measured_at: str = ""

    @property
    def faster(self) -> bool:
        return self.kept == "optimized"

    def to_dict(self) -> dict:
        return {"format": FORMAT, "verdict": self.verdict, "kept": self.kept, "device": self.device,
                "rel_error": self.rel_error, "rtol": self.rtol, "replays": self.replays, "modes": self.modes,
                "comparison": self.comparison.to_dict() if self.comparison else None,
                "reprofiled": self.reprofiled, "reprofile_failed": self.reprofile_failed,
                "measured_at": self.measured_at}

    def __str__(self) -> str:
        what = {"faster": "the optimized program is faster: it is kept",
                "not faster": "the optimized program is not measured faster beyond noise: the input is kept",
                "mismatch": f"the optimized program's outputs differ from the input's (relative error "
                            f"{self.rel_error:.1e} > {self.rtol:.0e}): the input is kept"}[self.verdict]
        lines = [f"on {self.device}: {what}"]
        if self.comparison is not None:
            lines.append(f"  {self.comparison} ({self.replays} CUDA-graph replays per timed call; "
                         f"modes {self.modes.get('input')} / {self.modes.get('optimized')})")
            lines.append(f"  outputs equal within {self.rtol:.0e} (largest relative error {self.rel_error:.1e})")
        if self.reprofiled or self.reprofile_failed:
            lines.append(f"  profile: {len(self.reprofiled)} stale entr{'y' if len(self.reprofiled) == 1 else 'ies'}"
                         f" timed again" + (f", {len(self.reprofile_failed)} failed" if self.reprofile_failed else ""))
        return "\n".join(lines)


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference of `got` from `want`, relative to `want`'s largest magnitude;
    integer and boolean values must be equal (inf when they are not)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if not is_float(want.dtype):
        return 0.0 if np.array_equal(got, want) else float("inf")
    want64 = want.astype(np.float64)
    diff = np.abs(got.astype(np.float64) - want64)
    if not np.all(np.isfinite(diff)):  # a NaN or inf where the other has a number (or differs)
        same = np.array_equal(got, want, equal_nan=True)
        return 0.0 if same else float("inf")
    return float(diff.max(initial=0.0) / max(float(np.abs(want64).max(initial=0.0)), 1e-30))


def stale_signatures(graphs: list[Graph], db) -> list[Signature]:
    """The signatures of `graphs` whose entries in the profile `db` are `stale`, each once."""
    out: dict[str, Signature] = {}
    for g in graphs:
        for sig in signatures_of_graph(g):
            if sig.key in db and stale(db.entries[sig.key]):
                out[sig.key] = sig
    return list(out.values())


def check_programs(original: Graph, optimized: Graph, device, *, rounds: int = ROUNDS, replays: int = REPLAYS,
                   warmup: int = WARMUP, rtol: float = RTOL, seed: int = 0, db=None, profiler=None,
                   runner: Callable[[Graph, int], Runner] | None = None,
                   progress: Callable[[str], None] | None = None) -> CheckResult:
    """Judge `optimized` against `original` on `device` (see the module docstring).

    `db`: the profile (a `ProfileDB`) whose stale entries these programs meet are timed again
    into it by `profiler` (default: `profiler.Profiler(device)`); the caller saves it.
    `runner(graph, seed)`: a timed call's runner (default: `program_runner` with `replays`)."""
    say = progress or (lambda text: None)
    if original.input_types() != optimized.input_types() or list(original.outputs) != list(optimized.outputs):
        raise EinsatError(f"the optimized program's interface differs from the input's: inputs "
                          f"{dict(optimized.input_types())} and outputs {list(optimized.outputs)} against "
                          f"{dict(original.input_types())} and {list(original.outputs)}")
    name = getattr(device, "name", type(device).__name__)
    name = name.decode() if isinstance(name, bytes) else str(name)
    props = getattr(device, "properties", None)
    if props and "name" in props:
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    reprofiled, failed = [], {}
    if db is not None:
        todo = stale_signatures([original, optimized], db)
        if todo:
            say(f"timing again {len(todo)} stale profile entr{'y' if len(todo) == 1 else 'ies'} these programs use")
            if profiler is None:
                from einsat.gpu.profiler import Profiler
                profiler = Profiler(device)
            profiler.profile(todo, db, skip_known=True)
            reprofiled = [s.key for s in todo if s.key in db and not stale(db.entries[s.key])]
            failed = {s.key: db.failures.get(s.key, "still stale") for s in todo if s.key not in reprofiled}
    from einsat.gpu.program import CompiledProgram
    feeds = random_inputs(original, seed)
    outs, modes = {}, {}
    for key, g in (("input", original), ("optimized", optimized)):
        say(f"compiling and running the {key} program")
        prog = CompiledProgram(g, device=device)
        outs[key] = prog.run(feeds)
        modes[key] = prog.mode
        del prog
    err = max((rel_error(outs["optimized"][o], outs["input"][o]) for o in original.outputs), default=0.0)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    common = dict(device=name, rel_error=err, rtol=rtol, replays=replays, modes=modes, reprofiled=reprofiled,
                  reprofile_failed=failed, measured_at=now)
    if not err <= rtol:
        return CheckResult("mismatch", "input", comparison=None, **common)
    say(f"timing both programs side by side ({rounds} interleaved rounds of {replays} replays)")
    runner = runner or (lambda g, s: program_runner(g, device, s, replays=replays))
    comparison = compare_programs(original, optimized, reps=rounds, warmup=warmup, seed=seed, runner=runner,
                                  backend=f"cupy ({name})")
    verdict = "faster" if comparison.faster else "not faster"
    return CheckResult(verdict, "optimized" if comparison.faster else "input", comparison=comparison, **common)
