"""Fused eOperators on the host emulation against NumPy: the row kernel (a block per row, warp and
block reductions with real threads, or a thread per short row) for softmax, masked softmax,
layernorm and RMSNorm chains, the element-wise kernel for GELU, SiLU and bias + activation +
residual chains; and every fused eop the benchmark workloads produce (bert_tensat, a BERT-base
and a GPT-2 layer at sequence 128)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.gpu.kernels.elementwise import Operand
from einsat.gpu.kernels.eop import eop_kernel
from einsat.ir import GraphBuilder
from einsat.ir.expr import parse
from einsat.ir.expr.compose import row_form
from tests.gpu.fused_cases import eop_graph, fused_eops, random_inputs, workload_eops
from tests.gpu.host_device import HostDevice, KernelLibrary
from tests.rewrites.derive.test_fusion_chains import FORMS, SHARED_FORMS, WHOLE, _prenorm

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

ROWS = {"scaled_masked_softmax", "layernorm_residual", "rmsnorm"}
SHAPES = [(3, 5), (5, 64), (2, 3, 70), (4, 300)]  # a warp per row (element, then 2-wide loads), then blocks


def _form_eops(form: str, shape, dtype) -> list[tuple[str, tuple]]:
    b = GraphBuilder(form)
    x = b.input("x", shape, np.float64)
    if form.startswith("shared_"):  # a pre-norm block: the norm's eop_multi also writes the residual sum
        g = b.build(_prenorm(b, x, shape, SHARED_FORMS[form[len("shared_"):]]))
        return [max(((e, t) for e, t in fused_eops(g) if ";" in e), key=lambda et: len(et[0]))]
    g = b.build(FORMS[form](b, x, shape))
    # the whole chain's eop: the one with the most terms
    eops = fused_eops(g)
    expr, types = max(eops, key=lambda et: len(et[0]))
    return [(expr, types)]


def _check(graphs_feeds, threads: bool):
    library = KernelLibrary(threads=threads)
    dry = HostDevice(library, dry=True)
    for g, feeds in graphs_feeds:
        run(g, feeds, backend=GpuBackend(dry, name="host-dry"))
    library.build(dry.recorded)
    for g, feeds in graphs_feeds:
        backend = GpuBackend(HostDevice(library), name="host")
        got = run(g, feeds, backend=backend)
        assert backend.host_fallbacks == {}
        want = run(g, feeds)
        for out in g.outputs:  # an eop_multi's every output
            tol = 2e-5 if got[out].dtype == np.float32 else 1e-10
            np.testing.assert_allclose(got[out], want[out], rtol=tol, atol=tol)
    return {(k.family, k.per_block) for k in dry.recorded}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_fused_forms_match_numpy(dtype, threads):
    cases = []
    for form in sorted(set(FORMS) - WHOLE) + [f"shared_{f}" for f in sorted(SHARED_FORMS)]:
        for shape in SHAPES:
            for expr, types in _form_eops(form, shape, dtype):
                g = eop_graph(expr, types, dtype)
                cases.append((g, random_inputs([t for t in g.input_types().values()], seed=len(cases))))
    kinds = _check(cases, threads)
    assert ("eop_rows", 1) in kinds and ("eop_rows", 0) in kinds and ("eop", 0) in kinds


def test_row_forms_get_the_row_kernel():
    for form in sorted(ROWS):
        (expr, types), = _form_eops(form, (4, 300), np.float32)
        assert row_form(parse(expr)) is not None, form
        k = eop_kernel(expr, tuple(Operand.contiguous(t.shape, np.float32) for t in types), np.float32)
        assert k.family == "eop_rows" and k.per_block == 1 and "einsat_block_" in k.source
        (expr, types), = _form_eops(form, (16, 64), np.float32)  # short rows: a warp each, coalesced
        k = eop_kernel(expr, tuple(Operand.contiguous(t.shape, np.float32) for t in types), np.float32)
        assert k.per_block == 0 and k.work == 16 * 32 and "einsat_warp_" in k.source and "lane" in k.source
    (expr, types), = _form_eops("gelu_erf", (4, 300), np.float32)
    assert row_form(parse(expr)) is None


@pytest.mark.slow  # make test stays within 6 minutes (its time moved to make test-slow)
def test_workload_fused_eops_match_numpy():
    eops = workload_eops()
    assert {name for name, _, _ in eops} == {"bert_tensat", "bert_base", "gpt2"}
    cases = []
    for _, expr, types in eops:
        g = eop_graph(expr, types)
        cases.append((g, random_inputs(types, seed=len(cases))))
    assert any(";" in expr for _, expr, _ in eops)  # GPT-2's norms write their residual sums (eop_multi)
    kinds = _check(cases, threads=False)
    assert ("eop_rows", 1) in kinds
