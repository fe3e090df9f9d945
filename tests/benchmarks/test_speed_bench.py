"""benchmarks/speed_bench.py's pieces: which stops count as ending by work, the table, the shapes
it gives the bundled models (#39 item 1). The bench itself runs minutes per model: not here."""

from __future__ import annotations

from benchmarks.speed_bench import BUNDLED, PAST, TEXT, WORKLOAD, bundled_shapes, by_work, models, table


def row(sat="saturated", ext="optimal", pieces=None):
    r = {"nodes": 10, "load_s": 0.1, "wall_s": 2.0, "phases": {"saturate": 1.0, "extract": 0.5},
         "saturation": {"enodes": 99, "stop": sat}, "extraction": {"method": "ilp", "status": ext, "seconds": 0.5},
         "speedup_modeled": 1.25}
    if pieces is not None:
        r["partition"] = {"pieces": 3, "optimized": 2, "reused": 1, "piece_stops": pieces}
    r["by_work"] = by_work(r)
    return r


def test_a_clock_anywhere_is_not_an_end_by_work():
    assert by_work(row())
    assert by_work(row(sat="node_limit", ext="stopped improving"))
    assert by_work(row(ext="stopped: LP bound weak, start kept"))  # the weak-LP stop is a work bound
    assert not by_work(row(sat="time_limit"))
    assert not by_work(row(ext="time limit, start kept"))
    assert not by_work(row(pieces=["saturated", "time limit"]))
    assert by_work(row(pieces=["saturated", "iteration_limit"]))


def test_the_table_has_a_row_per_model_and_says_no_for_a_clock():
    text = table({"a": row(), "b": row(sat="time_limit"), "c": {"error": "boom", "wall_s": 3.0}})
    lines = text.splitlines()
    assert len(lines) == 5 and all(line.count("|") == lines[0].count("|") for line in lines)
    assert "| a | 10 |" in lines[2] and lines[2].endswith("| yes | 1.25x |")
    assert "**no**" in lines[3] and "error: boom" in lines[4]


def test_bundled_models_get_one_size_per_symbol():
    decode = bundled_shapes(BUNDLED / "hf_llama_decode_dynamo.onnx")
    assert decode["input_ids"] == (1, 1) and decode["attention_mask"] == (1, PAST + 1)
    assert decode["past_key_values.1.value"] == (1, 2, PAST, 16)
    assert bundled_shapes(BUNDLED / "hf_gpt2.onnx") == {"input_ids": TEXT, "attention_mask": TEXT}
    assert bundled_shapes(BUNDLED / "hf_vit_b16.onnx") == {"pixel_values": (1, 3, 224, 224)}
    assert bundled_shapes(BUNDLED / "resnet18.onnx") == {}  # static: its own shapes


def test_a_registered_workload_is_a_model_of_the_bench():
    found = models([], ["llama_stack"])
    assert found["workload/llama_stack"] == (WORKLOAD + "llama_stack", {})
    assert "resnet18" in found  # the bundled ones are still there


def test_an_extra_folder_gives_its_static_models_only(tmp_path):
    """`--extra DIR`: the peers cache also holds the dynamic bench's symbolic exports, which a
    default run refuses (they need sizes): they are not rows of this bench."""
    import onnx
    from onnx import TensorProto, helper

    def save(name, dims):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name, [x], [y])
        onnx.save(helper.make_model(graph), str(tmp_path / f"{name}.onnx"))

    save("fixed", [1, 4])
    save("symbolic", ["batch", 4])
    found = models([tmp_path])
    assert f"{tmp_path.name}/fixed" in found and f"{tmp_path.name}/symbolic" not in found
