"""The time budget of one run, and its cancellation (Ctrl-C).

    budget = Budget(10.0)                  # seconds for the whole optimization; None: no deadline
    with budget.interruptible():           # Ctrl-C now cancels the budget instead of raising
        ...                                # saturation and the ILP stop early, keeping their best

A `Budget` is shared by the phases of one run: the saturation session checks it between
phases, the ILP from HiGHS's interrupt callback. `remaining()` is the time left (inf without a
deadline); `exhausted` is true once the deadline passed or the budget was cancelled. `reserve(s)` holds
`s` seconds back for a later phase (the verification), `release(s)` gives them back.

**One Ctrl-C state per process.** However `interruptible()` contexts nest (the command line's
around the pipeline's, a partition piece's run inside the whole run's, in any thread), the
process has one SIGINT handler and one count of Ctrl-Cs, installed by the outermost context
opened in the main thread and removed when it closes (the count starts again from zero then).
The first Ctrl-C cancels the budget of every open context (and of any context opened later
while the outermost one is open: the search of the whole process is over); a second one raises
`KeyboardInterrupt` in the main thread, for a user who wants out now. Each Ctrl-C is
acknowledged at once, once per budget: `on_interrupt(count)` (the CLI prints what it will do)
is called as soon as the signal arrives, from a watcher thread woken by the signal's wakeup fd,
not only when the main thread next runs Python code (which waits for the step under way: a
saturation phase in egglog, a HiGHS solve). `verified` is the best program verified so far,
when the run has one (`optimize` sets it after its check): what the CLI writes after a second
Ctrl-C.

`listening(callback)` tells `callback(count)` of each Ctrl-C while it is open (a process pool
stops its workers' searches on the first, and ends the workers on the second). A worker process
calls `follow(event)` first: it ignores SIGINT (its parent decides), and the parent's setting
`event` stands for its first Ctrl-C. `interrupted()` is the process's count.

Test-only: with `EINSAT_TEST_HOLD=PHASE:N` (or several, comma-separated) in the environment, a
run's main thread waits at the start of phase PHASE (its progress event) until the process has
had N Ctrl-Cs (`hold`; in a partition's worker, until its parent's first), saying so on stderr
("einsat: test hold: PHASE ..."), so that a test's SIGINT lands in that phase however fast or
loaded the machine is (tests/test_ctrl_c_process.py). Nothing else reads it.
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

HOLD_ENV = "EINSAT_TEST_HOLD"  # test-only (see the module docstring)


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
        self.interrupts = 0        # the Ctrl-Cs seen while one of its `interruptible()` contexts was open
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

    def _interrupted(self, count: int) -> bool:
        """The process's `count`-th Ctrl-C: the first cancels the run; each is acknowledged once.
        Whether `on_interrupt` was told."""
        with self._lock:
            self.interrupts = max(self.interrupts, count)
            if count <= self._acknowledged:
                return False
            self._acknowledged = count
        self.cancel()
        if self.on_interrupt is None:
            return False
        self.on_interrupt(count)
        return True

    @contextmanager
    def interruptible(self):
        """While open, the process's first Ctrl-C cancels this budget and a second one raises
        `KeyboardInterrupt` in the main thread; each is acknowledged (`on_interrupt`) as it
        arrives. Nested contexts, of this budget or others, share the process's one handler
        and count (see the module docstring)."""
        token = _STATE.enter(self)
        try:
            yield self
        finally:
            _STATE.leave(self, token)


def interrupted() -> int:
    """The Ctrl-Cs this process has had while an `interruptible()` context was open (in a worker
    that `follow`s its parent: 1 once the parent stopped the search)."""
    return _STATE.count


def stop_if_interrupted_twice() -> None:
    """Raise `KeyboardInterrupt` if this process had a second Ctrl-C while its handler is installed:
    the handler's own raise may have been swallowed by a C library it interrupted (a HiGHS
    callback's exception ends the callback, not the solve). The pipeline checks at each progress
    event."""
    if _STATE.count >= 2 and _STATE.owner is not None and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


def acknowledged() -> bool:
    """Whether this process's Ctrl-C was told to someone who says what happens now (an
    `on_interrupt`, or the parent process of a worker)."""
    return _STATE.told


@contextmanager
def listening(callback: Callable[[int], None]):
    """`callback(count)` on each of the process's Ctrl-Cs while open (from the watcher thread
    or the main thread; at once if one came already)."""
    _STATE.listen(callback)
    try:
        yield
    finally:
        _STATE.unlisten(callback)


def follow(event) -> None:
    """Make this process a worker whose Ctrl-C is its parent's: SIGINT is ignored here (a
    terminal's Ctrl-C reaches the whole process group), and once `event` (a multiprocessing
    `Event` the parent sets on its first Ctrl-C) is set, the search of every open and later
    `interruptible()` budget of this process is cancelled. The parent ends the worker itself
    on a second Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STATE.follower = True

    def wait() -> None:
        event.wait()
        _STATE.told = True  # the parent says what happens
        _STATE.arrived(1)

    threading.Thread(target=wait, name="einsat-follow", daemon=True).start()


