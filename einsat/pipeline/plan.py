"""The budget planner: one place that gives every phase of a run its seconds.

A run (`einsat.pipeline.run`) has one `Budget` (`Options.budget`: seconds for the whole run, or
none). Its phases take their seconds from one `Planner`, each when it starts, as a share of what
is left then (`SHARES`), capped by the option that bounds the phase (`caps`) and floored where a
phase must have a moment to return anything (`FLOORS`):

    phase      share of what is left   cap (the option; its default)          floor
    profile    1/2                     Measure.profile_s (120 s): input + candidates together
    saturate   1/2                     Limits.time_s (60 s: a safety net)     0.01 s
    extract    4/5 (a fifth kept for   Limits.extract_s (60 s: a safety net)  0.05 s
               the rebuild)
    choose     1/2                     60 s for each of its ways (`measure.choose`)
    check      all                     none: the result's fused units profiled, then both
                                       programs timed side by side (`Measure.check_reps`)
    pieces     4/5, over the rounds    -                                      0.5 s
               of pieces (partition)

Seconds a later phase will need are held back (`hold`) from the start: the verification's
(the candidate's runs, `VERIFY_MARGIN` times the reference's), the measured check's
(`check_estimate`), as much again for a measured run's modeled alternative (its verification
and its check, `phases.ALT_VERIFY`, `phases.ALT_CHECK`; its extraction takes the extract phase's
share, and it is skipped where nothing is left beyond the holds) and, on the command line, the
writing of the result (as long as the reading took). The phases before it see them as spent
until `release`. A partitioned run
(`einsat.partition`) takes the whole input's verification runs before its pieces too, and also
holds its copies' checks (`rebind_estimate`: a share of the input's run for each copied piece);
its pieces' share ends at one time, so a piece that starts late (a worker's start-up, the queue)
gets what is left of it, and a copy the deadline leaves no time to check stays the piece it was.

Without a budget every phase gets its cap (None: unbounded), exactly as before the planner:
a run with no budget is shaped by work limits, never by the clock of another phase.
`granted` keeps what each phase was given (`grants`: every grant; `log`: each with what was
left then, in order), `took` what it
took by the planner's phase names (the measured choice's profiling apart, as "choose"; the
check as "check"), and `times` the same seconds under the report's names (the choice's timing
counted as "profile", its extractions as "extract", the check as "measure").
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from einsat.budget import Budget

SHARES = {"profile": 0.5, "saturate": 0.5, "extract": 0.8, "choose": 0.5, "check": 1.0, "pieces": 0.8}
FLOORS = {"saturate": 0.01, "extract": 0.05, "pieces": 0.5}
EXTRACT_S = 60.0       # one ILP solve's seconds by default (`Limits.extract_s`)
PROFILE_S = 120.0      # op profiling of a measured model, by default (`Measure.profile_s`)
CHOICE_S = 60.0        # the measured choice's profiling, for each of its ways
VERIFY_MARGIN = 1.5    # the candidate's verification runs held back: this times the reference's
CHECK_SETUP_S = 0.05   # the measured check's session set-up, per program (held back with its rounds)
CHECK_BLOCKS = 3       # the measured check's blocks of rounds at most: a pilot, its retake, the confirmation
GIVEN_BLOCKS = 2       # the given file's comparison's (`pipeline.given`): a block and its confirmation


class Planner:
    """Seconds for each phase of one run under `budget` (see the module docstring)."""

    def __init__(self, budget: Budget, caps: dict[str, float | None] | None = None):
        self.budget = budget
        self.caps = dict(caps or {})
        self.granted: dict[str, float | None] = {}
        self.grants: dict[str, list[float | None]] = {}
        self.times: dict[str, float] = {}
        self.took: dict[str, float] = {}
        self.log: list[tuple[str, float | None, float | None]] = []  # (phase, seconds given, seconds left then)
        self.held: dict[str, float] = {}

    @classmethod
    def of(cls, options, budget: Budget | None = None) -> Planner:
        """The planner of a run with `options` (`Options`), on `budget` (default: its own)."""
        limits = options.saturation_limits()
        return cls(options.run_budget() if budget is None else budget,
                   {"profile": PROFILE_S if options.measuring.profile_s is None else options.measuring.profile_s,
                    "saturate": limits.time_s,
                    "extract": limits.extract_s,
                    "choose": CHOICE_S, "check": None, "pieces": None})

    @property
    def bounded(self) -> bool:
        """Whether the run has a deadline."""
        return self.budget.seconds is not None

    def seconds(self, phase: str, rounds: int = 1) -> float | None:
        """The seconds `phase` may take, starting now: its share of what is left (divided among
        `rounds` that run one after the other), capped and floored; its cap without a deadline."""
        cap = self.caps.get(phase)
        left = self.budget.remaining() if self.bounded else None
        if left is not None:
            share = SHARES[phase] * max(0.0, left) / max(1, rounds)
            share = max(FLOORS.get(phase, 0.0), share)
            cap = share if cap is None else min(cap, share)
        self.granted[phase] = cap
        self.grants.setdefault(phase, []).append(cap)
        self.log.append((phase, cap, left))
        return cap

    def hold(self, phase: str, seconds: float) -> float:
        """Keep `seconds` for `phase`, a later one, from the phases before it (with a deadline)."""
        if not self.bounded:
            return 0.0
        held = self.budget.reserve(seconds)
        self.held[phase] = self.held.get(phase, 0.0) + held
        return held

    def release(self, phase: str) -> None:
        """`phase` starts: the seconds held for it go back to the budget."""
        self.budget.release(self.held.pop(phase, 0.0))

    def release_all(self) -> None:
        for phase in list(self.held):
            self.release(phase)

    @contextmanager
    def phase(self, name: str, plan: str | None = None):
        """Time the block as the report's phase `name` (the planner's `plan`, default the same)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spent(name, time.perf_counter() - t0, plan)

    def spent(self, name: str, seconds: float, plan: str | None = None) -> None:
        """Count `seconds` (possibly negative: a part moved to another phase) to the report's
        phase `name` and the planner's `plan` (default: the same name)."""
        self.times[name] = self.times.get(name, 0.0) + seconds
        key = plan or name
        self.took[key] = self.took.get(key, 0.0) + seconds


def check_estimate(predicted_us: float, reps: int, warmup: int = 3, blocks: int = CHECK_BLOCKS) -> float:
    """Seconds the measured check will take, at most, roughly: two programs each running about
    as long as the input is predicted to (`predicted_us`; a sample runs `SAMPLE_US` at least),
    `reps` rounds and their warm-up, in `blocks` blocks (three: a block leaning faster is taken
    again, a verdict of faster confirmed, each on fresh sessions: `runtime.profiler.compare_programs`),
    and their sessions' set-up."""
    from einsat.runtime.profiler import SAMPLE_US  # a sample runs a program this long at least
    return blocks * 2 * ((reps + warmup) * max(SAMPLE_US, predicted_us) / 1e6 + CHECK_SETUP_S)
