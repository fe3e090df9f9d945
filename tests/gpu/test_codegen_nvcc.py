"""Every kind of kernel einsat generates compiles with nvcc for sm_90 (H100/H200), without CuPy.

The kernels are those the lowering emits for the op cases (recorded by a dry run of the host
device), plus fp16 variants of every family (the host emulation has no fp16). ptxas must
report no register spills: a spill in a generated kernel is a code-generation regression.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.kernels.banded import g2bmm_kernel, gbmm_kernel
from einsat.gpu.kernels.elementwise import Operand, Step, elementwise_kernel
from einsat.gpu.kernels.layout import concat_kernel, correct_kernel, gather_kernel, pad_kernel
from einsat.gpu.kernels.reduce import (
    argmax_kernel,
    layernorm_kernel,
    pool_kernel,
    reduce_kernel,
    softmax_kernel,
)
from einsat.gpu.lower import HOST_OPS
from einsat.ir.registry import REGISTRY
from tests.gpu.cases import strategy
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice, KernelLibrary

NVCC = shutil.which("nvcc")


def fp16_kernels():
    h = np.float16
    x = Operand.contiguous((2, 3, 40), h)
    row = Operand.contiguous((4, 300), h)
    return [
        elementwise_kernel((2, 3, 40), [x, Operand(np.dtype(h), (3, 1), (1, 0))],
                           [Step("add", (0, 1), h), Step("gelu", (2,), h), Step("sigmoid", (3,), h)]),
        pad_kernel(x, (0, 1, 2, 0, 1, 2), "reflect"), concat_kernel([x, x], 2),
        gather_kernel(x, Operand.contiguous((5,), np.int64), 2),
        correct_kernel(x, Operand.contiguous((1, 1, 4), h), (0, 0, 0), (1, 1, 4)),
        reduce_kernel(row, (1,), "sum"), reduce_kernel(row, (1,), "max"), reduce_kernel(x, (2,), "mean"),
        softmax_kernel(row, 1), softmax_kernel(x, 1), argmax_kernel(row, 1),
        layernorm_kernel(row, Operand.contiguous((300,), h), Operand.contiguous((300,), h), 1, 1e-5),
        pool_kernel(Operand.contiguous((1, 2, 6, 6), h), (1, 2, 3, 3), "avg", (2, 2), (2, 2), (0, 0, 1, 1), (1, 1)),
        g2bmm_kernel(Operand.contiguous((2, 8, 64), h), Operand.contiguous((2, 8, 64), h), 2, 1),
        gbmm_kernel(Operand.contiguous((2, 8, 5), h), Operand.contiguous((2, 8, 64), h), 1),
    ]


def fused_kernels():
    """The fused eOperators of the benchmark workloads (`tests.gpu.fused_cases`), in their dtype
    and in fp16."""
    from einsat.gpu.kernels.eop import eop_kernel
    from tests.gpu.fused_cases import workload_eops
    out = []
    for _, expr, types in workload_eops():
        for dtype in (types[0].dtype, np.dtype(np.float16)):
            out.append(eop_kernel(expr, tuple(Operand.contiguous(t.shape, dtype) for t in types), dtype))
    return out


def recorded_kernels():
    library = KernelLibrary()
    dry = HostDevice(library, dry=True)
    backend = GpuBackend(dry, name="host-dry")
    for op in sorted(op.value for op in REGISTRY if op.value not in HOST_OPS):
        for case in collect(strategy(op), 2):
            run(case.graph, case.inputs, backend=backend)
    return dry.recorded


def generated_kernels(monkeypatch) -> dict:
    """Every kernel the op cases and the fp16 variants make, with 32-bit and with 64-bit index
    arithmetic, by name."""
    from einsat.gpu.kernels import codegen
    from tests.gpu.test_lower_host import clear_kernel_caches
    narrow = recorded_kernels() + fp16_kernels() + fused_kernels()
    with monkeypatch.context() as m:
        m.setattr(codegen, "NARROW_LIMIT", 0)  # and every kernel again with 64-bit indices
        clear_kernel_caches()
        wide = recorded_kernels() + fp16_kernels() + fused_kernels()
    clear_kernel_caches()
    kernels = {k.name: k for k in narrow + wide}
    assert len(kernels) > len({k.name for k in narrow})
    families = {k.family for k in kernels.values()}
    assert {"ew", "pad", "concat", "gather", "correct", "reduce_sum", "reduce_mean", "reduce_max", "softmax",
            "layernorm", "maxpool", "avgpool", "argmax", "g2bmm", "gbmm", "matmul", "eop", "eop_rows"} <= families
    return kernels


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_generated_kernels_compile_for_sm90(tmp_path, monkeypatch):
    kernels = generated_kernels(monkeypatch)
    src = tmp_path / "kernels.cu"
    src.write_text("\n".join(k.source for k in kernels.values()))
    out = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", "-diag-suppress", "177",
                          "-o", str(tmp_path / "kernels.cubin"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    compiled = set(re.findall(r"Compiling entry function '(\w+)'", out.stderr))
    assert compiled == set(kernels), f"not compiled: {sorted(set(kernels) - compiled)[:5]}"
    spills = [line for line in out.stderr.splitlines() if re.search(r"[1-9]\d* bytes spill", line)]
    assert not spills, spills[:5]
