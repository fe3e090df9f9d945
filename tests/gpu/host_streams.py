"""CUDA streams and stream capture, emulated on the host for `HostDevice(streams=True)`.

Work is issued on the current stream (`with stream:` makes one current; the legacy stream
otherwise). Here every piece of work runs at once, in issue order, but the emulation keeps
CUDA's rule for memory: what one stream wrote may be read or written by another stream only
after the writer was synchronized (`Stream.synchronize`, or a download, which waits for its
stream). Work that breaks the rule raises `StreamRace`, so a missing synchronization shows
on the host, where nothing runs concurrently. (The program's streams are non-blocking: they
never wait for the legacy stream, nor it for them.)

While a stream captures, its work is recorded instead of run; `end_capture` returns a
`HostGraph` whose `launch` issues the recorded work again. Work of a kind listed in
`fail_in_capture` fails during capture (as a library call that cannot be captured would) and
invalidates the capture: `end_capture` then raises, as CUDA does.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


class StreamRace(AssertionError):
    """Memory written on one stream was used on another with no synchronization between."""


class CaptureError(RuntimeError):
    """Stream capture failed (the emulated cudaErrorStreamCapture*)."""


class HostStream:
    def __init__(self, streams: Streams, name: str):
        self.streams, self.name = streams, name

    def __repr__(self):
        return f"<stream {self.name}>"

    def __enter__(self):
        self.streams.stack.append(self)
        return self

    def __exit__(self, *exc):
        self.streams.stack.pop()

    def synchronize(self) -> None:
        self.streams.complete(self)

    def begin_capture(self) -> None:
        if self.streams.capturing is not None:
            raise CaptureError("a stream is already capturing")
        self.streams.capturing, self.streams.recorded, self.streams.invalid = self, [], None

    def end_capture(self) -> HostGraph:
        s = self.streams
        if s.capturing is not self:
            raise CaptureError(f"{self} is not capturing")
        work, invalid = s.recorded, s.invalid
        s.capturing, s.recorded, s.invalid = None, [], None
        if invalid is not None:
            raise CaptureError(f"cudaErrorStreamCaptureInvalidated: the capture was invalidated by {invalid}")
        return HostGraph(s, work)


class HostGraph:
    """Recorded work, issued again on each launch."""

    def __init__(self, streams: Streams, work: list):
        self.streams, self.work = streams, work

    def launch(self, stream: HostStream) -> None:
        with stream:
            for item in self.work:
                self.streams.issue(*item)


class Streams:
    """The streams of one emulated device, and the writes no synchronization has completed yet."""

    def __init__(self, fail_in_capture: frozenset[str] = frozenset()):
        self.legacy = HostStream(self, "legacy")
        self.stack: list[HostStream] = []
        self.pending: list[tuple[np.ndarray, HostStream]] = []
        self.capturing: HostStream | None = None
        self.recorded: list = []
        self.invalid: str | None = None
        self.fail_in_capture = fail_in_capture
        self.count = 0

    @property
    def current(self) -> HostStream:
        return self.stack[-1] if self.stack else self.legacy

    def new(self) -> HostStream:
        self.count += 1
        return HostStream(self, f"s{self.count}")

    def complete(self, stream: HostStream) -> None:
        self.pending = [(a, s) for a, s in self.pending if s is not stream]

    def _check(self, kind: str, arrays: list, verb: str) -> None:
        for a in arrays:
            for b, s in self.pending:
                if s is not self.current and np.may_share_memory(a, b):
                    raise StreamRace(f"{kind} on {self.current} {verb} memory written on {s} "
                                     f"with no synchronization since")

    def issue(self, kind: str, fn: Callable[[], None], reads: list, writes: list) -> None:
        """Run (or, while the current stream captures, record) one piece of work."""
        if self.capturing is not None and self.capturing is self.current:
            if kind in self.fail_in_capture:
                self.invalid = self.invalid or kind
                raise CaptureError(f"{kind} cannot be issued during stream capture (emulated)")
            self.recorded.append((kind, fn, reads, writes))
            return
        self._check(kind, reads, "reads")
        self._check(kind, writes, "writes")
        fn()
        self.pending += [(w, self.current) for w in writes]
