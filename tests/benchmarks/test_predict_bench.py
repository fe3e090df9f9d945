"""benchmarks.predict_bench: the prediction per program without optimizing, written atomically."""

from __future__ import annotations

import json

import pytest

from benchmarks import predict_bench

pytest.importorskip("onnxruntime")


def test_it_profiles_predicts_and_writes_the_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "predict"
    assert predict_bench.main(["pet_conv", "--reps", "3", "--out", str(out)]) == 0
    data = json.loads((tmp_path / "predict.json").read_text())
    (rec,) = data["results"]
    assert rec["name"] == "pet_conv" and rec["profile"]["measured"] >= 1 and rec["reference_us"] > 0
    assert rec["error"] == pytest.approx(rec["predicted_ms"] / rec["measured_ms"] - 1)
    assert rec["predicted_ms"] > 0 and rec["measured_ms"] > 0 and "load_start" in data
    text = (tmp_path / "predict.md").read_text()
    assert "| pet_conv | 1 |" in text and "programs**" in text
    assert len(data["commit"]) == 40 and isinstance(data["dirty"], bool) and data["versions"]["onnxruntime"]
    assert f"commit `{data['commit']}`" in text and "python -m benchmarks.predict_bench pet_conv" in text
    assert not list(tmp_path.glob("*.tmp"))


def test_the_summary_counts_the_misses_on_each_side():
    line = predict_bench.sides_line([-0.3, -0.2, 0.1, 0.16, -0.15], "From the profile")
    assert line == "From the profile: 3 outside 15%, 2 predicted below the measured time, 1 above."


def test_an_unknown_program_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        predict_bench.main(["no_such_model"])
    assert "unknown programs ['no_such_model']" in capsys.readouterr().err
