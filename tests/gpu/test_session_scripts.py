"""The GPU session's CPU side: a session folder becomes a committed profile and a results table."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import shutil
import time

import numpy as np
import pytest

from benchmarks.workloads import build
from einsat.cost.profile_db import ProfileDB
from einsat.cost.profiled import MeasuredCost, calibration_key
from einsat.ir.builder import GraphBuilder
from einsat.ir.signature import signatures_of_graph
from tests.gpu.host_device import HostDevice, library_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_report_merges_the_profile_and_predicts(tmp_path, monkeypatch):
    report = load_script("gpu_report")
    profiles = tmp_path / "profiles"
    monkeypatch.setattr(report, "PROFILES_DIR", str(profiles))
    db = ProfileDB(device={"kind": "h100", "name": "NVIDIA H100 80GB HBM3"})
    rng = np.random.default_rng(0)
    for k in range(6):  # matmuls to calibrate on
        b = GraphBuilder("m")
        m = int(2 ** rng.uniform(3, 10))
        for s in signatures_of_graph(b.build(b.matmul(b.input("x", (m, m)), b.input("w", (m, m))))):
            db.add(s, us=5.0 + s.flops() / 2e7, warm_us=4.0 + s.flops() / 2e7, flops=s.flops(), bytes=s.bytes(),
                   kernels=1)
    (conv,) = signatures_of_graph(build("pet_conv"))
    db.add(conv, us=30.0, warm_us=25.0, flops=conv.flops(), bytes=conv.bytes(), kernels=1)
    folder = tmp_path / "session"
    folder.mkdir()
    db.save(folder / "profile-h100.json")
    session = {"started": "now", "phases": {"e2e": {"pet_conv": {
        "einsat_graph_ms": 0.030, "einsat_eager_ms": 0.05, "torch_eager_ms": 0.040, "rel_error": 1e-7,
        "ratio_graph_vs_torch": 0.75}}, "optimized": {
        "pet_conv": {"nodes_before": 1, "nodes_after": 4, "input_ms": 0.030, "optimized_ms": 0.015, "speedup": 2.0,
                     "speedup_min": 1.5, "speedup_max": 2.5, "faster_rounds": 15, "rounds": 15,
                     "modeled_speedup": 2.04, "optimized_rel_error": 1e-7, "predicted_input_ms": 0.040,
                     "predicted_optimized_ms": 0.016},
        "csrnet": {"error": "ValueError: input weight 'w' differs"}}}}
    (folder / "session.json").write_text(json.dumps(session))
    assert report.main([str(folder), "--out", str(tmp_path / "results")]) == 0
    committed = ProfileDB.load(profiles / "h100.json")
    assert len(committed) == len(db)
    assert committed.method["calibration"]["key"] == calibration_key(committed)  # cost="h100" need not fit it
    out = json.loads((tmp_path / "results" / "gpu_runtime.json").read_text())
    row = out["workloads"]["pet_conv"]
    assert row["profiled_ms"] == 0.025 and row["coverage"] == 1.0  # the measured warm time
    assert abs(row["profiled_ratio"] - 25 / 30) < 1e-9
    md = (tmp_path / "results" / "gpu_runtime.md").read_text()
    assert "pet_conv" in md
    assert len(out["meta"]["commit"]) == 40 and f"commit `{out['meta']['commit']}`" in md  # the figures' code
    assert "| pet_conv | 1 → 4 | 0.030 | 0.015 | 2.00× [1.50, 2.50] | 15/15 | 2.04× (modeled) | 0.040 / 0.016 |" in md
    assert "within 25% of the measured time: 1 of 2 programs" in md  # 0.040 is 33% over, 0.016 7% over
    assert "| csrnet | ValueError: input weight 'w' differs |" in md
    assert "Geomean measured speed-up over 1 workloads: 2.000×" in md


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_an_optimized_program_travels_without_weights_and_runs_against_its_input(tmp_path, monkeypatch):
    """scripts/export_optimized.py packs an optimized program as its recipe over the input's
    weights; the GPU session rebuilds it bit for bit and times it against the input (here on the
    host device, with the CUDA-event timing replaced)."""
    pytest.importorskip("egglog", reason="the export optimizes: the CPU side of the session (no egglog on the GPU)")
    from einsat.optimize import Options, run
    export, session = load_script("export_optimized"), load_script("gpu_session")
    graph = build("pet_conv")
    result = run(graph, None, Options(cost="h100", budget=10, recipe=True))  # with its recipe
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "pet_conv.pkl").write_bytes(pickle.dumps(export.pack("pet_conv", graph, result)))
    (record,) = session.optimized_records(argparse.Namespace(optimized=str(tmp_path / "opt")))
    source, opt = session.optimized_pair(record)
    assert not record["raw"]  # every weight comes from the input's, or from the recipe
    assert [n.op for n in opt.nodes] == [n.op for n in result.graph.nodes]
    assert opt.weights.keys() == result.graph.weights.keys()
    for k, w in result.graph.weights.items():
        np.testing.assert_array_equal(opt.weights[k], w)
    name = next(iter(record["source_sha"]))
    other = source.replace(weights={**source.weights, name: source.weights[name] + 1})
    with pytest.raises(ValueError, match=name):
        export.unpack(record, other)
    made = sorted(record["recipe"].outputs) if record["recipe"] is not None else []
    assert made  # pet_conv's optimized program reshapes its filter: a weight the recipe makes
    # a recipe that rounds otherwise (another BLAS) is refused only when exactness is asked
    record_off = {**record, "weights_sha": {**record["weights_sha"], made[0]: "0" * 64}}
    with pytest.raises(ValueError, match=made[0]):
        export.unpack(record_off, source)
    assert export.inexact_weights(record_off, export.unpack(record_off, source, exact=False)) == [made[0]]

    feeds = {n: np.zeros(source.types[n].shape, source.types[n].dtype) for n in source.inputs}
    library = library_for([(source, feeds), (opt, feeds)])
    monkeypatch.setattr(session, "interleaved", lambda a, b, rounds, reps: ([2.0, 3.0, 2.0], [1.0, 1.0, 2.0]))
    args = argparse.Namespace(rounds=3, round_reps=5)
    cost = MeasuredCost("h100")
    res = session.optimized_workload(session.Session(str(tmp_path), 100.0), record, source, opt, args, cost,
                                     device=HostDevice(library))
    assert res["input_rel_error"] < 1e-5 and res["optimized_rel_error"] < 1e-5  # the host's conv sums in its order
    assert res["speedup"] == 2.0 and (res["speedup_min"], res["speedup_max"]) == (1.0, 3.0)
    assert res["faster_rounds"] == 2 and res["recipe_inexact"] == []
    assert res["modeled_speedup"] == pytest.approx(result.report.speedup)
    assert res["predicted_input_ms"] == cost.graph_cost(source) / 1e3 and res["coverage_optimized"] <= 1.0


def test_the_optimized_table_sets_einsat_beside_eager_and_both_compile_modes(tmp_path, monkeypatch):
    """Each optimized row carries PyTorch eager and torch.compile (reduce-overhead, max-autotune)
    on the input program; a compile past its timeout reads 'compile timed out', not a number."""
    session = load_script("gpu_session")
    asked = {}

    def fake(graph, feeds, want, reps, compile_timeout_s=None):
        asked.update(reps=reps, timeout=compile_timeout_s)
        return {"torch": "2.13", "eager": {"median_ms": 4.0, "rel_error": 1e-7, "first_call_s": 0.1},
                "reduce-overhead": {"median_ms": 1.0, "rel_error": 1e-7, "first_call_s": 9.0},
                "max-autotune": {"error": "CompileTimeout: compile timed out after 300 s"}}
    monkeypatch.setattr(session, "torch_latencies", fake)
    args = argparse.Namespace(rounds=3, round_reps=5, compile_timeout=300.0)
    cols = session.torch_columns(None, {}, {}, 2.0, args)
    assert asked == {"reps": 20, "timeout": 300.0}
    assert cols["torch_eager_ms"] == 4.0 and cols["vs_torch_eager"] == 2.0
    assert cols["vs_torch_reduce-overhead"] == 0.5 and "timed out" in cols["torch_max-autotune_error"]
    row = {"nodes_before": 9, "nodes_after": 5, "input_ms": 3.0, "optimized_ms": 2.0, "speedup": 1.5,
           "speedup_min": 1.4, "speedup_max": 1.6, "modeled_speedup": 1.7, "optimized_rel_error": 1e-6, **cols}
    md = session.summary_markdown({"phases": {"optimized": {"bert": row}}})
    header = next(ln for ln in md.splitlines() if ln.startswith("| workload | nodes"))
    line = next(ln for ln in md.splitlines() if ln.startswith("| bert"))
    assert "torch eager ms" in header and "reduce-overhead" in header and "max-autotune" in header
    assert line.rstrip(" |").split(" | ")[-3:] == ["4.000 (2.00x)", "1.000 (0.50x)", "compile timed out"]
    monkeypatch.setattr(session, "torch_latencies", lambda *a, **k: (_ for _ in ()).throw(ImportError("no torch")))
    assert session.torch_columns(None, {}, {}, 2.0, args) == {"torch_error": "ImportError: no torch"}


def test_interleaved_rounds_alternate_which_program_runs_first(monkeypatch):
    session = load_script("gpu_session")
    order = []

    class Prog:
        def __init__(self, name):
            self.name, self._stream = name, None

        def replay(self):
            order.append(self.name)
    times = {"a": 2.0, "b": 1.0}
    monkeypatch.setattr(session, "cuda_event_times",
                        lambda fn, reps, warmup, stream: [fn() or times[order[-1]]] * reps)
    ta, tb = session.interleaved(Prog("a"), Prog("b"), rounds=4, reps=3)
    assert ta == [2.0] * 4 and tb == [1.0] * 4
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_each_workload_skips_past_the_margin_and_records_errors(tmp_path):
    session = load_script("gpu_session")
    s = session.Session(str(tmp_path), 100.0)

    def measure(item):
        if item == "bad":
            raise ValueError("no such kernel")
        return {"ms": 1.0}
    out = session.each_workload(s, "e2e", ["good", "bad"], 10, measure)
    assert out["good"] == {"ms": 1.0} and out["bad"]["error"] == "ValueError: no such kernel"
    assert json.loads((tmp_path / "session.json").read_text())["phases"]["e2e"]["good"] == {"ms": 1.0}
    late = session.each_workload(s, "optimized", [{"name": "pet_conv"}], 1000, measure)  # 100 s left < 1000
    assert late == {"pet_conv": {"skipped": "deadline"}}


def test_a_workload_running_past_the_deadline_is_stopped_and_the_rest_skipped(tmp_path):
    session = load_script("gpu_session")
    s = session.Session(str(tmp_path), 0.6 + (time.monotonic() - session.START))  # 0.6 s from now

    def measure(item):
        if item == "slow":
            time.sleep(30)
        return {"ms": 1.0}
    t0 = time.monotonic()
    out = session.each_workload(s, "optimized", ["fast", "slow", "after"], 0.1, measure)
    assert time.monotonic() - t0 < 10
    assert out["fast"] == {"ms": 1.0} and out["after"] == {"skipped": "deadline"}
    assert out["slow"]["error"].startswith("DeadlineReached: stopped at the session's deadline")
    assert json.loads((tmp_path / "session.json").read_text())["phases"]["optimized"]["slow"]["error"]
