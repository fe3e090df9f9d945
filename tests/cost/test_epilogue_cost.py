"""What a fused op costs: the vendor call plus the element-wise kernel einsat's GPU runtime runs
after it (`gpu/lower/fused.py`), stated from the lowering's launches (run on the host emulation's
dry device: kernels recorded, nothing compiled) and the H100 datasheet, not from the cost code."""

from __future__ import annotations

import numpy as np
import pytest

from einsat.cost.devices import H100
from einsat.cost.model import RooflineCost
from einsat.cost.models import cost_model
from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.interpreter import run
from einsat.ir import GraphBuilder, Op, TensorType
from tests.gpu.host_device import HostDevice, KernelLibrary

M, K, N = 128, 256, 512
F32 = np.float32


def fused_matmul_graph(bias: bool, residual: bool, activation: str):
    g = GraphBuilder(seed=0)
    ins = [g.input("a", (M, K)), g.weight("b", (K, N))]
    ins.append(g.weight("bias", (N,)) if bias else None)
    if residual:
        ins.append(g.input("r", (M, N)))
    return g.build(g.op(Op.FUSED_MATMUL, *ins, activation=activation))


def launches(graph):
    """(vendor calls, element-wise kernels) the GPU lowering issues for `graph`, and the
    kernels' input counts."""
    dev = HostDevice(KernelLibrary(), dry=True)
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(t.shape).astype(t.dtype) for name, t in graph.input_types().items()}
    run(graph, inputs, backend=GpuBackend(dev, name="host-dry"))
    return dev.gemm_calls, [sum(p.role == "in" for p in k.params) for k in dev.recorded]


def test_the_lowering_runs_a_gemm_then_one_epilogue_kernel_reading_each_addend():
    assert launches(fused_matmul_graph(False, False, "none")) == (1, [])
    assert launches(fused_matmul_graph(True, True, "relu")) == (1, [3])  # y, bias, residual
    assert launches(fused_matmul_graph(True, False, "none")) == (1, [2])


def _types(bias, residual):
    a, b, out = TensorType((M, K), F32), TensorType((K, N), F32), TensorType((M, N), F32)
    return [a, b, TensorType((N,), F32) if bias else None] + ([out] if residual else []), [out]


def test_a_fused_matmul_costs_the_matmul_plus_its_epilogue_kernel_on_the_roofline():
    model = RooflineCost("h100")
    ins, outs = _types(True, True)
    matmul = model.node_cost(Op.MATMUL, {}, ins[:2], outs)
    fused = model.node_cost(Op.FUSED_MATMUL, {"activation": "relu"}, ins, outs)
    # the epilogue kernel reads y, the bias and the residual and writes the output: memory-bound
    moved = 4 * (M * N + N + M * N + M * N)
    epilogue = H100.launch_us + moved / H100.bandwidth * 1e6
    assert fused == pytest.approx(matmul + epilogue, rel=1e-9)
    assert epilogue > H100.launch_us  # not free: a launch and a round trip of the product
    # no addend, no activation: the GEMM alone
    assert model.node_cost(Op.FUSED_MATMUL, {"activation": "none"}, ins[:2], outs) == matmul


@pytest.mark.parametrize("name", ["h100", "h100-roofline"])
def test_a_bias_in_the_epilogue_costs_what_the_matmul_and_the_add_cost_apart(name):
    """The runtime runs fused_matmul(a, b, bias) as the GEMM and an add kernel: the two programs
    issue the same kernels and move the same bytes, so neither is cheaper."""
    model = cost_model(name)
    ins, outs = _types(True, False)
    fused = model.node_cost(Op.FUSED_MATMUL, {"activation": "none"}, ins, outs)
    apart = model.node_cost(Op.MATMUL, {}, ins[:2], outs) + model.node_cost(Op.ADD, {}, [outs[0], ins[2]], outs)
    assert fused == pytest.approx(apart, rel=1e-9)
