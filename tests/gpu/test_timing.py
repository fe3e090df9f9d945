"""Event timing without a GPU: a stand-in for CuPy's streams and events records the order in
which work and events are issued, and the timing functions must enqueue every repetition
before the one synchronization that reads them (a synchronization per repetition puts the
host's launch time into every interval)."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks.gpu_bench import cuda_event_times
from einsat.gpu.timing import event_times, graph_times


class FakeCupy:
    """The part of CuPy the timers use, logging every call."""

    def __init__(self):
        self.log: list[str] = []
        log = self.log

        class Graph:
            def launch(self, stream=None):
                log.append("launch")

        class Stream:
            ptr = 0  # the legacy stream

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                pass

            def synchronize(self):
                log.append("sync")

            def begin_capture(self):
                log.append("begin")

            def end_capture(self):
                log.append("end")
                return Graph()

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


def test_a_graph_timing_captures_the_calls_once_and_times_launches_of_the_graph():
    cp = FakeCupy()
    times = graph_times(cp, lambda: cp.log.append("fn"), reps=3, warmup=1, copies=4)
    assert times == [0.25] * 3  # each interval (1 ms here) over the calls in the graph
    assert cp.log == (["fn", "begin"] + ["fn"] * 4 + ["end", "launch"]
                      + ["record", "launch", "record"] * 3 + ["sync"])


def test_a_call_that_fails_under_capture_ends_the_capture_and_its_error_is_reported():
    cp = FakeCupy()
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("not capturable")

    with pytest.raises(RuntimeError, match="not capturable"):
        graph_times(cp, fn, reps=3, copies=4)
    assert cp.log == ["begin", "end"]


def _device(cp):
    from einsat.gpu.device import CupyDevice
    dev = object.__new__(CupyDevice)  # no CUDA device here: only the attributes time_ms reads
    dev.cp, dev.capture_failures = cp, []
    return dev


@pytest.mark.parametrize("capturable", [False, True])
def test_cudnn_candidates_are_timed_in_a_graph_on_a_stream_that_can_capture(capturable):
    """A compiled program's stream (not the legacy one) replays as a CUDA graph: its cuDNN
    algorithms are chosen on graph times; the interpreter loop's on one call after another."""
    from einsat.gpu.device import CHOICE_COPIES, CHOICE_REPS, CHOICE_WARMUP
    cp = FakeCupy()
    cp.cuda.get_current_stream().ptr = 0x7F00 if capturable else 0
    ms = _device(cp).time_ms(lambda: cp.log.append("fn"))
    if capturable:
        assert ms == 1.0 / CHOICE_COPIES and cp.log.count("begin") == 1
        assert cp.log.count("launch") == CHOICE_WARMUP + CHOICE_REPS
    else:
        assert ms == 1.0 and "begin" not in cp.log and cp.log.count("fn") == CHOICE_WARMUP + CHOICE_REPS


def test_a_candidate_that_cannot_be_captured_is_timed_call_by_call_and_the_failure_kept():
    from einsat.gpu.device import CHOICE_REPS, CHOICE_WARMUP
    cp = FakeCupy()
    stream = cp.cuda.get_current_stream()
    stream.ptr = 0x7F00
    capturing = []
    stream.begin_capture = lambda: capturing.append(True)

    def fn():
        if capturing and len(capturing) == 1 and "begun" not in cp.log:
            cp.log.append("begun")
            raise RuntimeError("operation not permitted when stream is capturing")
        cp.log.append("fn")

    dev = _device(cp)
    assert dev.time_ms(fn) == 1.0
    assert dev.capture_failures == ["RuntimeError: operation not permitted when stream is capturing"]
    assert cp.log.count("record") == 2 * CHOICE_REPS and cp.log[-1] == "sync"
    assert cp.log.count("fn") == 1 + CHOICE_WARMUP + CHOICE_REPS  # the set-up call, then the event timing
