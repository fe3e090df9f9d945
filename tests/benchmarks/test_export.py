"""`python -m benchmarks.export`: workloads to ONNX files that onnxruntime runs."""

import onnx
import onnxruntime as ort
import pytest

import einsat
from benchmarks.export import main, parse_overrides
from benchmarks.workloads import build
from einsat.runtime import random_inputs
from tests.benchmarks.common import assert_close_scaled


def test_export_writes_models_with_overrides_that_run_like_einsat(tmp_path):
    assert main(["longformer", "einnet_g2bmm", "--out", str(tmp_path), "--set", "seq=96",
                 "--set", "width=5"]) == 0
    for name in ("longformer", "einnet_g2bmm"):
        model = onnx.load(str(tmp_path / f"{name}.onnx"))
        onnx.checker.check_model(model, full_check=True)
        g = build(name, seq=96, width=5)
        assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == \
            list(g.types[g.inputs[0]].shape)
        x = random_inputs(g)
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
        want = einsat.run(g, x)
        for o, value in zip(g.outputs, got):
            assert_close_scaled(value, want[o], what=f"{name}/{o}")


def test_batch_option_sets_the_batch_dim(tmp_path):
    assert main(["pet_conv", "--batch", "3", "--out", str(tmp_path)]) == 0
    model = onnx.load(str(tmp_path / "pet_conv.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3


def test_unknown_names_and_bad_overrides_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["resnet181", "--out", str(tmp_path)])
    assert "resnet181" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    with pytest.raises(SystemExit, match="key=value"):
        parse_overrides(["seq"])
    assert parse_overrides(["seq=96", "blocks=(1, 1)", "mode=fast"]) == {"seq": 96, "blocks": (1, 1), "mode": "fast"}
