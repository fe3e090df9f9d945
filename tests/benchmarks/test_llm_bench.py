"""benchmarks.llm_bench end to end on two workloads at the tests' sizes: the results it writes say
what they are (sizes, machine, no GPU) and hold the verified, exported, measured run."""

import json

import pytest

from benchmarks import llm_bench


@pytest.mark.slow
def test_llm_bench_writes_its_tables(tmp_path):
    assert llm_bench.main(["mirage_lora", "llama_decode", "--small", "--reps", "3", "--profile-budget", "5",
                           "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "llm.json").read_text())
    assert results["meta"]["small"] and results["meta"]["gpu"] is None and results["meta"]["machine"]
    rows = {w["name"]: w for w in results["workloads"]}
    assert set(rows) == {"mirage_lora", "llama_decode"}
    for w in rows.values():
        assert w["h100"]["verification_status"] == "proved"
        # the searches end by work, whatever the load: the programs and modeled figures are the commit's
        assert "time" not in (w["h100"].get("stop_reason") or "")
        assert "time limit" not in (w["h100"]["extraction"].get("status") or "")
        assert w["h100"]["memory"]["added_bytes"] < w["h100"]["memory"]["limit_bytes"]
        assert w["onnx"]["onnxruntime_runs"] and w["onnx"]["max_relative_error"] < 1e-4
        ort = w["cpu"]["ort"]
        assert ort["input"]["reps"] == 3 and ort["speedup"] > 0
    assert rows["llama_decode"]["kwargs"]["hidden"] == 64
    md = (tmp_path / "llm.md").read_text()
    assert "small dimensions" in md and "not measured this session (no GPU lent)" in md
    assert "Every search ends by work" in md
    assert "| mirage_lora |" in md and "| llama_decode |" in md
