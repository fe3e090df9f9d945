"""The harness writes JSON, markdown and a chart stamped with the commit; its report renders
CPU-only and GPU runs; `einsat.optimize` results are recorded with their e-graph and times."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks import harness
from benchmarks.report import markdown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_run_writes_stamped_results(tmp_path):
    code = harness.main(["pet_group_conv", "einnet_g2bmm", "--out", str(tmp_path), "--no-optimize",
                         "--in-process", "--numpy", "--reps-cpu", "3"])
    assert code == 0
    data = json.loads((tmp_path / "cpu.json").read_text())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = data["meta"]
    assert meta["commit"] == commit and meta["kind"] == "cpu"
    assert {"python", "numpy", "onnx"} <= set(meta["versions"])
    rows = {w["name"]: w for w in data["workloads"]}
    assert set(rows) == {"pet_group_conv", "einnet_g2bmm"}
    g2 = rows["einnet_g2bmm"]
    assert g2["kwargs"]["seq"] == 2000 and g2["kwargs"]["width"] == 200  # the CPU size
    assert g2["gflop"] == 2 * 8 * 2000 * 401 * 64 / 1e9
    assert g2["numpy_ms"] > 0 and g2["optimize"] == {"skipped": "--no-optimize"}
    ort = g2["cpu"]["ort"]  # without optimize: the input alone on onnxruntime
    assert ort["input"]["median_ms"] > 0 and ort["speedup"] == 1.0 and g2["cpu"]["returned"] == "input"
    assert ort["input"]["p10_ms"] <= ort["input"]["median_ms"] <= ort["input"]["p90_ms"]
    md = (tmp_path / "cpu.md").read_text()
    assert commit in md and "| einnet_g2bmm |" in md
    png = (tmp_path / "cpu.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_optimize_is_recorded_with_its_egraph_phases_and_measurements(tmp_path):
    """The CPU run optimizes under the measured model and times both ONNX files on onnxruntime."""
    code = harness.main(["pet_group_conv", "--out", str(tmp_path), "--reps-cpu", "5",
                         "--profile-cache", str(tmp_path / "cache")])
    data = json.loads((tmp_path / "cpu.json").read_text())
    row = data["workloads"][0]
    opt = row["optimize"]
    assert code == 0, opt
    assert opt["model"] == "measured-cpu" and opt["enodes"] > 0 and opt["eclasses"] > 0 and opt["stop_reason"]
    assert {"saturate", "profile", "extract", "verify"} <= set(opt["times"])
    v = opt["verification"]
    if v["status"] == "identical":  # the input itself: not run again, nothing measured (null, not 0)
        assert v["trials"] == 0 and v["max_error"] is None and v["tolerance"] is None
    else:
        assert v["trials"] > 0 and v["max_error"] <= v["tolerance"]
    assert opt["profile"]["path"].startswith(str(tmp_path / "cache")) and opt["profile"]["measured"] > 0
    cpu = row["cpu"]
    assert cpu["returned"] in ("input", "optimized") and cpu["ort"]["speedup"] > 0
    assert (cpu["returned"] == "input") == (opt["kept_input"] is not None)
    pred = cpu["prediction"]["input"]
    assert pred["error"] == pytest.approx(pred["predicted_ms"] / pred["measured_ms"] - 1)
    same = cpu["prediction"]["same_run"]
    assert same["units"] >= same["distinct"] >= 1 and same["error"] == pytest.approx(
        same["predicted_ms"] / same["measured_ms"] - 1)
    assert cpu["weights_mb"]["input"] > 0 and data["summary"]["measured"] == 1
    assert "measured speedup" in (tmp_path / "cpu.md").read_text()


@pytest.mark.slow  # make test stays within 6 minutes (its time moved to make test-slow)
def test_resume_keeps_finished_workloads(tmp_path, capsys):
    assert harness.main(["pet_group_conv", "--out", str(tmp_path), "--no-optimize", "--in-process",
                         "--reps-cpu", "3"]) == 0
    first = json.loads((tmp_path / "cpu.json").read_text())["workloads"][0]
    assert harness.main(["pet_group_conv", "pet_conv", "--out", str(tmp_path), "--no-optimize", "--in-process",
                         "--reps-cpu", "3", "--resume"]) == 0
    assert "pet_group_conv: kept from the earlier run" in capsys.readouterr().out
    rows = {w["name"]: w for w in json.loads((tmp_path / "cpu.json").read_text())["workloads"]}
    assert rows["pet_group_conv"] == first and "cpu" in rows["pet_conv"]


def test_summary_geomean_and_prediction_counts():
    from benchmarks.report import summary
    rows = [{"name": n, "cpu": {"ort": {"speedup": s}, "prediction": {"input": {"error": e, "naive_error": 2 * e}}}}
            for n, s, e in (("a", 1.21, 0.05), ("b", 1.0, -0.2), ("c", 0.96, 0.1))]
    sm = summary({"workloads": rows})
    assert sm["geomean_speedup"] == pytest.approx((1.21 * 1.0 * 0.96) ** (1 / 3))
    assert sm["slower_than_0.97"] == ["c"] and sm["carried_by"] == ["a"] and sm["min_speedup"] == 0.96
    # naive errors 10%, -40%, 20%
    assert sm["predicted_within_15pct"] == "2/3" and sm["naive_sum_within_15pct"] == "1/3"


def test_a_failing_workload_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    def broken(**kwargs):
        raise ValueError("no such layer")
    w = harness.WORKLOADS["fsrcnn"]
    monkeypatch.setitem(harness.WORKLOADS, "fsrcnn", w._replace(builder=broken))
    code = harness.main(["fsrcnn", "pet_conv", "--out", str(tmp_path), "--no-optimize", "--in-process",
                         "--reps-cpu", "3"])
    assert code == 1
    rows = {w["name"]: w for w in json.loads((tmp_path / "cpu.json").read_text())["workloads"]}
    assert rows["fsrcnn"]["error"] == "ValueError: no such layer"
    assert rows["pet_conv"]["cpu"]["ort"]["input"]["median_ms"] > 0
    assert "no such layer" in (tmp_path / "cpu.md").read_text()


def test_each_workload_runs_in_its_own_process_under_a_memory_cap(tmp_path):
    # a child that cannot get the memory it needs dies alone; the parent records it and goes on
    code = harness.main(["pet_conv", "--out", str(tmp_path), "--no-optimize", "--memory-gb", "0.05"])
    assert code == 1
    row = json.loads((tmp_path / "cpu.json").read_text())["workloads"][0]
    assert row["name"] == "pet_conv" and "died" in row["error"] and "0.05 GB" in row["error"]
    code = harness.main(["pet_conv", "--out", str(tmp_path), "--no-optimize", "--reps-cpu", "3"])
    assert code == 0
    row = json.loads((tmp_path / "cpu.json").read_text())["workloads"][0]
    assert row["cpu"]["ort"]["input"]["median_ms"] > 0 and row["kwargs"] == {"batch": 1}


def test_gpu_report_has_einsat_eager_and_both_compile_modes():
    gpu = {"device": "NVIDIA H100", "einsat": {"median_ms": 1.25}, "einsat_optimized": {"median_ms": 0.75},
           "pytorch": {"eager": {"median_ms": 1.5}, "reduce-overhead": {"median_ms": 0.5},
                       "max-autotune": {"error": "CompileTimeout: compile timed out after 300 s"}}}
    results = {"meta": {"kind": "gpu", "commit": "abc123", "dirty": False, "date": "d", "machine": "m",
                        "gpu": "NVIDIA H100", "cost_model": "h100", "versions": {"torch": "2.11"}},
               "workloads": [{"name": "csrnet", "source": "PET", "kwargs": {"batch": 1}, "nodes": 12,
                              "gflop": 3.38, "numpy_ms": 190.0, "optimize": {"skipped": "no egglog"},
                              "gpu": gpu}]}
    md = markdown(results)
    lines = md.splitlines()
    header = next(ln for ln in lines if ln.startswith("| workload"))
    row = next(ln for ln in lines if ln.startswith("| csrnet"))
    assert "PyTorch eager ms" in header and "torch.compile reduce-overhead ms" in header
    assert "torch.compile max-autotune ms" in header
    cells = [c.strip() for c in row.split("|")]
    assert cells[-6:-1] == ["1.250", "0.750", "1.500", "0.500", "compile timed out"]
    assert "no egglog" in row


def test_gpu_flag_without_a_device_refuses_clearly(tmp_path, capsys):
    from benchmarks.gpu_bench import device_name
    if device_name() is not None:  # this machine has a GPU: the refusal path does not apply
        return
    assert harness.main(["pet_conv", "--gpu", "--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_gpu_timing_summary_and_error_measures():
    from benchmarks.gpu_bench import rel_error, summary
    s = summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"median_ms": 3.0, "min_ms": 1.0, "p90_ms": 4.0, "reps": 5}
    assert rel_error(np.array([1.0, 2.5]), np.array([1.0, 2.0])) == 0.25
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0


def test_report_renders_again_from_the_json(tmp_path):
    harness.main(["pet_group_conv", "--out", str(tmp_path), "--no-optimize", "--in-process", "--reps-cpu", "3"])
    (tmp_path / "cpu.md").unlink()
    (tmp_path / "cpu.png").unlink()
    from benchmarks.report import main as render
    assert render([str(tmp_path / "cpu.json")]) == 0
    assert "| pet_group_conv |" in (tmp_path / "cpu.md").read_text()
    assert (tmp_path / "cpu.png").read_bytes()[:4] == b"\x89PNG"


def test_the_same_run_prediction_is_the_model_on_the_runs_own_times(tmp_path, monkeypatch):
    """`same_run_prediction` is `graph_cost` with the units' times of its own rounds: layout
    reorders between two convolutions are taken off as the profile's shares say (fixed times)."""
    from benchmarks import cpu_bench
    from einsat.cost.target import cpu_model
    from einsat.ir.builder import GraphBuilder
    from einsat.runtime.profiler import CHAIN

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    b = GraphBuilder("two")
    x = b.input("x", (1, 8, 8, 8))
    y = b.relu(b.conv(x, b.weight("w1", (8, 8, 3, 3)), padding=(1, 1, 1, 1)))
    g = b.build(b.relu(b.conv(y, b.weight("w2", (8, 8, 3, 3)), padding=(1, 1, 1, 1))))
    model = cpu_model()
    sigs = model.unit_signatures(g)
    assert len(sigs) == 1  # two units of one signature
    share = {"ReorderInput": 0.1, "Conv": 0.8, "ReorderOutput": 0.1}
    model.add({sigs[0].key: {"us": 1000.0, "flops": 1, "bytes": 1, "kernel_share": share}},
              {"call_overhead_us": 1.0}, sigs=sigs)
    model.save()
    fixed = {"(overhead)": 10.0, "(chain)": 10.0 + (CHAIN - 1) * 2.0, "(program)": 500.0}
    monkeypatch.setattr(cpu_bench, "interleaved",
                        lambda runners, reps, warmup: {k: [fixed.get(k, 210.0)] * reps for k in runners})
    out = cpu_bench.same_run_prediction(g, 3)
    # call 10 - one dispatch 2 + two units of (200 + 2), less the reorder between them (20 + 20)
    assert out["predicted_ms"] * 1e3 == pytest.approx(10 - 2 + 2 * 202 - 40)
    assert out["measured_ms"] == pytest.approx(0.5) and out["timed"] == 1 and out["units"] == 2
