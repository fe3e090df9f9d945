"""The peers bench's pieces (benchmarks/peers_bench.py): ratio math, op counting, output errors,
dims and inputs of the bundled models, and the results table. No tool is run here."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks import peers_bench as pb


def _model(ops: list[str]) -> onnx.ModelProto:
    nodes = [helper.make_node(op, ["x"], [f"y{k}"], domain="com.microsoft" if op.startswith("Skip") else "")
             for k, op in enumerate(ops)]
    outs = [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None) for k in range(len(ops))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])], outs)
    return helper.make_model(graph)


def test_ratio_stats_is_the_median_of_per_round_ratios():
    base = [10.0, 10.0, 30.0, 10.0, 10.0]
    file = [5.0, 5.0, 10.0, 10.0, 2.0]  # ratios 2, 2, 3, 1, 5: median 2 (not median(base)/median(file) = 2 too,
    s = pb.ratio_stats(base, file)       # so check a case where they differ below)
    assert s["ratio"] == 2.0 and s["rounds"] == 5
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.2)
    assert s["base_ms"] == pytest.approx(0.01) and s["file_ms"] == pytest.approx(0.005)
    # a burst on one round moves that round's ratio only
    s = pb.ratio_stats([10.0, 10.0, 10.0], [5.0, 50.0, 4.0])
    assert s["ratio"] == 2.0
    with pytest.raises(ValueError, match="same positive number"):
        pb.ratio_stats([1.0], [1.0, 2.0])


def test_rounds_spend_about_the_seconds_within_bounds():
    assert pb.rounds(9, 1e6, 4.0, 41) == 9          # a 1 s round: the least
    assert pb.rounds(9, 1e5, 4.0, 41) == 40         # 0.1 s: 40 rounds
    assert pb.rounds(9, 10.0, 4.0, 41) == 41        # tiny: the most


def test_op_counts_counts_fused_and_view_ops_and_all_layernorm_kinds():
    m = _model(["LayerNormalization", "SkipLayerNormalization", "Attention", "Reshape", "Reshape", "MatMul",
                "Softmax"])
    c = pb.op_counts(m)
    assert c["*LayerNormalization"] == 2 and c["Attention"] == 1 and c["Reshape"] == 2 and c["Softmax"] == 1
    assert c["RMSNormalization"] == 0 and c["Expand"] == 0 and c["nodes"] == 7
    assert "MatMul" not in c
    assert pb.fused_summary(c) == "Attention 1, *LayerNormalization 2, Softmax 1, Reshape 2"
    assert pb.fused_summary(pb.op_counts(_model(["MatMul"]))) == "none"


def test_output_errors_by_name_with_relative_scale():
    want = {"a": np.array([1.0, -4.0]), "b": np.zeros(3)}
    got = {"b": np.zeros(3), "a": np.array([1.5, -4.0])}
    e = pb.output_errors(want, got)
    assert e["max_abs"] == 0.5 and e["max_rel"] == 0.125 and e["missing"] == 0
    # outputs renamed by a tool: compared by position
    e = pb.output_errors({"a": np.ones(2)}, {"z": np.array([1.0, 3.0])})
    assert e["max_abs"] == 2.0
    e = pb.output_errors({"a": np.ones(2)}, {"a": np.ones(3)})
    assert e["max_abs"] is None and "shape" in e["error"]


def test_geomean_and_family():
    assert pb.geomean([2.0, 0.5, None]) == pytest.approx(1.0)
    assert pb.geomean([]) is None
    assert pb.family("hf_llama_prefill_dynamo") == "llama"
    assert pb.family("whisper_encoder_legacy") == "whisper"
    assert pb.family("bert_encoder") == "bert" and pb.family("hf_distilbert") == "distilbert"
    assert pb.family("resnet18") == "resnet" and pb.family("hf_mobilenet_v2") == "mobilenet"


def test_fix_dims_sizes_symbols_and_expressions_and_names_unknown_ones():
    m = _model(["Relu"])
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "past_sequence + 1"
    fixed = pb.fix_dims(m, pb.DIMS)
    assert [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim] == [1, 128]
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # the input is not changed
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "frames"
    with pytest.raises(ValueError, match="frames"):
        pb.fix_dims(m, pb.DIMS)


def test_feeds_are_masks_of_ones_token_types_zeros_and_seeded():
    graph = helper.make_graph([], "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 8]),
                                        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, 8]),
                                        helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [1, 8]),
                                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], [])
    m = helper.make_model(graph)
    f = pb.feeds(m)
    assert (f["attention_mask"] == 1).all() and (f["token_type_ids"] == 0).all()
    assert f["input_ids"].dtype == np.int64 and 0 <= f["input_ids"].min() and f["input_ids"].max() < 100
    assert f["x"].dtype == np.float32 and f["x"].shape == (2, 3)
    assert np.array_equal(pb.feeds(m)["x"], f["x"])


def _timing(r1, r2):
    return {"1": {"ratio": r1, "p10": r1 - 0.1, "p90": r1 + 0.1}, "2": {"ratio": r2, "p10": r2 - 0.1, "p90": r2 + 0.1}}


def test_markdown_states_measured_and_modeled_and_lists_failures():
    ops = {**{op: 0 for op in pb.TRACKED}, "Attention": 4, "Reshape": 3, "nodes": 30}
    rows = [{"name": "bert_legacy", "from": "export", "family": "bert", "ops": ops, "export_ms": {"1": 20.0, "2": 11.0},
             "tools": {"ort": {"timing": _timing(1.1, 1.2), "opt_level": 1, "ops": ops,
                               "errors": {"max_abs": 1e-6, "max_rel": 2e-7}},
                       "slim": {"error": "RuntimeError: onnxslim exited 1: boom"},
                       "einsat_cpu": {"timing": _timing(1.0, 1.0), "returned_input": True, "ops": ops,
                                      "errors": {"max_abs": 0.0, "max_rel": 0.0}},
                       "einsat_default": {"timing": _timing(0.5, 2.0), "modeled_speedup": 1.7, "ops": ops,
                                          "errors": {"max_abs": 0.0, "max_rel": 0.0}}}},
            {"name": "vit_legacy", "from": "export", "family": "vit", "ops": ops, "export_ms": {"1": 20.0, "2": 11.0},
             "tools": {"ort": {"timing": _timing(0.9, 0.8), "opt_level": 0, "ops": ops,
                               "errors": {"max_abs": 1e-6, "max_rel": 2e-7}},
                       "einsat_cpu": {"timing": _timing(1.1, 1.1), "returned_input": False, "returned": "alternative",
                                      "ops": ops, "errors": {"max_abs": 0.0, "max_rel": 0.0}},
                       "einsat_default": {"timing": _timing(2.0, 0.5), "ops": ops,
                                          "errors": {"max_abs": 0.0, "max_rel": 0.0}}}}]
    meta = {"commit": "abc123", "dirty": False, "date": "2026-11-28 18:00 UTC", "machine": "m", "load_average": 1.0,
            "versions": {"onnxruntime": "1.31.1"}, "reps": 9, "deploy_threads": 2, "budget_s": 15.0,
            "onnxslim": "0.1.98"}
    md = pb.markdown({"meta": meta, "rows": rows, "export_failed": {"t5_dynamo.onnx": "ValueError: differs"}})
    assert "Commit `abc123`" in md and "Measured:" in md and "Modeled:" in md and "(measured)" in md
    lines = md.splitlines()
    geo = {tool: next(line for line in lines if line.startswith(f"| {tool} |")) for tool in pb.TOOLS}
    assert "| 0.995x | 0.980x | 2 |" in geo["ort"]             # sqrt(1.1 * 0.9), sqrt(1.2 * 0.8)
    assert "| 1.000x | 1.000x | 2 |" in geo["einsat_default"]
    assert "| – | – | 0 |" in geo["slim"]
    row = next(line for line in lines if line.startswith("| bert_legacy | 20.00"))
    assert "1.100x (1.00-1.20) / 1.200x (1.10-1.30) (level 1)" in row and "(input returned)" in row
    assert row.endswith("| 1.700x | – / – |")  # no head-to-head without einsat cpu's timing
    row = next(line for line in lines if line.startswith("| vit_legacy | 20.00"))
    assert "| 1.100x (1.00-1.20) / 1.100x (1.00-1.20) (the modeled alternative) |" in row
    assert "| bert_legacy | ort | 1.00e-06 | 2.00e-07 | 30 | Attention 4, Reshape 3 |" in md
    assert "- bert_legacy, slim: RuntimeError: onnxslim exited 1: boom" in md
    assert "- t5_dynamo.onnx, export script: ValueError: differs" in md


def test_markdown_names_the_default_costs_program_where_cost_cpu_returned_it():
    ops = {**{op: 0 for op in pb.TRACKED}, "nodes": 30}
    rows = [{"name": "efficientnet_dynamo", "from": "export", "family": "efficientnet", "ops": ops,
             "export_ms": {"1": 6.0, "2": 5.0},
             "tools": {"einsat_cpu": {"timing": _timing(1.05, 1.06), "returned_input": False, "ops": ops,
                                      "returned": "modeled run", "errors": {"max_abs": 0.0, "max_rel": 0.0}}}}]
    meta = {"commit": "abc123", "dirty": False, "date": "2026-11-29 21:00 UTC", "machine": "m", "load_average": 1.0,
            "versions": {"onnxruntime": "1.31.1"}, "reps": 9, "deploy_threads": 2, "budget_s": None,
            "onnxslim": "0.1.98"}
    row = next(line for line in pb.markdown({"meta": meta, "rows": rows}).splitlines()
               if line.startswith("| efficientnet_dynamo | 6.00"))
    assert "1.050x (0.95-1.15) / 1.060x (0.96-1.16) (the default cost's program) |" in row



def test_head_to_head_takes_the_best_peer_per_thread_count_from_the_same_rounds():
    timings = {1: {"export": [10.0, 10.0, 10.0], "ort0": [9.0, 9.0, 9.0], "slim": [8.0, 8.0, 8.0],
                   "einsat_cpu": [8.0, 4.0, 16.0]},
               2: {"export": [10.0] * 3, "ort0": [5.0, 5.0, 5.0], "slim": [9.0] * 3, "einsat_cpu": [4.0, 5.0, 10.0]}}
    files = dict.fromkeys(timings[1])
    peers = {k: {str(t): pb.ratio_stats(timings[t]["export"], timings[t][k]) for t in (1, 2)} for k in ("ort0", "slim")}
    vs = pb.head_to_head(files, timings, peers)
    assert vs["1"]["peer"] == "slim" and vs["1"]["ratio"] == 1.0       # 8/8, 8/4, 8/16: median 1
    assert vs["2"]["peer"] == "ort0" and vs["2"]["ratio"] == 1.0       # 5/4, 5/5, 5/10
    assert vs["2"]["p90"] == pytest.approx(1.2) and vs["2"]["p10"] == pytest.approx(0.6)
    assert pb.head_to_head({"export": None}, timings, peers) == {}     # einsat cpu wrote nothing


def test_the_peer_summary_sorts_rows_by_the_bar():
    def row(name, ratio, p90, one=1.0):
        return {"name": name, "vs_best_peer": {"2": {"ratio": ratio, "p10": ratio - 0.1, "p90": p90, "peer": "ort1"}},
                "tools": {"einsat_cpu": {"timing": _timing(one, 1.0)}}}
    lines = pb.peer_summary([row("a", 1.02, 1.2), row("b", 0.97, 1.05, one=0.95), row("c", 0.9, 0.95)])
    text = "\n".join(lines)
    assert "(median >= 1.00x): 1;" in text
    assert "90th percentile >= 1.00x): 1: b 0.970x (0.87-1.05, ort1);" in text
    assert "(90th percentile < 1.00x): 1: c 0.900x (0.80-0.95, ort1)." in text
    assert "below 0.98x its export: 1: b 0.950x." in text
    assert pb.peer_summary([{"name": "x", "tools": {}}]) == []


def test_a_file_that_is_the_export_byte_for_byte_is_not_timed(tmp_path, monkeypatch):
    """einsat writing the given file unchanged gives the export's own rounds: 1.000x exactly, and
    its head-to-head against a peer is the export's against it; the other files are timed."""
    export = tmp_path / "m.onnx"
    export.write_bytes(b"model")

    def make(out, data):
        out.write_bytes(data)
        return {}
    timed = []

    def time_files(files, inputs, threads, reps):
        timed.append(sorted(files))
        return {k: [10.0, 10.0, 10.0] if k == "export" else [8.0, 8.0, 8.0] for k in files}
    monkeypatch.setattr(pb, "prepare", lambda src, kind, work: export)
    monkeypatch.setattr(pb.onnx, "load", lambda *a, **k: _model(["Relu"]))
    monkeypatch.setattr(pb, "feeds", lambda model: {})
    monkeypatch.setattr(pb, "run_outputs", lambda path, inputs: {"y": np.zeros(1)})
    monkeypatch.setattr(pb, "run_ort_optimizer", lambda src, out, t, level: make(out, b"ort"))
    monkeypatch.setattr(pb, "run_slim", lambda src, out: make(out, b"slim"))
    monkeypatch.setattr(pb, "run_einsat", lambda src, out, cost, *a: make(out, b"model" if cost else b"mine"))
    monkeypatch.setattr(pb, "time_files", time_files)
    row = pb.bench_model("m", export, "export", tmp_path, 1.0, 3, (1,))
    assert timed == [["einsat_default", "export", "ort1", "slim"]] * 2  # einsat cpu's file is the export
    cpu = row["tools"]["einsat_cpu"]
    assert cpu["same_as_export"] and cpu["timing"]["2"]["ratio"] == 1.0 and cpu["timing"]["2"]["p90"] == 1.0
    assert row["tools"]["einsat_default"]["timing"]["2"]["ratio"] == 1.25 and "same_as_export" not in \
        row["tools"]["einsat_default"]
    assert row["vs_best_peer"]["2"]["ratio"] == 0.8  # the peer's 8 against the export's 10
