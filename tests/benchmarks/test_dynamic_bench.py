"""benchmarks/dynamic_bench.py's pieces: the sizes each model is timed at, inputs at those sizes,
and the table (#40). The bench itself optimizes and times for minutes: not here."""

from __future__ import annotations

import onnx

from benchmarks import dynamic_bench as bench
from benchmarks.dynamic_bench import BUNDLED, feeds, sizes_of, symbols_of


def test_decode_exports_are_timed_at_past_lengths_and_their_mask_follows():
    legacy = onnx.load(str(BUNDLED / "hf_llama_decode_legacy.onnx"), load_external_data=False)
    assert symbols_of(legacy) == ("batch", "past_sequence")
    sizes = sizes_of(legacy)
    assert len(sizes) == 3 and all(s["total_sequence"] == s["past_sequence"] + 1 for s in sizes)
    dynamo = onnx.load(str(BUNDLED / "hf_llama_decode_dynamo.onnx"), load_external_data=False)
    x = feeds(dynamo, {"batch": 2, "past_sequence": 5})
    assert x["attention_mask"].shape == (2, 6) and (x["attention_mask"] == 1).all()  # 'past_sequence + 1'
    assert x["past_key_values.0.key"].shape == (2, 2, 5, 16) and x["input_ids"].shape == (2, 1)


def test_the_table_has_a_row_per_model_and_size_and_names_refusals(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    timed = {"ratio": 1.25, "p10": 1.1, "p90": 1.4}
    rows = [{"name": "m", "dim_params": {"x": ["batch", 8]},
             "tools": {"einsat_default": {"seconds": 3.0, "kept_input": None, "modeled_speedup": 1.5,
                                          "keeps_dim_params": True,
                                          "modeled_per_size": [{"sizes": {"batch": 1}, "before_us": 3.0,
                                                                "after_us": 2.0}]}},
             "sizes": [{"sizes": {"batch": 1}, "error": {"einsat_default": 1e-7},
                        "threads": {1: {"model_us": 1000.0, "einsat_default": timed},
                                    2: {"model_us": 600.0, "einsat_default": timed}}}]},
            {"name": "broken", "error": "OnnxError: no"}]
    bench.write(rows, {"commit": "c", "date": "d", "machine": "m", "load_average": 0.1, "versions": {}},
                ["einsat_default"])
    text = (tmp_path / "dynamic.md").read_text()
    assert "| m | batch 1 | 1.00 / 0.60 | 1.250x (1.10-1.40) / 1.250x (1.10-1.40) | einsat_default 1.0e-07 | 1.500x |" \
        in text
    assert "| broken | – | OnnxError: no |" in text
    assert "| m | einsat_default | 3.0 | modeled 1.500x | yes |" in text
