"""CompiledProgram: the static memory plan, checked on the host emulation and as pure planning."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.program import Allocation, CompiledProgram, plan_offsets
from einsat.ir.builder import GraphBuilder
from tests.gpu.host_device import HostDevice, library_for


@st.composite
def allocation_lists(draw):
    n = draw(st.integers(1, 30))
    out = []
    for _ in range(n):
        first = draw(st.integers(0, 20))
        out.append(Allocation(draw(st.integers(0, 5000)), first, first + draw(st.integers(0, 8))))
    return out


@given(allocation_lists())
def test_planned_buffers_never_overlap_while_both_are_live(allocs):
    total = plan_offsets(allocs)
    for i, a in enumerate(allocs):
        assert a.offset % 256 == 0 and a.offset + a.nbytes <= total
        for b in allocs[i + 1:]:
            live_together = not (a.last < b.first or b.last < a.first)
            disjoint = a.offset + max(a.nbytes, 1) <= b.offset or b.offset + max(b.nbytes, 1) <= a.offset
            assert disjoint or not live_together, (a, b)


def test_a_chain_reuses_memory():
    # a chain of 10 equal buffers, each dead once the next is made: two slots suffice
    allocs = [Allocation(1024, k, k + 1) for k in range(10)]
    assert plan_offsets(allocs) == 2 * 1024


def resnet_block(n=1, c=8, hw=10):
    b = GraphBuilder("block")
    x = b.input("x", (n, c, hw, hw))
    y = b.relu(b.batchnorm(b.conv(x, b.weight("k1", (c, c, 3, 3)), padding=1), b.weight("s1", (c,)),
                           b.weight("b1", (c,)), b.weight("m1", (c,)), b.const(np.full(c, 1.5, np.float32), name="v1")))
    y = b.conv(y, b.weight("k2", (c, c, 3, 3)), b.weight("bias2", (c,)), padding=1)
    y = b.relu(b.add(y, x))
    y = b.reshape(b.global_avgpool(y), shape=(n, c))
    return b.build(b.gemm(y, b.weight("fc", (c, 5)), b.weight("fcb", (5,))))


def attention(s=6, d=8, heads=2):
    b = GraphBuilder("attention")
    x = b.input("x", (1, s, d))
    q, k, v = (b.matmul(x, b.weight(f"w{n}", (d, d))) for n in "qkv")
    split = lambda t: b.transpose(b.reshape(t, shape=(1, s, heads, d // heads)), perm=(0, 2, 1, 3))  # noqa: E731
    att = b.softmax(b.div(b.matmul(split(q), b.transpose(split(k), perm=(0, 1, 3, 2))), b.const(np.float32(2.0))))
    o = b.reshape(b.transpose(b.matmul(att, split(v)), perm=(0, 2, 1, 3)), shape=(1, s, d))
    return b.build(b.layernorm(b.add(o, x), b.weight("g", (d,)), b.weight("beta", (d,))))


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("make", [resnet_block, attention])
def test_compiled_program_on_the_host_matches_numpy(make):
    graph = make()
    rng = np.random.default_rng(1)
    inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
    library = library_for([(graph, inputs)])
    prog = CompiledProgram(graph, device=HostDevice(library))
    assert prog.mode == "planned"
    for trial in range(2):  # replays reuse the same buffers
        inputs = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
        eager = run(graph, inputs, backend=GpuBackend(HostDevice(library)))  # fresh buffers everywhere
        got = prog.run(inputs)
        for name in eager:  # the same kernels in the same order: the plan may change nothing
            np.testing.assert_array_equal(got[name], eager[name])
    # the plan shares memory: the arena is smaller than all allocations together
    total = sum(a.nbytes for a in prog._trace.allocs)
    assert prog.arena_bytes < total