def hold(phase: str) -> None:
    """Test-only (`EINSAT_TEST_HOLD=PHASE:N[,PHASE:N...]`): in the main thread of a process whose
    Ctrl-C handler is installed, or of a worker that follows its parent, wait at the start of
    `phase` until the process had N Ctrl-Cs (a second one raises `KeyboardInterrupt` here, as in
    any phase; a worker has at most one, its parent's first, and is ended on the second)."""
    spec = os.environ.get(HOLD_ENV)
    if not spec or threading.current_thread() is not threading.main_thread():
        return
    want = next((int(n or 1) for name, _, n in (item.strip().partition(":") for item in spec.split(","))
                 if name == phase), None)
    if want is None or not (_STATE.owner is not None or _STATE.follower) or _STATE.count >= want:
        return
    import sys
    print(f"einsat: test hold: {phase} until Ctrl-C {want} (pid {os.getpid()})", file=sys.stderr, flush=True)
    with _STATE.cond:
        while _STATE.count < want and (_STATE.owner is not None or _STATE.follower):
            _STATE.cond.wait(0.1)  # woken by each Ctrl-C; the timeout only lets the main thread's handler run


class _Interrupts:
    """The process's Ctrl-C state: the open contexts' budgets, the count, the one handler."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: the handler may run in the main thread while it holds it
        self.cond = threading.Condition(self.lock)
        self.budgets: list[Budget] = []  # one entry per open context, outermost first
        self.listeners: list[Callable[[int], None]] = []
        self.count = 0       # the Ctrl-Cs since the outermost context opened
        self.handled = 0     # ... as the Python-level handler saw them (coalesced ones count once)
        self.seen = 0        # ... as the watcher read them from the wakeup fd (one byte each)
        self.told = False    # an `on_interrupt` (or a worker's parent) acknowledged them
        self.owner: object | None = None  # the context that installed the handler
        self.previous: Any = None
        self.watcher: _Watcher | None = None
        self.follower = False

    def enter(self, budget: Budget) -> object:
        token = object()
        with self.lock:
            self.budgets.append(budget)
            count = self.count
            install = (self.owner is None and not self.follower
                       and threading.current_thread() is threading.main_thread())
            if install:
                self.owner = token
        if install:
            self.previous = signal.signal(signal.SIGINT, self.handler)
            self.watcher = _Watcher(self)
        elif count:  # the search of this process was stopped already: so is this one's
            self._tell([budget], count)
        return token

    def leave(self, budget: Budget, token: object) -> None:
        with self.lock:
            for k in range(len(self.budgets) - 1, -1, -1):
                if self.budgets[k] is budget:
                    del self.budgets[k]
                    break
            if token is not self.owner:
                return
        self.watcher.stop()  # after it has read every Ctrl-C that came before
        signal.signal(signal.SIGINT, self.previous)
        with self.lock:
            self.watcher = self.previous = self.owner = None
            self.count = self.handled = self.seen = 0  # the next outermost context counts afresh
            self.told = False
            self.cond.notify_all()

    def listen(self, callback: Callable[[int], None]) -> None:
        with self.lock:
            self.listeners.append(callback)
            count = self.count
        if count:
            callback(count)

    def unlisten(self, callback: Callable[[int], None]) -> None:
        with self.lock:
            if callback in self.listeners:
                self.listeners.remove(callback)

    def handler(self, signum, frame) -> None:
        """The Python-level SIGINT handler (the main thread, between bytecodes)."""
        with self.lock:
            self.handled += 1
            count = max(self.handled, self.seen)
        self.arrived(count)
        if self.count >= 2:
            raise KeyboardInterrupt

    def read(self) -> None:
        """The watcher read one SIGINT from the wakeup fd."""
        with self.lock:
            self.seen += 1
            count = max(self.handled, self.seen)
        self.arrived(count)

    def arrived(self, count: int) -> None:
        """The process's `count`-th Ctrl-C: listeners first (a pool ends its workers), then
        every open budget, each once."""
        with self.lock:
            if count <= self.count:
                return
            self.count = count
            budgets, listeners = list(self.budgets), list(self.listeners)
            self.cond.notify_all()
        for listener in listeners:
            listener(count)
        self._tell(budgets, count)

    def _tell(self, budgets: list[Budget], count: int) -> None:
        unique: list[Budget] = []
        for b in budgets:
            if all(b is not u for u in unique):
                unique.append(b)
        for b in unique:
            if b._interrupted(count):
                self.told = True


_STATE = _Interrupts()


class _Watcher:
    """A thread woken by the signal module's wakeup fd (written by the C-level handler the moment a
    signal arrives, whatever the main thread is doing), which acknowledges each Ctrl-C at once."""

    def __init__(self, state: _Interrupts):
        self.state = state
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
                    self.state.read()

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
