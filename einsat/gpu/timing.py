"""Device times of work issued from the host, with CUDA events.

`event_times` enqueues every repetition's event pair back to back on one stream and reads the
intervals after a single synchronization at the end. Synchronizing after each repetition (as
einsat once did) lets the GPU idle while the host issues the next one, so every interval
starts with the host's launch time: small ops then measure Python, not the device. Without it
the intervals are device time as long as the queue stays ahead of the GPU, which `before`
(e.g. the profiler's L2 flush, a long memset) helps ensure. Nothing here needs a device to
import; `cp` is the CuPy module.
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
