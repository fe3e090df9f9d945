"""CompiledProgram on the host device with emulated CUDA streams and capture
(`HostDevice(streams=True)`, tests.gpu.host_streams): the program captures a graph and replays
it, memory is never used across streams without a synchronization, and a capture that fails
falls back to planned mode, saying why."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.program import CompiledProgram
from tests.gpu.host_device import HostDevice, KernelLibrary
from tests.gpu.host_streams import StreamRace
from tests.gpu.test_program import attention, resnet_block

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


@pytest.fixture(scope="module")
def library():
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    for make in (resnet_block, attention):
        g = make()
        run(g, feeds(g, 0), backend=GpuBackend(dry))
    library.build(dry.recorded)
    return library


def feeds(graph, seed):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}


@pytest.mark.parametrize("make", [resnet_block, attention])
def test_a_captured_program_replays_on_its_own_stream(library, make):
    graph = make()
    prog = CompiledProgram(graph, device=HostDevice(library, streams=True))
    assert prog.mode == "graph" and prog.graph_fallback is None
    for seed in (1, 2):
        want = run(graph, feeds(graph, seed), backend=GpuBackend(HostDevice(library)))
        got = prog.run(feeds(graph, seed))
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_a_cached_constant_is_safe_on_another_stream(library):
    dev = HostDevice(library, streams=True)
    w = np.arange(6, dtype=np.float32)
    with dev.new_stream():
        c = dev.constant(w)
    with dev.new_stream():
        np.testing.assert_array_equal(dev.download(dev.constant(w)), w)
    assert dev.constant(w) is c


def test_the_race_checker_sees_an_unsynchronized_read(library):
    dev = HostDevice(library, streams=True)
    with dev.new_stream():
        buf = dev.empty((3,), np.float32)
        dev.fill(buf, 1.0)
    with dev.new_stream(), pytest.raises(StreamRace, match="download on <stream s2> reads memory written on"):
        dev.download(buf)


def test_a_capture_that_fails_falls_back_to_planned_mode(library):
    graph = resnet_block()
    dev = HostDevice(library, streams=True, fail_in_capture=frozenset({"conv"}))
    prog = CompiledProgram(graph, device=dev)
    assert prog.mode == "planned"
    assert "conv cannot be issued during stream capture" in prog.graph_fallback
    want = run(graph, feeds(graph, 3), backend=GpuBackend(HostDevice(library)))
    got = prog.run(feeds(graph, 3))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
