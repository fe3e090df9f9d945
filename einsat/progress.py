"""Progress of a long optimization, shown on a terminal (or logged plainly when not one).

`optimize(..., progress=callback)` calls `callback(event)` with a `ProgressEvent` at each
saturation step and at each phase boundary. `ProgressDisplay` is the callback the CLI uses:
on a TTY it redraws one status line; otherwise (a log, a pipe, CI) it prints one plain line per
event, at most one per `interval` seconds for steps.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    """One step of an optimization. `phase`: load, saturate, profile, extract, verify, measure, done."""

    phase: str
    message: str = ""
    step: int | None = None
    nodes: int | None = None
    classes: int | None = None
    elapsed: float | None = None

    def __str__(self) -> str:
        parts = [f"{self.phase:<9}"]
        if self.step is not None:
            parts.append(f"step {self.step:>3}")
        if self.nodes is not None:
            parts.append(f"{self.nodes:>8,} e-nodes")
        if self.classes is not None:
            parts.append(f"{self.classes:>7,} e-classes")
        if self.elapsed is not None:
            parts.append(f"{self.elapsed:6.1f} s")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)


class ProgressDisplay:
    """A progress callback writing to `stream` (stderr by default)."""

    def __init__(self, stream=None, tty: bool | None = None, interval: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self._last = float("-inf")
        self._width = 0

    def __call__(self, event: ProgressEvent) -> None:
        text = str(event)
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            if event.step is None:  # a phase boundary stays on screen
                self.stream.write("\n")
                self._width = 0
        else:
            if event.step is not None:
                now = time.monotonic()
                if now - self._last < self.interval:
                    return
                self._last = now
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
