"""`einsat fuzz`, called as `einsat.cli.main([...])` with captured output."""

from __future__ import annotations

import time

import pytest

from einsat.cli import main
from einsat.ir import Node, Op
from einsat.testing import fuzz as fuzz_module


@pytest.mark.slow
def test_fuzz_budget_200_passes(capsys):
    t0 = time.perf_counter()
    assert main(["fuzz", "--budget", "200"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "all passed" in out and "budget 200" in out
    assert "fuzz" in captured.err and "case 1 of" in captured.err  # progress on stderr
    for target in ("onnx", "verify"):
        assert f"{target}: " in out
    if callable(getattr(__import__("einsat"), "optimize", None)):
        assert "optimize: " in out and "fusion: " in out  # element-wise/reduction chains, fused
    print(f"einsat fuzz --budget 200: {time.perf_counter() - t0:.1f} s")


def test_a_failure_prints_builder_code_and_exits_1(capsys, monkeypatch):
    def leaky_relu(g):  # unsound: relu becomes leaky_relu
        nodes = [Node(Op.LEAKY_RELU, n.inputs, n.outputs, {"alpha": 0.5}, n.name) if n.op is Op.RELU else n
                 for n in g.nodes]
        return g.replace(nodes=nodes)

    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    fuzz_module.register_transform("leaky", leaky_relu)
    assert main(["fuzz", "--budget", "50", "--seed", "1", "--target", "leaky"]) == 1
    out = capsys.readouterr().out
    assert "FAILED leaky" in out and "NOT equivalent" in out
    assert "b = GraphBuilder(" in out and ".relu(" in out and "graph = b.build(" in out


def test_bad_arguments(capsys):
    assert main(["fuzz", "--budget", "0"]) == 2
    assert main(["fuzz", "--budget", "3", "--target", "nope"]) == 2
    assert "unknown fuzz target" in capsys.readouterr().err


def test_a_scalar_weight_inlined_into_an_eop_and_kept_as_a_weight_is_judged_numerically():
    """`einsat fuzz --budget 2000 --seed 9`: (x + w) * (x + w) optimized into add(w, x) feeding an eop
    that also reads w as the literal -1.43...; over the field the weight is a variable and the
    literal is not, so only the numeric verdict may judge the pair (it passes)."""
    import numpy as np

    import einsat
    from einsat import GraphBuilder

    b = GraphBuilder("random")
    x0 = b.input("x0", (1, 1, 1, 1), np.float32)
    w3 = b.weight("w3", np.array([-1.4308730363845825], dtype=np.float32).reshape((1, 1, 1)))
    add4 = b.add(b.unsqueeze(x0, axes=(0,)), w3)
    graph = b.build(b.mul(add4, add4))
    fuzz_module.available_targets(einsat.optimize)
    assert fuzz_module.TARGETS["optimize"].check(graph) is None


@pytest.mark.slow  # a failure found, then shrunk: ~5 s
def test_a_wrong_written_onnx_fails_the_run_with_its_case_printed(capsys, monkeypatch):
    """#37 item 5: every case's written ONNX runs on onnxruntime against NumPy's run of the input;
    an exporter writing b - a for a - b fails the run like any other failure."""
    from einsat.testing.strategies import programs

    real = fuzz_module.to_onnx

    def wrong(graph, *args, **kwargs):
        model = real(graph, *args, **kwargs)
        for node in model.graph.node:
            if node.op_type == "Sub":
                node.input[0], node.input[1] = node.input[1], node.input[0]
        return model

    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    fuzz_module.register_transform("same", lambda g: g, strategy=lambda: programs(ops=[Op.SUB, Op.ADD], max_nodes=3))
    monkeypatch.setattr(fuzz_module, "to_onnx", wrong)
    assert main(["fuzz", "--budget", "30", "--target", "same"]) == 1
    out = capsys.readouterr().out
    assert "FAILED same: the written ONNX on onnxruntime differs from NumPy's run of the input" in out
    assert ".sub(" in out and "graph = b.build(" in out
