"""Watching HiGHS while it solves the extraction ILP: progress, and when to stop early.

`IlpWatch` subscribes to two HiGHS callbacks. On each better incumbent it reports the new cost;
on HiGHS's periodic interrupt check it stops the solve when

- the run's `Budget` was cancelled (Ctrl-C): "interrupted";
- the run's `Budget` has no time left: "time limit";
- no better program was found for `STALL_S` seconds, or for half the time spent so far if that is
  longer: "stopped improving". Past that point HiGHS mostly works on its lower bound; the
  incumbent is kept and the gap says how far from proven it is.

Progress goes to `progress(message, cost)` at most every `PROGRESS_S` seconds (and at every
better incumbent).
"""

from __future__ import annotations

import math
import time
from typing import Callable

from einsat.budget import Budget

STALL_S = 1.0
PROGRESS_S = 0.5


class IlpWatch:
    def __init__(self, budget: Budget | None = None, progress: Callable[[str, float], None] | None = None,
                 stall_s: float = STALL_S):
        self.budget = budget
        self.progress = progress
        self.stall_s = stall_s
        self.start = self.improved = self.shown = time.perf_counter()
        self.best = math.inf
        self.reason: str | None = None  # why the watch stopped the solve

    def attach(self, highs) -> None:
        highs.cbMipImprovingSolution.subscribe(self._on_solution)
        highs.cbMipInterrupt.subscribe(self._on_interrupt)

    def _on_solution(self, event) -> None:
        cost = float(event.data_out.objective_function_value)
        if cost < self.best:
            self.best, self.improved = cost, time.perf_counter()
            self._show(f"better program found: {cost:,.2f}", cost)

    def _on_interrupt(self, event) -> None:
        now = time.perf_counter()
        if self.budget is not None and self.budget.cancelled:
            self.reason = self.budget.reason or "interrupted"  # "memory limit" when the memory watch stopped it
        elif self.budget is not None and self.budget.exhausted:
            self.reason = "time limit"
        elif now - self.improved > max(self.stall_s, 0.5 * (now - self.start)):
            self.reason = "stopped improving"
        if self.reason is not None:
            event.interrupt()
        elif now - self.shown >= PROGRESS_S:
            out = event.data_out
            self._show(f"best {out.mip_primal_bound:,.2f}, bound {out.mip_dual_bound:,.2f}", out.mip_primal_bound)

    def _show(self, message: str, cost: float) -> None:
        self.shown = time.perf_counter()
        if self.progress is not None:
            self.progress(message, cost)
