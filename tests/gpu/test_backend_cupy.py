"""On a GPU: every registry op on the CuPy backend matches NumPy (fp32, TF32 off), on the same
hypothesis cases the host emulation runs; whole programs replayed as CUDA graphs match too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.lower import HOST_OPS
from einsat.ir.registry import REGISTRY
from tests.gpu.cases import strategy
from tests.gpu.compare import assert_case
from tests.gpu.test_program import attention, resnet_block

pytestmark = pytest.mark.gpu
OPS = sorted(op.value for op in REGISTRY if op.value not in HOST_OPS)


@pytest.fixture(scope="module")
def backend():
    return GpuBackend(tf32=False)


@pytest.mark.parametrize("op", OPS)
def test_op_matches_numpy_on_the_gpu(backend, op):
    @given(strategy(op))
    def check(case):
        backend.host_fallbacks.clear()
        got = run(case.graph, case.inputs, backend=backend)
        assert backend.host_fallbacks == {}, f"{case}: ran on the host: {backend.host_fallbacks}"
        assert_case(case, got)

    check()


@pytest.mark.parametrize("make", [resnet_block, attention])
def test_cuda_graph_replay_matches_the_interpreter(backend, make):
    from einsat.gpu.program import CompiledProgram
    graph = make()
    prog = CompiledProgram(graph, device=backend.device)
    assert prog.mode == "graph", prog.graph_fallback
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {n: rng.standard_normal(graph.types[n].shape).astype(np.float32) for n in graph.inputs}
        eager = run(graph, feeds, backend=backend)
        got = prog.run(feeds)
        for name in eager:  # the same kernels and algorithms in the same order: bitwise equal
            np.testing.assert_array_equal(got[name], eager[name])


def test_libraries_report_versions(backend):
    dev = backend.device
    assert dev.cudnn.version() >= 90000
    assert dev.cublas.version() >= 120000


def test_tf32_is_off_by_default_and_selectable():
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    from einsat.ir.builder import GraphBuilder
    b = GraphBuilder("mm")
    x = b.input("x", a.shape)
    g = b.build(b.matmul(x, b.const(a, name="a")))
    strict = run(g, {"x": a}, backend=GpuBackend(tf32=False))["matmul1"]
    fast = run(g, {"x": a}, backend=GpuBackend(tf32=True))["matmul1"]
    want = a.astype(np.float64) @ a.astype(np.float64)
    err = lambda y: np.abs(y - want).max() / np.abs(want).max()  # noqa: E731
    assert err(strict) < 1e-5 < err(fast) < 1e-2  # TF32 keeps 10 mantissa bits: ~1e-3 relative
