"""Watching HiGHS while it solves the extraction ILP: progress, and when to stop early.

`IlpWatch` subscribes to two HiGHS callbacks. On each better incumbent it reports the new cost
and notes the branch-and-bound node it came at; on HiGHS's periodic interrupt check it stops
the solve when

- the run's `Budget` was cancelled (Ctrl-C): "interrupted";
- the run's `Budget` has no time left: "time limit";
- no better program came for `STALL_NODES` branch-and-bound nodes, or for as many nodes as
  it took to find the incumbent if that is more: "stopped improving". Past that point HiGHS
  mostly works on its lower bound; the incumbent is kept and the gap says how far from proven
  it is;
- at the root node, where the node count does not move (a long root: its LP, cuts and
  heuristics), no better program came for `ROOT_STALL_CHECKS` of HiGHS's interrupt checks:
  also "stopped improving". HiGHS checks at fixed points of its algorithm (each separation
  round, LP resolve, heuristic), so the checks count work as nodes do; without this a root
  that outlasts the time limit would end on the clock (the status "time limit") on every run;
- at the root, HiGHS's bound stayed below `weak_bound` (`greedy.lower_bound`'s, a
  combinatorial bound of the DAG cost) for `FLAT_CHECKS` checks without rising, and no better
  program than the start came: "stopped: LP bound weak". Its cut rounds have stopped raising an
  LP that cannot prove even what the lower bound does (a value shared by fractional choices is
  paid once at the largest fraction, not per use), so the branch and bound that follows is a
  slow heuristic: ResNet-18's bound rose to 366 µs in 59 checks and stayed there beside a
  913 µs lower bound (its optimum-so-far 953 µs), GPT-2's to 239 beside 366 (and 383); their
  ILPs ran 8-13 s and found nothing the local search does not (`local.improve`). A bound that
  is still rising is left alone (BERT's passes its lower bound in 25 checks, never flat for
  more than 2, and the ILP proves a 5% better program).

The stall is counted in nodes (and checks at the root), work that does not depend on the
machine's load, never in seconds: the same e-graph stops at the same node with the same program whatever else the
machine runs (HiGHS's search is deterministic). Only the time limit and the budget are clocks,
and they stop a solve early: the status says so ("time limit"), and a run given the time gets
the same program every time. (`ilp.MAX_NODES` bounds the whole search the same way.)

Progress goes to `progress(message, cost)` at most every `PROGRESS_S` seconds (and at every
better incumbent); progress never decides anything. With `price` (the incumbent's column values
-> its program's cost, as the report will give it: `extract` rebuilds the program and costs it
whole), the figures shown are programs' costs in the model's `unit`, not the ILP's objective
(which leaves out what a program costs beyond its e-nodes: a measured CPU model's fusion groups,
the identity nodes naming outputs); the bound is shifted by the same difference, as the report's.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from einsat.budget import Budget

STALL_NODES = 200
FLAT_CHECKS = 20  # root checks with HiGHS's bound flat below the lower bound: the LP is weak
ROOT_STALL_CHECKS = 1000  # interrupt checks at the root without a better program (ResNet-18's root: ~560)
PROGRESS_S = 0.5


class IlpWatch:
    def __init__(self, budget: Budget | None = None, progress: Callable[[str, float], None] | None = None,
                 stall_nodes: float = STALL_NODES, root_stall_checks: float = ROOT_STALL_CHECKS,
                 price: Callable[[object], float | None] | None = None, unit: str = "",
                 weak_bound: float = -math.inf):
        self.budget = budget
        self.weak_bound = weak_bound
        self.dual = -math.inf  # HiGHS's bound at the last check
        self.flat = 0          # checks since it last rose
        self.progress = progress
        self.price = price  # the incumbent's column values -> its program's cost (None: the objective shown)
        self.unit = f" {unit}" if unit else ""
        self.offset = 0.0  # the last priced incumbent's program cost minus its objective
        self.stall_nodes = stall_nodes
        self.root_stall_checks = root_stall_checks
        self.checks = 0       # interrupt checks so far
        self.improved_check = 0  # the check count at the last better incumbent
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
            self.best, self.improved_at, self.improved_check = cost, self._nodes(event), self.checks
            if self.progress is None:
                return
            shown = cost
            if self.price is not None:
                try:
                    shown = self.price(event.data_out.mip_solution)
                except Exception:  # progress never decides anything, nor fails the solve
                    shown = None
                if shown is None:  # no program of its own (a cycle): nothing the report would show
                    return
                self.offset = shown - cost
            self._show(f"better program found: {shown:,.2f}{self.unit}", shown)

    def _on_interrupt(self, event) -> None:
        nodes = self._nodes(event)
        self.checks += 1
        if self.budget is not None and self.budget.cancelled:
            self.reason = self.budget.reason or "interrupted"  # "memory limit" when the memory watch stopped it
        elif self.budget is not None and self.budget.exhausted:
            self.reason = "time limit"
        elif nodes - self.improved_at > max(self.stall_nodes, self.improved_at):
            self.reason = "stopped improving"
        elif nodes == 0 and self.checks - self.improved_check > self.root_stall_checks:
            self.reason = "stopped improving"  # at the root
        elif nodes == 0 and self._weak(float(event.data_out.mip_dual_bound)):
            self.reason = "stopped: LP bound weak"
        if self.reason is not None:
            event.interrupt()
        elif time.perf_counter() - self.shown >= PROGRESS_S:
            out = event.data_out
            best, bound = out.mip_primal_bound + self.offset, out.mip_dual_bound + self.offset
            self._show(f"best {best:,.2f}{self.unit}, bound {bound:,.2f}{self.unit}", best)

    def _weak(self, dual: float) -> bool:
        """HiGHS's root bound flat below `weak_bound` for `FLAT_CHECKS` checks, and no better
        program than the start (the one at check 0)."""
        self.flat = self.flat + 1 if dual <= self.dual else 0
        self.dual = max(self.dual, dual)
        return self.improved_check == 0 and math.isfinite(dual) and dual < self.weak_bound and \
            self.flat >= FLAT_CHECKS

    def _show(self, message: str, cost: float) -> None:
        self.shown = time.perf_counter()
        if self.progress is not None:
            self.progress(message, cost)
