import pytest

from einsat.cli import main


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
