"""The GPU lowering of every registry op, run on the host emulation of the device.

The kernels einsat generates are compiled by the host C++ compiler (EINSAT_HOST mode), cuBLAS
and cuDNN are emulated from their definitions, and every op's result is compared with the
NumPy reference on cases drawn from `cases.strategy(op)`.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.lower import HOST_OPS
from einsat.ir.ops.control import BodyOp
from einsat.ir.registry import REGISTRY
from tests.gpu.cases import strategy
from tests.gpu.compare import assert_case
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice, KernelLibrary

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

OPS = sorted(op.value for op in REGISTRY if op.value not in HOST_OPS)
EXAMPLES = 6


@pytest.fixture(scope="module")
def host():
    """Every case of every op, and one kernel library compiled for all of them."""
    library = KernelLibrary()
    cases = {op: collect(strategy(op), EXAMPLES) for op in OPS}
    dry = HostDevice(library, dry=True)
    backend = GpuBackend(dry, name="host-dry")
    for op_cases in cases.values():
        for case in op_cases:
            run(case.graph, case.inputs, backend=backend)
    library.build(dry.recorded)
    return library, cases


@pytest.mark.parametrize("op", OPS)
def test_op_matches_numpy_on_host_emulation(host, op):
    library, cases = host
    assert cases[op], f"no cases drawn for {op}"
    for case in cases[op]:
        dev = HostDevice(library)
        backend = GpuBackend(dev, name="host")
        got = run(case.graph, case.inputs, backend=backend)
        assert backend.host_fallbacks == {}, f"{case}: ran on the host: {backend.host_fallbacks}"
        assert_case(case, got)


def test_every_op_but_opaque_has_a_device_lowering():
    """Loop and if are no exception: the interpreter loop runs their bodies, each body op lowered."""
    from einsat.gpu import lower
    missing = sorted(op.value for op, d in REGISTRY.items()
                     if op.value not in lower.IMPLS and op.value not in HOST_OPS and not isinstance(d, BodyOp))
    assert missing == [], f"ops with no GPU lowering (they would run on the host): {missing}"


def test_gemm_and_conv_go_through_the_libraries(host):
    library, cases = host
    dev = HostDevice(library)
    backend = GpuBackend(dev, name="host")
    for op in ("matmul", "conv", "conv_transpose"):
        for case in cases[op]:
            run(case.graph, case.inputs, backend=backend)
    assert dev.gemm_calls > 0 and dev.conv_calls > 0
    assert np.isfinite(dev.gemm_calls)


WIDE_OPS = ["add", "gelu", "pad", "concat", "gather", "correct", "softmax", "layernorm", "reduce_sum", "maxpool",
            "avgpool", "argmax", "g2bmm", "transpose"]


def clear_kernel_caches():
    from einsat.gpu.kernels import banded, elementwise, layout, reduce
    for mod in (banded, elementwise, layout, reduce):
        for fn in vars(mod).values():
            if hasattr(fn, "cache"):
                fn.cache.clear()


@pytest.fixture
def wide(monkeypatch):
    """Kernels generated with 64-bit index arithmetic (as for tensors past 2^30 elements)."""
    from einsat.gpu.kernels import codegen
    monkeypatch.setattr(codegen, "NARROW_LIMIT", 0)
    clear_kernel_caches()
    yield
    clear_kernel_caches()


def test_64bit_index_arithmetic_matches_numpy(wide):
    library = KernelLibrary()
    cases = [c for op in WIDE_OPS for c in collect(strategy(op), 2)]
    dry = HostDevice(library, dry=True)
    for case in cases:
        run(case.graph, case.inputs, backend=GpuBackend(dry))
    assert dry.recorded and all("long long" in k.source.split("extern")[1] or "idx_t" in k.source.split("extern")[1]
                                for k in dry.recorded)
    library.build(dry.recorded)
    for case in cases:
        assert_case(case, run(case.graph, case.inputs, backend=GpuBackend(HostDevice(library))))
