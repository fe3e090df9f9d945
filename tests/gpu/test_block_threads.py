"""Kernels with a block of real threads (`KernelLibrary(threads=True)`): each block runs as
`blockDim.x` host threads with real barriers, so the device's warp shuffles, block reductions,
shared-memory staging and `__syncthreads` run (the one-thread emulation replaces them with
identities). Every op whose kernels cooperate within a block is checked against NumPy on
cases that take the block-per-row path (rows longer than the serial limit), and a few
grid-stride ops on many threads."""

from __future__ import annotations

import shutil

import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from tests.gpu.cases import strategy
from tests.gpu.compare import assert_case
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice, KernelLibrary

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

BLOCK_OPS = ["reduce_sum", "reduce_mean", "reduce_max", "softmax", "layernorm", "g2bmm", "gbmm"]
GRID_OPS = ["add", "transpose", "concat", "maxpool"]


@pytest.fixture(scope="module")
def threaded():
    library = KernelLibrary(threads=True)
    cases = {op: collect(strategy(op), 8) for op in BLOCK_OPS + GRID_OPS}
    dry = HostDevice(library, dry=True)
    for op_cases in cases.values():
        for case in op_cases:
            run(case.graph, case.inputs, backend=GpuBackend(dry))
    library.build(dry.recorded)
    return library, cases, dry.recorded


def test_block_kernels_are_drawn(threaded):
    _, _, kernels = threaded
    families = {k.family for k in kernels if k.per_block}
    assert {"reduce_sum", "reduce_max", "softmax", "layernorm", "g2bmm", "gbmm"} <= families


@pytest.mark.parametrize("op", BLOCK_OPS + GRID_OPS)
def test_op_matches_numpy_with_real_threads(threaded, op):
    library, cases, _ = threaded
    for case in cases[op]:
        assert_case(case, run(case.graph, case.inputs, backend=GpuBackend(HostDevice(library))))
