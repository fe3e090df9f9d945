"""A half-precision run's report shows the user's fp32 program beside the converted one (#41)."""

from __future__ import annotations

import numpy as np
import pytest

import einsat
from einsat.cost.models import cost_model
from einsat.ir import GraphBuilder
from einsat.pipeline.report import Report
from tests.work_bounded import BY_WORK, ended_by_work


def _block() -> einsat.Graph:
    rng = np.random.default_rng(0)
    b = GraphBuilder("block")
    x = b.input("x", (64, 128))
    h = b.relu(b.matmul(x, b.weight("w1", rng.standard_normal((128, 256)).astype(np.float32) / 16)))
    return b.build(b.matmul(h, b.weight("w2", rng.standard_normal((256, 128)).astype(np.float32) / 16)))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_report_shows_the_fp32_input_beside_the_converted_program(precision):
    g = _block()
    result = einsat.optimize(g, cost="h100-roofline", precision=precision, **BY_WORK)
    ended_by_work(result.report)
    report = result.report
    assert report.cost_fp32 == pytest.approx(cost_model("h100-roofline").graph_cost(g))
    assert report.cost_fp32 != pytest.approx(report.cost_before)  # the table's input is the conversion
    text = str(report)
    assert "input (converted)" in text
    (line,) = [ln for ln in text.splitlines() if "against the fp32 input" in ln]
    assert f"{report.cost_fp32 / report.cost_after:.3f}x" in line
    assert report.to_dict()["cost_fp32"] == pytest.approx(report.cost_fp32)


def test_a_half_program_modeled_slower_than_fp32_says_so():
    report = Report(name="p", model="m", unit="µs", cost_before=12.0, cost_after=11.0, ops_before={}, ops_after={},
                    saturation=None, extraction=None, verification=None, times={}, cost_fp32=10.0)
    (line,) = report.fp32_lines()
    assert "0.909x" in line and "SLOWER than the fp32 one" in line
    assert Report(name="p", model="m", unit="µs", cost_before=12.0, cost_after=11.0, ops_before={}, ops_after={},
                  saturation=None, extraction=None, verification=None, times={}).fp32_lines() == []


def _conv() -> einsat.Graph:
    from tests.ir.test_onnx_opsets import _conv_model
    return _conv_model()


def test_bf16_for_the_cpu_target_is_refused_before_the_search(tmp_path, monkeypatch):
    """onnxruntime's CPU provider has no bfloat16 Conv: a bf16 program for cost="cpu" would be written for a
    target that cannot run it. It is refused up front, naming the op; fp16, which it runs, goes on."""
    from einsat.errors import EinsatError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a profile cache of its own
    events = []
    with pytest.raises(EinsatError, match=r"precision 'bf16' with cost 'cpu'.*cannot run.*Conv\(22\)") as e:
        einsat.optimize(_conv(), cost="cpu", precision="bf16", progress=events.append, **BY_WORK)
    assert "Traceback" not in str(e.value)
    assert "saturate" not in {ev.phase for ev in events}  # no search ran (a run that searches reports it)


def test_the_cli_refuses_bf16_for_the_cpu_target_in_one_line(tmp_path, capsys, monkeypatch):
    from einsat.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    einsat.save_onnx(_conv(), tmp_path / "conv.onnx")
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(tmp_path / "conv.onnx"), "-o", str(out), "--cost", "cpu", "--precision", "bf16",
                 "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("einsat: error: ") and "Conv(22)" in err[0], err
    assert not out.exists()


def test_tf32_chooses_the_gpus_tf32_model_or_is_refused():
    """precision="tf32" changed nothing and said nothing: it now models the GPU's TF32 matrix products
    (the program written stays fp32) and is refused for a target without them."""
    from einsat.cost.model import RooflineCost
    from einsat.errors import EinsatError

    g = _block()
    result = einsat.optimize(g, cost="h100", precision="tf32", **BY_WORK)
    assert result.report.model == "h100-tf32" and "h100-tf32" in str(result.report)
    assert result.report.cost_before == pytest.approx(cost_model("h100-tf32").graph_cost(g))
    assert result.report.cost_before < cost_model("h100-roofline").graph_cost(g)  # tensor cores: cheaper
    assert {result.graph.types[v].dtype for v in result.graph.outputs} == {np.dtype(np.float32)}
    with pytest.raises(EinsatError, match=r"precision 'tf32'.*cost 'cpu' has no TF32"):
        einsat.optimize(g, cost="cpu", precision="tf32")
    with pytest.raises(EinsatError, match=r"tf32=True"):
        einsat.optimize(g, cost=RooflineCost("h100"), precision="tf32")
    assert einsat.optimize(g, cost=RooflineCost("h100", tf32=True), precision="tf32", **BY_WORK).report.verified
