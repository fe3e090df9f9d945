"""rmsnorm: NumPy semantics, its export as ONNX RMSNormalization (opset 23) and as the minimal chain
(older opsets), both run on onnxruntime against NumPy, and its import from RMSNormalization."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.testing.strategies import arrays, broadcastable, seeds, shapes
from tests.ir.onnx_check import ort_run

VIEWS = {"Reshape", "Expand", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Flatten"}


def _graph(x, scale, axis, eps=1e-5):
    b = GraphBuilder("rms")
    xi = b.input("x", x.shape, x.dtype)
    y = b.rmsnorm(xi, b.weight("scale", scale), axis=axis, epsilon=eps)
    return b.build(y)


def _reference(x, scale, axis, eps):
    """float64 arithmetic on the same values."""
    x64 = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    return x64 / np.sqrt((x64 * x64).mean(axis=axes, keepdims=True) + np.float32(eps)) * scale.astype(np.float64)


@settings(max_examples=25, deadline=None)
@given(shapes(1, 4, 1, 6), st.data(), seeds, st.sampled_from([1e-5, 1e-6, 0.5]))
def test_numpy_semantics_match_the_formula(shape, data, seed, eps):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    scale_shape = data.draw(broadcastable(shape[axis % len(shape):]))
    x, scale = arrays(seed, shape, scale_shape)
    g = _graph(x, scale, axis, eps)
    assert g.nodes[0].attrs["axis"] == axis % len(shape)
    got = einsat.run(g, {"x": x})[g.outputs[0]]
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, _reference(x, scale, axis, eps), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("opset, written", [(23, ["RMSNormalization"]),
                                            (18, ["Mul", "ReduceMean", "Add", "Sqrt", "Div", "Mul"]),
                                            (21, ["Mul", "ReduceMean", "Add", "Sqrt", "Div", "Mul"])])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(max_examples=8, deadline=None)
@given(shape=shapes(1, 4, 1, 6), data=st.data(), seed=seeds)
def test_export_runs_on_onnxruntime_and_matches_numpy(opset, written, dtype, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    scale_shape = data.draw(broadcastable(shape[axis % len(shape):]))
    x, scale = (a.astype(dtype) for a in arrays(seed, shape, scale_shape))
    g = _graph(x, scale, axis)
    model = to_onnx(g, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node] == written
    (theirs,) = ort_run(model, {"x": x})
    ours = einsat.run(g, {"x": x})[g.outputs[0]]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(theirs, ours, rtol=tol, atol=tol)


@pytest.mark.parametrize("half", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("opset", [18, 23])
def test_a_half_input_computes_its_statistics_in_float32(half, opset):
    """Squares of 300 in float16 overflow (65504 is its largest value): in float32 they do not."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 40)) * 300).astype(half)
    scale = rng.standard_normal(40).astype(half)
    g = _graph(x, scale, -1)
    ours = einsat.run(g, {"x": x})[g.outputs[0]]
    assert ours.dtype == np.dtype(half) and np.isfinite(ours.astype(np.float32)).all()
    want = _reference(x, scale, -1, 1e-5)
    ulp = 2.0 ** -10 if half == np.float16 else 2.0 ** -7
    np.testing.assert_allclose(ours.astype(np.float64), want, rtol=2 * ulp, atol=2 * ulp)
    if half == np.float16:  # onnxruntime's CPU RMSNormalization and chain take float16 (not bfloat16)
        model = to_onnx(g, opset=opset)
        assert not VIEWS & {n.op_type for n in model.graph.node}
        (theirs,) = ort_run(model, {"x": x})
        np.testing.assert_allclose(theirs.astype(np.float64), want, rtol=2 * ulp, atol=2 * ulp)


def test_rmsnormalization_imports_as_rmsnorm_and_writes_back():
    scale = np.linspace(0.5, 1.5, 6).astype(np.float32)
    graph = helper.make_graph([helper.make_node("RMSNormalization", ["x", "scale"], ["n"], axis=-1, epsilon=1e-6),
                               helper.make_node("Relu", ["n"], ["y"])], "rms",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
                              initializer=[numpy_helper.from_array(scale, "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    g = einsat.load_onnx(model)
    assert [n.op for n in g.nodes] == [Op.RMSNORM, Op.RELU]
    assert g.nodes[0].attrs == {"axis": 1, "epsilon": float(np.float32(1e-6))}
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    want = np.maximum(_reference(x, scale, -1, 1e-6), 0)
    np.testing.assert_allclose(einsat.run(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    (theirs,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(theirs, want, rtol=1e-5, atol=1e-6)
    back = to_onnx(g, opset=23)
    assert [n.op_type for n in back.graph.node] == ["RMSNormalization", "Relu"]


def test_shape_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"scale \[3\] f32 .* normalized dims \[4\]"):
        b.rmsnorm(x, b.input("v3", (3,)))
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3"):
        b.rmsnorm(x, b.input("v4", (4,)), axis=3)
