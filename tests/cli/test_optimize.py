import pytest

from einsat.cli import main, parser
from einsat.extract.models import COST_MODELS, DEFAULT_COST


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "out.onnx")]) == 2
    assert "nope.onnx: no such file" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()


def test_refuses_to_overwrite_the_input(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    assert main(["optimize", str(model), "-o", str(model)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert model.read_bytes() == b"not a model"


def test_unreadable_model_leaves_no_output(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    assert main(["optimize", str(model), "-o", str(tmp_path / "out.onnx"), "--quiet"]) == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()


def test_extractor_choices_are_checked(tmp_path):
    with pytest.raises(SystemExit):
        main(["optimize", "m.onnx", "-o", "o.onnx", "--extractor", "anneal"])


def test_cost_names_the_cost_model_and_device_is_its_old_name(tmp_path, capsys):
    args = parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx"])
    assert args.cost == DEFAULT_COST
    assert parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", "--cost", "h100-tf32"]).cost == "h100-tf32"
    assert parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", "--device", "h200"]).cost == "h200"
    assert "--device is deprecated; use --cost" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    assert "--cost NAME" in (shown := capsys.readouterr().out) and "--device" not in shown
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "o.onnx"), "--cost", "a100"]) == 2
    err = capsys.readouterr().err
    assert "unknown cost model 'a100'" in err and all(name in err for name in COST_MODELS)
    assert not (tmp_path / "o.onnx").exists()


def small_model(path):
    import einsat
    from benchmarks.workloads.layers import Net
    from benchmarks.workloads.resnet import basic_block
    net = Net("block")
    x = net.b.input("x", (1, 8, 10, 10))
    graph = net.build(basic_block(net, x, 8, 1))
    einsat.save_onnx(graph, path)
    return graph


def test_optimize_writes_a_verified_model_and_prints_a_summary(tmp_path, capsys):
    import numpy as np

    import einsat
    small_model(tmp_path / "block.onnx")
    out = tmp_path / "fast.onnx"
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(out), "--cost", "h200",
                 "--time-limit", "6"]) == 0
    captured = capsys.readouterr()
    assert "modeled cost (h200, µs)" in captured.out and "verification: passed" in captured.out
    assert f"wrote {out}" in captured.out
    assert "saturate" in captured.err and "extract" in captured.err and "\r" not in captured.err
    before, after = einsat.load_onnx(tmp_path / "block.onnx"), einsat.load_onnx(out)
    # fused convs export as standard ONNX (Conv, Add, Relu); the batchnorms are folded away
    assert "batchnorm" in before.op_counts() and "batchnorm" not in after.op_counts()
    x = np.random.default_rng(0).standard_normal((1, 8, 10, 10)).astype(np.float32)
    want, got = einsat.run(before, {"x": x}), einsat.run(after, {"x": x})
    for name in before.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_a_failed_verification_writes_nothing(tmp_path, capsys, monkeypatch):
    import importlib

    from einsat.egraph.data import EClass, EGraphData, ENode
    from einsat.ir import Op
    from einsat.optimize_report import SaturationSummary
    graph = small_model(tmp_path / "block.onnx")
    name = graph.outputs[0]
    t = graph.types[name]
    broken = EGraphData({0: EClass(0, [ENode(None, leaf=("input", "x"))], t),
                         1: EClass(1, [ENode(Op.RELU, (0,))], t)}, [1], [name], {"x": t}, {})
    monkeypatch.setattr(importlib.import_module("einsat.optimize"), "_saturate",
                        lambda *args: (broken, SaturationSummary(2, 2, "saturated")))
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(out), "--cost", "h100", "--quiet"]) == 2
    assert "differs from" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "block.onnx"]
