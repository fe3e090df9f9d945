"""Fused eOperator kernels in half storage and with vectorized row loads, on the host emulation.

- Storage: `eop_kernel(expr, inputs, dtype)` with dtype float16 (`__half`) or bfloat16
  (`__nv_bfloat16`) loads and stores the half type and computes in float, statistics included:
  each output is the float32 evaluation of the expression on the (exactly widened) half inputs,
  rounded once to the half type, within one half ulp (float sums in another order may round
  the other way). The reference is NumPy in float32 and ml_dtypes' bfloat16 / NumPy's float16
  rounding, never the kernel's own arithmetic.
- Row loads: an input read at its row is staged once per row with 16- or 8-byte loads where
  the row's address is aligned, element loads otherwise (a view one element in), both right.
"""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.kernels.elementwise import Operand
from einsat.gpu.kernels.eop import eop_kernel
from einsat.ir import GraphBuilder
from einsat.ir.expr import evaluate
from einsat.ir.ops.eop import expressions_of
from tests.gpu.fused_cases import eop_graph
from tests.gpu.host_device import HostDevice, KernelLibrary
from tests.gpu.test_eop_rows import _form_eops
from tests.rewrites.derive.test_fusion_chains import FORMS, SHARED_FORMS, WHOLE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

HALVES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
FORM_NAMES = sorted(set(FORMS) - WHOLE) + [f"shared_{f}" for f in sorted(SHARED_FORMS)]


def _host_run(graphs_feeds, threads: bool = False):
    library = KernelLibrary(threads=threads)
    dry = HostDevice(library, dry=True)
    for g, feeds in graphs_feeds:
        run(g, feeds, backend=GpuBackend(dry, name="host-dry"))
    library.build(dry.recorded)
    outs = []
    for g, feeds in graphs_feeds:
        backend = GpuBackend(HostDevice(library), name="host")
        outs.append(run(g, feeds, backend=backend))
        assert backend.host_fallbacks == {}
    return outs, dry.recorded


@pytest.mark.parametrize("half", sorted(HALVES))
def test_fused_forms_in_half_storage_are_float_arithmetic_rounded_once(half):
    dtype = HALVES[half]
    cases = []
    rng = np.random.default_rng(7)
    for form in FORM_NAMES:
        for shape in [(3, 5), (5, 64), (4, 300)]:
            (text, types), = _form_eops(form, shape, np.float32)
            g = eop_graph(text, types, dtype)
            feeds = {f"x{k}": rng.standard_normal(t.shape).astype(dtype) for k, t in enumerate(types)}
            cases.append((text, g, feeds))
    outs, kernels = _host_run([(g, f) for _, g, f in cases])
    assert {k.family for k in kernels} >= {"eop", "eop_rows"}
    assert all(p.dtype == dtype for k in kernels for p in k.params)  # half in, half out
    eps = float(ml_dtypes.finfo(dtype).eps)
    for (text, g, feeds), got in zip(cases, outs):
        wide = [feeds[f"x{k}"].astype(np.float32) for k in range(len(feeds))]
        for e, out in zip(expressions_of(text), g.outputs):
            want = evaluate(e, wide, np.float32).astype(dtype).astype(np.float32)
            assert got[out].dtype == dtype
            np.testing.assert_allclose(got[out].astype(np.float32), want, rtol=eps, atol=eps * 1e-3,
                                       err_msg=f"{half}: {text[:80]}")


def test_a_row_read_at_its_row_is_staged_once_with_vector_loads():
    (text, types), = _form_eops("layernorm_residual", (4, 768), np.float32)
    k = eop_kernel(text, tuple(Operand.contiguous(t.shape, np.float32) for t in types), np.float32)
    assert k.per_block == 1 and "__shared__ float rb" in k.source and "alignas(16)" in k.source
    assert k.source.count("in2[") + k.source.count("in3[") == 0  # x and the residual: read via the row copy only
    (text, types), = _form_eops("scaled_masked_softmax", (16, 64), np.float32)
    k = eop_kernel(text, tuple(Operand.contiguous(t.shape, np.float32) for t in types), np.float32)
    assert k.per_block == 0 and "EINSAT_PER" in k.source and "alignas(8)" in k.source  # a warp: registers
    k = eop_kernel(text, tuple(Operand.contiguous(t.shape, np.float16) for t in types), np.float16)
    assert "alignas" not in k.source and "EINSAT_PER" in k.source  # halves: element loads, still staged


@pytest.mark.parametrize("threads", [False, True])
def test_a_misaligned_row_view_falls_back_to_element_loads(threads):
    """x[:, 1:] of a [4, 301] input: its rows start one float past 16 bytes (the vector branch
    is not taken) and the result still matches NumPy."""
    rng = np.random.default_rng(8)
    b = GraphBuilder("view")
    x = b.input("x", (4, 301), np.float32)
    g = b.build(b.softmax(b.mul(b.slice(x, starts=(1,), ends=(301,), axes=(1,)), b.const(0.5)), axis=1))
    from tests.gpu.fused_cases import fused_eops
    (text, types), = [max(fused_eops(g), key=lambda et: len(et[0]))]
    gb = GraphBuilder("view_eop")
    xi = gb.input("x", (4, 301), np.float32)
    ins = [gb.slice(xi, starts=(1,), ends=(301,), axes=(1,))]
    assert len(types) == 1
    g2 = gb.build(gb.eop(*ins, expr=text))
    feeds = {"x": rng.standard_normal((4, 301)).astype(np.float32)}
    (got,), kernels = _host_run([(g2, feeds)], threads=threads)
    assert any("rb0" in k.source and "alignas(16)" in k.source for k in kernels if k.family == "eop_rows")
    want = run(g, feeds)[g.outputs[0]]
    np.testing.assert_allclose(got[g2.outputs[0]], want, rtol=2e-6, atol=2e-6)
