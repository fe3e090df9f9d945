"""Event timing without a GPU: a stand-in for CuPy's streams and events records the order in
which work and events are issued, and the timing functions must enqueue every repetition
before the one synchronization that reads them (a synchronization per repetition puts the
host's launch time into every interval)."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks.gpu_bench import cuda_event_times
from einsat.gpu.timing import event_times


class FakeCupy:
    """The part of CuPy the timers use, logging every call."""

    def __init__(self):
        self.log: list[str] = []
        log = self.log

        class Stream:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                pass

            def synchronize(self):
                log.append("sync")

        class Event:
            def record(self, stream=None):
                log.append("record")

            def synchronize(self):
                log.append("sync")

        stream = Stream()
        self.cuda = types.SimpleNamespace(Event=Event, get_current_stream=lambda: stream,
                                          get_elapsed_time=lambda a, b: 1.0)


def issue_order(timer, **kw):
    cp = FakeCupy()
    times = timer(cp, lambda: cp.log.append("fn"), **kw)
    return cp.log, times


def test_every_repetition_is_enqueued_before_one_synchronization():
    log, times = issue_order(event_times, reps=5, warmup=2, before=None)
    assert times == [1.0] * 5
    assert log == ["fn", "fn"] + ["record", "fn", "record"] * 5 + ["sync"]


def test_the_benchmark_timer_synchronizes_once(monkeypatch):
    cp = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    times = cuda_event_times(lambda: cp.log.append("fn"), reps=4, warmup=1)
    assert len(times) == 4
    syncs = [i for i, x in enumerate(cp.log) if x == "sync"]
    last_record = max(i for i, x in enumerate(cp.log) if x == "record")
    assert syncs and min(syncs) > last_record, cp.log


@pytest.mark.parametrize("reps", [1, 3])
def test_before_runs_outside_each_interval(reps):
    cp = FakeCupy()
    event_times(cp, lambda: cp.log.append("fn"), reps=reps, before=lambda: cp.log.append("flush"))
    assert cp.log == ["flush", "record", "fn", "record"] * reps + ["sync"]
