"""Where the time goes: the modeled breakdown (benchmarks/breakdown_bench.py) and the GPU session's
breakdown phase, run on the host emulation (a clock in place of CUDA events, no torch.profiler)."""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import pytest

from benchmarks import breakdown_bench as bd
from einsat.cost.profiled import MeasuredCost
from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.program import CompiledProgram
from einsat.ir.builder import GraphBuilder
from tests.gpu.host_device import HostDevice, library_for
from tests.gpu.test_session_scripts import load_script


def _program():
    g = GraphBuilder("bd")
    x = g.input("x", (8, 16), np.float32)
    h = g.matmul(x, g.weight("w", (16, 32)))
    h = g.relu(h)
    h = g.transpose(h, perm=(1, 0))  # a view
    out = g.softmax(g.transpose(h, perm=(1, 0)), axis=1)
    return g.build(out)


def test_nodes_are_grouped_by_what_runs():
    graph = _program()
    groups = {n.op_name: bd.node_group(n) for n in graph.nodes}
    assert groups == {"matmul": "gemm", "relu": "element-wise", "transpose": "view", "softmax": "softmax"}
    assert bd.torch_kernel_group("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32") == "gemm"
    assert bd.torch_kernel_group("triton_per_fused__softmax_add_div_3") == "softmax"
    assert bd.torch_kernel_group("triton_per_fused_add_native_layer_norm_1") == "norm"
    assert bd.torch_kernel_group("relu_f32_2x3") == "element-wise"


def test_modeled_nodes_sum_to_the_graph_cost_and_say_their_source():
    graph = _program()
    cost = MeasuredCost("h100")
    rows = bd.modeled_nodes(graph, cost)
    assert [r["node"] for r in rows] == [n.name for n in graph.nodes]
    assert sum(r["us"] for r in rows) == pytest.approx(cost.graph_cost(graph))
    for r, n in zip(rows, graph.nodes):
        ins, outs = graph.node_types(n)
        assert r["source"] == ("profile" if cost.db.lookup(n.op, n.attrs, ins, outs) is not None else "model")
    totals = bd.group_totals(rows)
    assert sum(g["count"] for g in totals.values()) == len(rows)
    assert sum(g["share"] for g in totals.values()) == pytest.approx(1.0)
    assert list(totals.values())[0]["us"] == max(g["us"] for g in totals.values())


def test_node_device_times_pair_each_top_level_node_with_its_own_marks():
    """With a clock that ticks once per mark, every node's interval is one tick, whatever the
    node: the marks before and after each node are paired, not shifted by one."""
    graph = _program()
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)}
    dev = HostDevice(library_for([(graph, feeds)]))
    ticks = itertools.count()
    times = bd.node_device_times(graph, GpuBackend(dev), {"x": dev.upload(feeds["x"])}, reps=3, warmup=1,
                                 mark=lambda: next(ticks), elapsed_ms=lambda a, b: (b - a) / 1e3, sync=lambda: None)
    assert times == {n.name: 1.0 for n in graph.nodes}


def test_the_session_breakdown_phase_on_the_host(tmp_path, monkeypatch):
    """breakdown_program on the host emulation: every kernel node measured and modeled, grouped; the
    kernel list's absence (no torch.profiler) recorded; the markdown renders beside a torch.compile
    entry."""
    session = load_script("gpu_session")
    graph = _program()
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)}
    dev = HostDevice(library_for([(graph, feeds)]))
    clock = itertools.count()
    monkeypatch.setattr(session, "NODE_TIMER", {"mark": lambda: next(clock), "elapsed_ms": lambda a, b: (b - a) / 1e3,
                                                "sync": lambda: None})
    monkeypatch.setattr(session, "_median_events", lambda fn, reps, stream=None, warmup=10: 0.25)
    import benchmarks.breakdown_bench as bench
    monkeypatch.setattr(bench, "profile_kernels", lambda fn, calls=10: (_ for _ in ()).throw(ImportError("no torch")))
    args = argparse.Namespace(round_reps=3, breakdown_reps=2)
    res = session.breakdown_program(CompiledProgram(graph, device=dev), graph, GpuBackend(dev), feeds,
                                    MeasuredCost("h100"), args)
    kernels = [n for n in graph.nodes if not n.definition.view]
    assert [r["node"] for r in res["nodes"]] == [n.name for n in kernels]
    assert all(r["us"] == 1.0 and r["modeled_us"] > 0 for r in res["nodes"])
    assert res["graph_ms"] == 0.25 and res["node_sum_us"] == len(kernels)
    assert set(res["groups"]) == {"gemm", "element-wise", "softmax"} and "no torch" in res["kernels_error"]
    fake_torch = {"mode": "reduce-overhead", "median_ms": 0.5, "kernel_sum_us": 400.0, "kernel_launches": 3,
                  "kernel_groups": {"gemm": {"count": 1, "us": 300.0, "share": 0.75}},
                  "kernels": [{"kernel": "sm90_gemm", "group": "gemm", "launches": 1, "us": 300.0}]}
    md = session.breakdown_markdown({"tiny": {"input": res, "optimized": res, "torch_compile": fake_torch},
                                     "gone": {"skipped": "deadline"}})
    assert "| einsat optimized | 0.250 |" in md and "torch.compile reduce-overhead | 0.500" in md
    assert "sm90_gemm" in md and "## gone: deadline" in md
