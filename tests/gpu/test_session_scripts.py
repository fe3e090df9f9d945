"""The GPU session's CPU side: a session folder becomes a committed profile and a results table."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np

from benchmarks.workloads import build
from einsat.extract.profile_db import ProfileDB
from einsat.ir.builder import GraphBuilder
from einsat.ir.signature import signatures_of_graph

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
        "ratio_graph_vs_torch": 0.75}}}}
    (folder / "session.json").write_text(json.dumps(session))
    assert report.main([str(folder), "--out", str(tmp_path / "results")]) == 0
    assert len(ProfileDB.load(profiles / "h100.json")) == len(db)
    out = json.loads((tmp_path / "results" / "gpu_runtime.json").read_text())
    row = out["workloads"]["pet_conv"]
    assert row["profiled_ms"] == 0.025 and row["coverage"] == 1.0  # the measured warm time
    assert abs(row["profiled_ratio"] - 25 / 30) < 1e-9
    assert "pet_conv" in (tmp_path / "results" / "gpu_runtime.md").read_text()
