"""Half programs as ONNX (#30): valid at the opset their types need, run by onnxruntime where
its CPU kernels exist (fp16) and by `onnx.reference` where they do not (bf16), within the
precision's bound of the fp32 input; and the CLI's --precision / --half-io."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import einsat
from einsat.cli import main
from einsat.ir.onnx.export import to_onnx
from einsat.ir.onnx.opset import types_opset
from einsat.ir.onnx.weights import fill_random_weights
from einsat.ir.precision import HALF_DTYPES, convert, unit_roundoff
from einsat.verify.precision import KAPPA, check_conversion, depths
from tests.ir.test_precision import block

RESNET18 = Path(einsat.__file__).parent / "data" / "resnet18.onnx"


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    return float(np.max(np.abs(got - expected) / (np.abs(expected) + np.abs(expected).max())))


def run_onnx(model: onnx.ModelProto, feeds: dict, precision: str) -> np.ndarray:
    if precision == "fp16":
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)[0]
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.fixture(scope="module")
def resnet18():
    return einsat.load_onnx(fill_random_weights(onnx.load(RESNET18), seed=0))


@pytest.mark.parametrize("precision, opset", [("fp16", 18), ("bf16", 22)])
def test_converted_resnet18_is_valid_onnx_and_runs_within_the_bound(resnet18, precision, opset):
    half = convert(resnet18, precision)
    model = to_onnx(half)
    # bf16 Conv needs 22; fp16 needs what fp32 needs: 18, for ReduceMean's axes input
    assert model.opset_import[0].version == opset
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    expected = einsat.run(resnet18, {"input": x})["logits"]
    depth = depths(half, {n for n in half.weights if half.types[n].dtype != np.float32})["logits"]
    bound = KAPPA * unit_roundoff(HALF_DTYPES[precision]) * np.sqrt(depth)
    got = run_onnx(model, {"input": x}, precision)
    assert got.dtype == np.float32
    assert relative_error(got, expected) <= bound
    assert relative_error(got, expected) > 0  # it did compute in half


def test_types_opset_is_the_models_own_when_its_types_need_nothing_newer(resnet18):
    model = to_onnx(resnet18)
    assert types_opset(model) == model.opset_import[0].version == 18  # ReduceMean's axes input


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cli_precision_writes_a_half_model_that_runs_within_the_bound(tmp_path, capsys, precision):
    g = block()
    src = tmp_path / "block.onnx"
    einsat.save_onnx(g, src)
    out = tmp_path / f"block_{precision}.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--precision", precision, "--budget", "30",
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"precision: {precision} conversion within its bound" in printed
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(3).standard_normal((1, 16, 32)).astype(np.float32)
    expected = einsat.run(g, {"x": x})["y"]
    bound = check_conversion(g, convert(g, precision), precision, inputs={"x": x}).outputs[0].bound
    assert relative_error(run_onnx(model, {"x": x}, precision), expected) <= 2 * bound
    # the matrices are stored in half (the layernorm's scale and shift, read by an fp32 op, stay fp32)
    matrices = {t.data_type for t in model.graph.initializer if np.prod(t.dims) >= 32 * 32}
    assert matrices == {onnx.TensorProto.FLOAT16 if precision == "fp16" else onnx.TensorProto.BFLOAT16}


def test_cli_half_io_makes_the_interface_half(tmp_path, capsys):
    src = tmp_path / "block.onnx"
    einsat.save_onnx(block(), src)
    out = tmp_path / "half_io.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--precision", "fp16", "--half-io", "--budget", "30",
                 "--quiet"]) == 0
    model = onnx.load(out)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_cli_half_io_needs_a_half_precision(tmp_path, capsys):
    src = tmp_path / "block.onnx"
    einsat.save_onnx(block(), src)
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--half-io"]) == 2
    assert "--half-io needs --precision bf16 or fp16" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


def test_an_unknown_precision_is_a_clear_error():
    with pytest.raises(einsat.EinsatError, match="unknown precision 'int8'"):
        einsat.optimize(block(), precision="int8")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_half_model_imports_and_optimizes_as_it_is(tmp_path, precision):
    """A model already in half (its casts included) is not converted again: its types stay, and
    the result is checked against it by the numeric verification."""
    half = convert(block(), precision, half_io=True)
    path = tmp_path / "half.onnx"
    einsat.save_onnx(half, path)
    loaded = einsat.load_onnx(path)
    assert loaded.input_types() == half.input_types() and loaded.output_types() == half.output_types()
    assert sum(n.op.value == "cast" for n in loaded.nodes) == sum(n.op.value == "cast" for n in half.nodes)
    result = einsat.optimize(loaded, precision=precision, budget=20, partition=False)
    assert result.report.precision is None  # nothing converted
    assert result.graph.input_types() == half.input_types() and result.report.verification.status == "proved"
