"""The resident memory of one run: measured while it runs, and bounded.

    with MemoryWatch(limit_bytes=4 * 2**30, budget=run) as watch:
        ...                                  # the run; a thread samples the process's RSS
    watch.peak_bytes, watch.added_bytes      # the highest resident memory seen, and its growth
    watch.exceeded                           # the growth passed the limit: `run` was cancelled

The watch samples the process's resident set size (Linux `/proc/self/statm`; elsewhere
`resource`'s high-water mark, which cannot be reset, so the growth is then an upper bound)
every `interval` seconds from a daemon thread. When the memory added since the watch began
passes `limit_bytes`, it cancels `budget` with the reason `MEMORY_LIMIT`: the run stops the way
a Ctrl-C stops it (saturation after its current phase, the ILP at its next check) and keeps the
best program found so far. egglog cannot be interrupted inside a phase, so a run may pass the
limit by what one phase allocates; the e-graph's node limit bounds that.
"""

from __future__ import annotations

import os
import resource
import sys
import threading

from einsat.budget import Budget

MEMORY_LIMIT = "memory limit"  # the reason a watch gives when it cancels a budget
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """The process's resident memory now (its high-water mark where the current one is unknown)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


class MemoryWatch:
    """Samples resident memory while open; cancels `budget` when the growth passes `limit_bytes`
    (None: measure only)."""

    def __init__(self, limit_bytes: int | None = None, budget: Budget | None = None, interval: float = 0.02):
        if limit_bytes is not None and limit_bytes <= 0:
            raise ValueError(f"a memory limit must be positive, got {limit_bytes} bytes")
        self.limit_bytes = limit_bytes
        self.budget = budget
        self.interval = interval
        self.start_bytes = self.peak_bytes = resident_bytes()
        self.exceeded = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def added_bytes(self) -> int:
        """The most memory the run added to what the process held when the watch began."""
        return max(0, self.peak_bytes - self.start_bytes)

    def sample(self) -> None:
        self.peak_bytes = max(self.peak_bytes, resident_bytes())
        if self.limit_bytes is not None and not self.exceeded and self.added_bytes > self.limit_bytes:
            self.exceeded = True
            if self.budget is not None:
                self.budget.cancel(MEMORY_LIMIT)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemoryWatch:
        self.start_bytes = self.peak_bytes = resident_bytes()
        self._thread = threading.Thread(target=self._loop, name="einsat-memory-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def summary(self) -> dict:
        """The figures, for a report: bytes at the start, peak, added, the limit, exceeded."""
        return {"start_bytes": self.start_bytes, "peak_bytes": self.peak_bytes, "added_bytes": self.added_bytes,
                "limit_bytes": self.limit_bytes, "exceeded": self.exceeded}
