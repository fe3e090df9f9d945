"""Device times of work issued from the host, with CUDA events.

`event_times` enqueues every repetition's event pair back to back on one stream and reads the
intervals after a single synchronization at the end. Synchronizing after each repetition (as
einsat once did) lets the GPU idle while the host issues the next one, so every interval
starts with the host's launch time: small ops then measure Python, not the device. Without it
the intervals are device time as long as the queue stays ahead of the GPU, which `before`
(e.g. the profiler's L2 flush, a long memset) helps ensure. Nothing here needs a device to
import; `cp` is the CuPy module.

These are a device's series, one program's repetitions; what runs them over signatures (the time
budget, failures, the profile database) and summarizes them (median, spread) is the timing loop
every target shares, `einsat.runtime.profiler` (see `einsat.gpu.profiler`).
"""

from __future__ import annotations

from typing import Callable


def event_times(cp, fn: Callable[[], object], reps: int, warmup: int = 0, stream=None,
                before: Callable[[], object] | None = None) -> list[float]:
    """Milliseconds between CUDA events recorded on `stream` (default: the current one) around
    each of `reps` calls of `fn`, after `warmup` untimed calls; `before` runs ahead of each
    repetition, outside its interval."""
    stream = stream or cp.cuda.get_current_stream()
    pairs = []
    with stream:
        for _ in range(warmup):
            fn()
        for _ in range(reps):
            if before is not None:
                before()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        stream.synchronize()
    return [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]


def graph_times(cp, fn: Callable[[], object], reps: int, warmup: int = 0, stream=None,
                copies: int = 5) -> list[float]:
    """Milliseconds per call of `fn` as a whole program's CUDA graph runs it: `copies` calls
    captured back to back into one graph on `stream` (default: the current one; it must be able
    to capture, so not the legacy stream), the graph launched `reps` times after `warmup`
    untimed launches (`event_times`), each interval divided by `copies`. Inside a graph no call
    waits for the host to launch it, so an operation of several kernels (a Winograd
    convolution's transforms and products) is timed as a program will run it, not behind its
    host launch latency. `fn` runs once before the capture (lazy set-up stays out of the
    graph). Raises what the capture raises, after ending it."""
    stream = stream or cp.cuda.get_current_stream()
    with stream:
        fn()
        stream.begin_capture()
        try:
            for _ in range(copies):
                fn()
        except BaseException:
            try:
                stream.end_capture()
            except Exception:  # an invalidated capture fails to end too: the call's own error is reported
                pass
            raise
        graph = stream.end_capture()
    return [t / copies for t in event_times(cp, lambda: graph.launch(stream), reps, warmup, stream)]
