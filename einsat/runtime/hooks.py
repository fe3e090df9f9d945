"""Hooks: observers of a run of the interpreter loop.

The loop (`interpreter.evaluate`) calls a `Hooks` object around every step it runs; the
default does nothing. A loop or if node runs its body through the same loop with the same
hooks: `enter` is called for the program and again for a body each time it runs (once per
loop iteration, once when a branch is taken), and `before` / `after` for the body's steps
with the body graph as `graph`. What uses them: the CUDA-graph trace of
`einsat.gpu.program` (allocations per step), and the launch counts of TensorSSA's Figure 6
(`GraphRuns`: how often each graph ran).
"""

from __future__ import annotations

from collections import Counter


class Hooks:
    """Called by the loop; override what you observe. `k` is the step's index in `graph`."""

    def enter(self, graph) -> None:
        """`graph` starts running (the program, or a body for one iteration or branch)."""

    def before(self, graph, k: int, step, args: list) -> None:
        """Step `k` of `graph` is about to run on `args` (backend values, None where absent)."""

    def after(self, graph, k: int, step, args: list, outs: list) -> None:
        """Step `k` of `graph` ran and produced `outs`."""


class GraphRuns(Hooks):
    """How many times each graph ran: `counts[graph]` (the program once per run, a loop body
    once per iteration, a branch each time it is taken)."""

    def __init__(self):
        self.counts: Counter = Counter()

    def enter(self, graph) -> None:
        self.counts[graph] += 1
