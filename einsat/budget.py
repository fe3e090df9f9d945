"""The time budget of one run, and its cancellation (Ctrl-C).

    budget = Budget(10.0)                  # seconds for the whole optimization; None: no deadline
    with budget.interruptible():           # Ctrl-C now cancels the budget instead of raising
        ...                                # saturation and the ILP stop early, keeping their best

A `Budget` is shared by the phases of one run: the saturation session checks it between
phases, the ILP from HiGHS's interrupt callback. `remaining()` is the time left (inf without a
deadline); `exhausted` is true once the deadline passed or the budget was cancelled. `reserve(s)` holds
`s` seconds back for a later phase (the verification), `release(s)` gives them back. A second
Ctrl-C inside `interruptible()` raises `KeyboardInterrupt` as usual, for a user who wants out now.

Each Ctrl-C is acknowledged at once: `on_interrupt(count)` (the CLI prints what it will do) is
called as soon as the signal arrives, from a watcher thread woken by the signal's wakeup fd, not
only when the main thread next runs Python code (which waits for the step under way: a saturation
phase in egglog, a HiGHS solve). `verified` is the best program verified so far, when the run has
one (`optimize` sets it after its check): what the CLI writes after a second Ctrl-C.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any


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
        self.on_interrupt: Callable[[int], None] | None = None  # told of each Ctrl-C at once: its count
        self.verified: Any = None  # the best program verified so far (an `ir.Graph`), when there is one
        self.interrupts = 0        # the Ctrl-Cs seen inside `interruptible()`
        self._acknowledged = 0
        self._lock = threading.Lock()

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

    def _interrupted(self, count: int) -> None:
        """The `count`-th Ctrl-C: the first cancels the run; each is acknowledged once."""
        with self._lock:
            self.interrupts = max(self.interrupts, count)
            if count <= self._acknowledged:
                return
            self._acknowledged = count
        if count == 1:
            self.cancel()
        if self.on_interrupt is not None:
            self.on_interrupt(count)

    @contextmanager
    def interruptible(self):
        """While open (in the main thread), the first Ctrl-C cancels this budget; a second one
        raises `KeyboardInterrupt`. Each is acknowledged (`on_interrupt`) as it arrives. Elsewhere
        it changes nothing."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        seen = self.interrupts  # the signals before this context (an outer one's) count too
        handled = 0

        def handler(signum, frame):
            nonlocal handled
            handled += 1
            count = max(seen + handled, self.interrupts)  # the watcher may have counted coalesced ones
            self._interrupted(count)
            if count >= 2:
                raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, handler)
        watcher = _Watcher(self, seen)
        try:
            yield self
        finally:
            watcher.stop()
            signal.signal(signal.SIGINT, previous)


class _Watcher:
    """A thread woken by the signal module's wakeup fd (written by the C-level handler the moment a
    signal arrives, whatever the main thread is doing), which acknowledges each Ctrl-C at once."""

    def __init__(self, budget: Budget, seen: int):
        self.budget, self.seen = budget, seen
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)
        try:
            self.previous = signal.set_wakeup_fd(self.write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            self.previous = None
            os.close(self.read)
            os.close(self.write)
            self.thread = None
            return
        self.thread = threading.Thread(target=self._run, name="einsat-ctrl-c", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            data = os.read(self.read, 64)
            for signum in data:
                if signum == 0:  # stop()
                    return
                if signum == signal.SIGINT:
                    self.seen += 1
                    self.budget._interrupted(self.seen)

    def stop(self) -> None:
        if self.thread is None:
            return
        signal.set_wakeup_fd(self.previous)
        os.write(self.write, b"\0")
        self.thread.join(timeout=5)
        os.close(self.read)
        os.close(self.write)


def of(budget: Budget | float | None) -> Budget:
    """A `Budget` from seconds (or None), or the given one."""
    return budget if isinstance(budget, Budget) else Budget(budget)
