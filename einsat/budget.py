"""The time budget of one run, and its cancellation (Ctrl-C).

    budget = Budget(10.0)                  # seconds for the whole optimization; None: no deadline
    with budget.interruptible():           # Ctrl-C now cancels the budget instead of raising
        ...                                # saturation and the ILP stop early, keeping their best

A `Budget` is shared by the phases of one run: the saturation session checks it between
phases, the ILP from HiGHS's interrupt callback. `remaining()` is the time left (inf without a
deadline); `exhausted` is true once the deadline passed or the budget was cancelled. `reserve(s)` holds
`s` seconds back for a later phase (the verification), `release(s)` gives them back. A second
Ctrl-C inside `interruptible()` raises `KeyboardInterrupt` as usual, for a user who wants out now.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from contextlib import contextmanager


class Budget:
    """A deadline (`seconds` from now, None for none) and a cancellation flag."""

    def __init__(self, seconds: float | None = None):
        if seconds is not None and seconds <= 0:
            raise ValueError(f"a time budget must be positive, got {seconds}")
        self.seconds = seconds
        self.start = time.monotonic()
        self.cancelled = False
        self.reason: str | None = None  # why it was cancelled: "interrupted" (Ctrl-C), "memory limit", ...
        self.reserved = 0.0  # seconds held back for a later phase (`reserve`)

    def remaining(self) -> float:
        """Seconds left before the deadline, less those reserved (inf without a deadline)."""
        if self.cancelled:
            return 0.0
        if self.seconds is None:
            return math.inf
        return self.seconds - (time.monotonic() - self.start) - self.reserved

    def reserve(self, seconds: float) -> float:
        """Hold `seconds` back for a later phase (the verification, the output's writing): the
        phases before it see them as spent until `release(seconds)`. Returns the seconds held."""
        seconds = max(0.0, float(seconds))
        self.reserved += seconds
        return seconds

    def release(self, seconds: float) -> None:
        """Give `seconds` held by `reserve` back: the phase they were kept for starts now."""
        self.reserved = max(0.0, self.reserved - seconds)

    @property
    def exhausted(self) -> bool:
        return self.remaining() <= 0

    def cancel(self, reason: str = "interrupted") -> None:
        """Cancel the run; the first reason given is kept."""
        if not self.cancelled:
            self.reason = reason
        self.cancelled = True

    @contextmanager
    def interruptible(self):
        """While open (in the main thread), the first Ctrl-C cancels this budget; a second one
        raises `KeyboardInterrupt`. Elsewhere it changes nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum, frame):
            if self.cancelled:
                raise KeyboardInterrupt
            self.cancel()

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def of(budget: Budget | float | None) -> Budget:
    """A `Budget` from seconds (or None), or the given one."""
    return budget if isinstance(budget, Budget) else Budget(budget)
