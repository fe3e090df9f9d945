"""Progress of a long optimization, shown on a terminal (or logged plainly when not one).

`optimize(..., progress=callback)` calls `callback(event)` with a `ProgressEvent` at each
saturation step and at each phase boundary. `ProgressDisplay` is the callback the CLI uses:
on a TTY it redraws one live status line (the latest event and the run's elapsed time, redrawn
every `heartbeat` seconds by a thread, so that a long step, a piece in a worker or an egglog
phase, never leaves the screen still); otherwise (a log, a pipe, CI) it prints one plain line per
event, at most one per `interval` seconds for steps, and nothing between events.
`note(text)` prints a message of its own (the CLI's Ctrl-C acknowledgement) without tearing the line.
"""

from __future__ import annotations

import sys
import threading
import time

from einsat.pipeline.events import ProgressEvent

__all__ = ["ProgressDisplay", "ProgressEvent"]


class ProgressDisplay:
    """A progress callback writing to `stream` (stderr by default)."""

    def __init__(self, stream=None, tty: bool | None = None, interval: float = 0.5, heartbeat: float | None = 1.0):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = interval
        self.heartbeat = heartbeat if self.tty else None  # piped: quiet between events
        self.phase: str | None = None  # the latest event's phase
        self.start = time.monotonic()
        self._last = float("-inf")
        self._width = 0
        self._line: str | None = None  # the live line's text (TTY), redrawn by the heartbeat
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            self.phase = event.phase
            text = str(event)
            if self.tty:
                self._line = text
                self._draw()
                if event.step is None:  # a phase boundary stays on screen; the live line goes on below it
                    self._newline()
                    if event.phase == "done":
                        self._line = None
                self._beat()
            else:
                if event.step is not None:
                    now = time.monotonic()
                    if now - self._last < self.interval:
                        return
                    self._last = now
                self.stream.write(text + "\n")
            self.stream.flush()

    def _draw(self) -> None:
        """The live line: its text and the run's elapsed time, over what was there."""
        if self._line is None:
            return
        text = f"{self._line}  [{time.monotonic() - self.start:.0f} s]"
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self._width = len(text)

    def _newline(self) -> None:
        if self._width:
            self.stream.write("\n")
            self._width = 0

    def _beat(self) -> None:
        if self.heartbeat and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="einsat-progress", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.heartbeat):
            with self._lock:
                if self._line is not None:
                    self._draw()
                    self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (on a TTY: below the live line, which is redrawn under it)."""
        with self._lock:
            if self.tty:
                self._newline()
            self.stream.write(text + "\n")
            if self.tty:
                self._draw()
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._line = None
            if self.tty and self._width:
                self._newline()
                self.stream.flush()
