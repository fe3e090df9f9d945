"""`einsat optimize`'s big-model options: partition, piece size, workers, executor, reuse."""

import pytest

import einsat
from einsat.cli import main, parser
from einsat.cli.optimize import _partitioning
from einsat.partition import Partitioning
from tests.partition.common import assert_same_function, stacked


def settings(*flags):
    return _partitioning(parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", *flags]))


def test_flags_make_the_partitioning():
    assert settings() is None and settings("--no-partition") is False
    assert settings("--parallel", "1") == Partitioning(workers=1, executor="serial")
    assert settings("--parallel", "3", "--piece-nodes", "40", "--partition-above", "0", "--no-reuse") == \
        Partitioning(workers=3, piece_nodes=40, above=0, reuse=False)
    assert settings("--executor", "ray", "--ray-address", "ray://head:10001") == \
        Partitioning(executor="ray", address="ray://head:10001")


@pytest.mark.parametrize("flags", [("--parallel", "0"), ("--piece-nodes", "0"), ("--partition-above", "-1")])
def test_bad_values_are_clear_errors(flags):
    with pytest.raises(einsat.EinsatError, match=flags[0]):
        settings(*flags)


def test_a_model_partitioned_from_the_command_line(tmp_path, capsys):
    graph = stacked(layers=3, softmax=True)
    einsat.save_onnx(graph, tmp_path / "stack.onnx")
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "stack.onnx"), "-o", str(out), "--partition-above", "0",
                 "--parallel", "1", "--nodes", "6000", "--quiet", "--report", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "3 pieces (1 optimized, 2 reused), serial" in text and "verification: proved" in text
    import json
    data = json.loads((tmp_path / "r.json").read_text())
    assert [p["template"] for p in data["partition"]["pieces"]] == [0, 0, 0]
    assert_same_function(einsat.load_onnx(tmp_path / "stack.onnx"), einsat.load_onnx(out))
