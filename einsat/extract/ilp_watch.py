"""Watching HiGHS while it solves the extraction ILP: progress, and when to stop early.

`IlpWatch` subscribes to two HiGHS callbacks. On each better incumbent it reports the new cost
and notes the branch-and-bound node it came at; on HiGHS's periodic interrupt check it stops
the solve when

- the run's `Budget` was cancelled (Ctrl-C): "interrupted";
- the run's `Budget` has no time left: "time limit";
- no better program came for `STALL_NODES` branch-and-bound nodes, or for as many nodes as
  it took to find the incumbent if that is more: "stopped improving". Past that point HiGHS
  mostly works on its lower bound; the incumbent is kept and the gap says how far from proven
  it is.

The stall is counted in nodes, work that does not depend on the machine's load, never in
seconds: the same e-graph stops at the same node with the same program whatever else the
machine runs (HiGHS's search is deterministic). Only the time limit and the budget are clocks,
and they stop a solve early: the status says so ("time limit"), and a run given the time gets
the same program every time. (`ilp.MAX_NODES` bounds the whole search the same way.)

Progress goes to `progress(message, cost)` at most every `PROGRESS_S` seconds (and at every
better incumbent); progress never decides anything.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from einsat.budget import Budget

STALL_NODES = 200
PROGRESS_S = 0.5


class IlpWatch:
    def __init__(self, budget: Budget | None = None, progress: Callable[[str, float], None] | None = None,
                 stall_nodes: float = STALL_NODES):
        self.budget = budget
        self.progress = progress
        self.stall_nodes = stall_nodes
        self.start = self.shown = time.perf_counter()
        self.improved_at = 0  # the branch-and-bound node of the last better incumbent
        self.best = math.inf
        self.reason: str | None = None  # why the watch stopped the solve

    def attach(self, highs) -> None:
        highs.cbMipImprovingSolution.subscribe(self._on_solution)
        highs.cbMipInterrupt.subscribe(self._on_interrupt)

    @staticmethod
    def _nodes(event) -> int:
        return max(0, int(getattr(event.data_out, "mip_node_count", 0) or 0))

    def _on_solution(self, event) -> None:
        cost = float(event.data_out.objective_function_value)
        if cost < self.best:
            self.best, self.improved_at = cost, self._nodes(event)
            self._show(f"better program found: {cost:,.2f}", cost)

    def _on_interrupt(self, event) -> None:
        nodes = self._nodes(event)
        if self.budget is not None and self.budget.cancelled:
            self.reason = self.budget.reason or "interrupted"  # "memory limit" when the memory watch stopped it
        elif self.budget is not None and self.budget.exhausted:
            self.reason = "time limit"
        elif nodes - self.improved_at > max(self.stall_nodes, self.improved_at):
            self.reason = "stopped improving"
        if self.reason is not None:
            event.interrupt()
        elif time.perf_counter() - self.shown >= PROGRESS_S:
            out = event.data_out
            self._show(f"best {out.mip_primal_bound:,.2f}, bound {out.mip_dual_bound:,.2f}", out.mip_primal_bound)

    def _show(self, message: str, cost: float) -> None:
        self.shown = time.perf_counter()
        if self.progress is not None:
            self.progress(message, cost)
