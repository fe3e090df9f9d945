"""The partition benchmark's comparisons: the modeled layer-in-model against the layer alone, and
the measured gains from paired, interleaved rounds."""

import numpy as np

from benchmarks.partition_bench import compare, modeled


def rounds(model_gain: float, layer_gain: float, n: int = 12, seed: int = 0) -> dict:
    """Paired timings (ms) with the given gains and a few percent of noise per round."""
    rng = np.random.default_rng(seed)
    noise = lambda: 1 + 0.02 * rng.standard_normal(n)  # noqa: E731
    base, layer = 100 * noise(), 10 * noise()
    return {"input": list(base), "partitioned": list(base / model_gain * noise()), "whole": list(base * noise()),
            "layer_input": list(layer), "layer_optimized": list(layer / layer_gain * noise())}


def test_a_model_gaining_less_than_its_layer_is_reported_as_such():
    out = compare(rounds(model_gain=1.0, layer_gain=1.3))
    assert out["layer_alone"]["faster"] and not out["partitioned"]["faster"]
    assert 1.2 < out["layer_alone"]["median"] < 1.4 and out["layer_alone"]["wins"] == 12
    v = out["model_vs_layer"]
    assert v["p_below"] < 0.01 and not v["holds"] and "less" in v["verdict"]


def test_a_model_gaining_as_much_as_its_layer_holds():
    out = compare(rounds(model_gain=1.3, layer_gain=1.3))
    v = out["model_vs_layer"]
    assert v["holds"] and out["partitioned"]["faster"] and out["partitioned"]["p_faster"] < 0.01
    assert out["partitioned"]["p10"] <= out["partitioned"]["median"] <= out["partitioned"]["p90"]
    assert "more" in compare(rounds(model_gain=1.6, layer_gain=1.1))["model_vs_layer"]["verdict"]


def test_the_modeled_comparison_takes_the_layer_pieces_and_lists_the_others():
    pieces = [{"index": 0, "nodes": 10, "layer": False, "cost_before": 20.0, "cost_after": 19.0, "template": 0},
              {"index": 1, "nodes": 40, "layer": True, "cost_before": 100.0, "cost_after": 80.0, "template": 1},
              {"index": 2, "nodes": 40, "layer": True, "cost_before": 100.0, "cost_after": 80.0, "template": 1}]
    part = {"piece_detail": pieces, "cost_before": 220.0, "cost_after": 179.0, "modeled_speedup": 220 / 179}
    m = modeled(part, {"cost_before": 100.0, "cost_after": 80.0, "modeled_speedup": 1.25, "stop_reason": "saturated"})
    assert m["layer_in_model"] == {"copies": 2, "cost_before": 100.0, "cost_after": 80.0, "speedup": 1.25}
    assert m["layer_in_model_at_least_alone"] and [q["index"] for q in m["others"]] == [0]
    worse = modeled(part, {"cost_before": 100.0, "cost_after": 79.0, "modeled_speedup": 100 / 79,
                           "stop_reason": "saturated"})
    assert not worse["layer_in_model_at_least_alone"]
