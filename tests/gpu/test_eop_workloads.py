"""Every fused eOperator the benchmark workloads produce (bert_tensat, BERT-base, GPT-2 at
sequence 128: `tests.gpu.fused_cases.workload_eops`, eop_multi included) compiles through CuPy's
NVRTC path for sm_90 in each storage type (fp32, fp16, bf16), without spills and within a block's
registers and static shared memory, and runs on the host emulation against NumPy in half storage
(fp32 and fp64: `test_eop_rows.test_workload_fused_eops_match_numpy`)."""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from einsat.gpu.device import nvrtc_options
from einsat.gpu.kernels.elementwise import Operand
from einsat.gpu.kernels.eop import eop_kernel
from einsat.ir.expr import evaluate
from einsat.ir.ops.eop import expressions_of
from tests.gpu.fused_cases import eop_graph, workload_eops
from tests.gpu.test_eop_storage import _host_run
from tests.gpu.test_nvrtc import REGISTERS_PER_BLOCK, STATIC_SHARED

STORAGE = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _kernels():
    out = []
    for name, expr, types in workload_eops():
        for dtype in STORAGE:
            out.append((name, eop_kernel(expr, tuple(Operand.contiguous(t.shape, dtype) for t in types), dtype)))
    return out


def test_the_workloads_fuse_every_kind_of_chain():
    kinds = {(name, ";" in expr) for name, expr, _ in workload_eops()}
    assert {("bert_tensat", False), ("bert_base", False), ("gpt2", False), ("gpt2", True)} <= kinds


def test_every_workload_fused_kernel_compiles_through_cupy_for_sm90(cupy_module):
    from tests.gpu.cupy_jit import compile_like_rawkernel
    kernels = _kernels()
    assert {k.family for _, k in kernels} == {"eop", "eop_rows"}
    for name, k in kernels:
        c = compile_like_rawkernel(cupy_module, k.source, k.name, nvrtc_options(k))
        assert c.cubin[:4] == b"\x7fELF", (name, k.name)
        assert c.spill_bytes == 0, f"{name}: {k.name} spills {c.spill_bytes} bytes:\n{c.log}"
        assert 0 < c.registers and c.registers * k.block <= REGISTERS_PER_BLOCK, (name, k.name, c.registers)
        assert c.shared_bytes <= STATIC_SHARED, (name, k.name, c.shared_bytes)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_every_workload_fused_eop_in_bf16_storage_matches_numpy_rounded_once():
    dtype = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(11)
    cases = []
    for _, expr, types in workload_eops():
        feeds = {f"x{k}": rng.standard_normal(t.shape).astype(dtype) for k, t in enumerate(types)}
        cases.append((expr, eop_graph(expr, types, dtype), feeds))
    outs, _ = _host_run([(g, f) for _, g, f in cases])
    eps = float(ml_dtypes.finfo(dtype).eps)
    for (expr, g, feeds), got in zip(cases, outs):
        wide = [feeds[f"x{k}"].astype(np.float32) for k in range(len(feeds))]
        for e, out in zip(expressions_of(expr), g.outputs):
            want = evaluate(e, wide, np.float32).astype(dtype).astype(np.float32)
            np.testing.assert_allclose(got[out].astype(np.float32), want, rtol=eps, atol=eps * 1e-3)
