"""`einsat optimize --opset N`: the written file keeps to opset N's ops and still runs (#37)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import defs

import einsat
from einsat.cli import main
from tests.ir.onnx_check import ort_run


def small_bert(path):
    """One BERT layer (layernorm, attention chain, GELU feed-forward) on [1, 16, 32]."""
    from benchmarks.workloads.transformer import bert

    graph = bert(batch=1, seq=16, hidden=32, heads=2, layers=1, ffn=64)
    einsat.save_onnx(graph, path)
    return graph


def _declared(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@pytest.mark.slow  # ~5 s: a search over a BERT layer
def test_opset_17_writes_only_opset_17_ops_and_the_file_runs(tmp_path, capsys):
    graph = small_bert(tmp_path / "bert.onnx")
    out = tmp_path / "bert17.onnx"
    assert main(["optimize", str(tmp_path / "bert.onnx"), "-o", str(out), "--opset", "17", "--cost", "h200",
                 "--iterations", "2", "--budget", "120", "-q"]) == 0
    model = onnx.load(out)
    assert _declared(model) <= 17
    onnx.checker.check_model(model, full_check=True)  # every node against its opset-17 schema
    for node in model.graph.node:
        assert node.domain in ("", "ai.onnx")
        assert defs.get_schema(node.op_type, 17, "").since_version <= 17
    assert "Gelu" not in {n.op_type for n in model.graph.node}  # 20's: its chain under 17
    x = np.random.default_rng(0).standard_normal((1, 16, 32)).astype(np.float32)
    want = einsat.run(graph, {"x": x})[graph.outputs[0]]
    (got,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", ["12", "27"])
def test_opsets_einsat_does_not_write_are_refused_before_any_work(tmp_path, capsys, opset):
    small_bert(tmp_path / "bert.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(tmp_path / "bert.onnx"), "-o", str(out), "--opset", opset]) != 0
    assert "opsets 13 to 26" in capsys.readouterr().err
    assert not out.exists()


def test_optimize_keyword_caps_what_result_save_writes(tmp_path):
    from einsat.ir import GraphBuilder

    b = GraphBuilder("g")
    g = b.build(b.op(einsat.Op.GELU, b.input("x", (2, 8))))
    result = einsat.optimize(g, cost="h200", opset=17, budget=30)
    assert result.opset == 17
    result.save(tmp_path / "g.onnx")
    model = onnx.load(tmp_path / "g.onnx")
    assert _declared(model) <= 17 and "Gelu" not in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run(model, {"x": x})[0], einsat.run(g, {"x": x})[g.outputs[0]],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(einsat.EinsatError, match="opsets 13 to 26"):
        einsat.optimize(g, opset=12)
