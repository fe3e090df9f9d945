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


def test_a_partitioned_row_records_null_not_zero_for_what_it_did_not_measure():
    # the pieces of a partitioned run ran the generator, and the report keeps none of their rounds:
    # PET's seconds, its share, the programs entered and the limits check were not measured
    row = {"workload": "bert", "model": "m", "nodes": 360, "rounds": [], "within_limits": None, "admitted": None,
           "pet_seconds": None, "pet_share": None, "deterministic": True,
           "stopped_by": {"quiet": ["saturated / 1 pieces: optimal"], "loaded": "saturated / 1 pieces: optimal",
                          "without": ["saturated / 1 pieces: optimal"]},
           "seconds": {"with": 36.8, "without": 43.2, "loaded": 96.0}, "ratio": 0.85,
           "load": {"quiet": [6.1, 6.0], "loaded": [6.0, 9.4]},
           "cost_us": {"before": 3616.8, "with": 3043.2, "without": 3043.2},
           "run": {"commit": "a4dc65c", "date": "2026-11-28 00:21 UTC", "reps": 1}}
    meta = {"cost": "h100", "machine": "AMD EPYC, 2 CPUs, Linux", "cpus": 2, "time_s": 600.0, "ilp_s": 300.0}
    line = next(ln for ln in mutate_bench.markdown([row], meta).splitlines() if ln.startswith("| bert |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == cells[4] == cells[-1] == "—"  # PET's seconds, programs entered, within limits
    assert " 0 " not in line and "0%" not in line


def test_the_committed_results_hold_null_where_the_rounds_were_not_seen():
    data = json.loads((mutate_bench.RESULTS / "mutate.json").read_text())
    for row in data["results"]:
        if mutate_bench._unseen(row):
            assert row["pet_seconds"] is row["pet_share"] is row["admitted"] is row["within_limits"] is None
        else:
            assert row["pet_seconds"] > 0 and row["within_limits"] in (True, False)
