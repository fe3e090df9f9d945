"""The mutation generator's benchmark records rounds, bounds, determinism and both times."""

import json

import pytest

from benchmarks import mutate_bench


@pytest.mark.slow
def test_csrnet_is_benchmarked_with_and_without_the_generator(tmp_path):
    # the datasheet roofline: the cheaper of the models to run; this test is of the benchmark
    assert mutate_bench.main(["csrnet", "--cost", "h100-roofline", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "mutate.json").read_text())["results"]
    assert row["workload"] == "csrnet" and row["deterministic"] and row["within_limits"]
    assert row["rounds"] and all(set(r["counts"]) >= {"subprograms", "mutants", "verified", "admitted"}
                                 for r in row["rounds"])
    assert row["seconds"]["with"] > 0 and row["seconds"]["without"] > 0
    assert 0 <= row["pet_share"] <= 1 and row["pet_seconds"] >= 0 and row["admitted"] >= 0
    assert row["cost_us"]["with"] <= row["cost_us"]["before"]
    md = (tmp_path / "mutate.md").read_text()
    assert "| csrnet |" in md and "step 1:" in md
