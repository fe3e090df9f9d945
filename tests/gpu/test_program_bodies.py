"""CompiledProgram over loop and if nodes: the interpreter loop runs their bodies on the device
(traced with the loop's step), and a program that reads a trip count back runs eagerly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.program import CompiledProgram
from einsat.ir.builder import GraphBuilder
from einsat.runtime import run
from tests.gpu.host_device import HostDevice, KernelLibrary

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


def scaled_loop():
    body = GraphBuilder("body")
    _, acc, w = body.input("i", (), np.int64), body.input("acc", (4,)), body.input("w", (4,))
    g_body = body.build(body.add(body.mul(acc, w), w))
    b = GraphBuilder("outer")
    n, x, w = b.input("n", (), np.int64), b.input("x", (4,)), b.input("w", (4,))
    return b.build(b.relu(b.loop(n, x, w, body=g_body, n_carried=1)))


def test_a_loop_program_runs_eagerly_and_matches_numpy():
    graph = scaled_loop()
    rng = np.random.default_rng(0)
    feeds = {"n": np.array(3, np.int64), "x": rng.standard_normal(4).astype(np.float32),
             "w": rng.standard_normal(4).astype(np.float32)}
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    run(graph, feeds, backend=GpuBackend(dry))
    library.build(dry.recorded)
    prog = CompiledProgram(graph, device=HostDevice(library))
    assert prog.mode == "eager" and prog._trace.host_sync
    for n in (3, 0, 2):  # another trip count takes another path: nothing was planned for it
        feeds["n"] = np.array(n, np.int64)
        np.testing.assert_allclose(prog.run(feeds)[graph.outputs[0]], run(graph, feeds)[graph.outputs[0]],
                                   rtol=1e-6)
