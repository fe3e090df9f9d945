"""Buffers made by NumPy's constructors inside a traced function, and what they become in ONNX
and after optimization (issue 16: `np.zeros((n, 2048))` failed, its slice write exported a
[1024, 2048] int64 index table, and the optimizer stored the zero buffer as an 8.4 MB weight)."""

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import einsat
from einsat.errors import FrontendError
from einsat.ir import Op
from einsat.ir.onnx.export import to_onnx
from tests.frontend.oracle import check


def zeros_buffer(x):
    out = np.zeros((x.shape[0], 2 * x.shape[1]), np.float32)
    out[:, :x.shape[1]] = np.tanh(x)
    return out


def every_constructor(x):
    a = np.ones(x.shape, dtype=x.dtype) * x
    b = np.full((x.shape[0], 3), 2.5, x.dtype)
    c = np.empty(4, np.float32)
    c[...] = 1.0
    d = np.zeros(3)  # float64, as in NumPy
    d[1] = 7
    return a, b, c, d


def scalar_shape(x):
    z = np.zeros(x.shape[1], x.dtype)
    z[0] = x[0, 0]
    return z


X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


@pytest.mark.parametrize("fn", [zeros_buffer, every_constructor, scalar_shape])
def test_numpy_constructors_make_traced_buffers(fn):
    check(fn, X)


def test_numpy_constructors_are_numpy_again_after_tracing():
    einsat.functionalize(zeros_buffer, (X,))
    assert type(np.zeros(2)) is np.ndarray and type(np.full(2, 1.0)) is np.ndarray


def test_a_traced_fill_value_is_a_clear_error():
    def traced_fill(x):
        return np.full((2, 2), x[0, 0])  # error here
    with pytest.raises(FrontendError, match=r"test_creation.py:\d+ in traced_fill: .*traced fill value"):
        einsat.functionalize(traced_fill, (X,))


def model_bytes(graph) -> int:
    buffer = io.BytesIO()
    buffer.write(to_onnx(graph).SerializeToString())
    return buffer.tell()


def test_the_issue_kernel_exports_small_and_runs_on_onnxruntime():
    x = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    g = einsat.functionalize(zeros_buffer, (x,))
    model = to_onnx(g)
    assert model_bytes(g) < 10_000  # was 33.6 MB
    ops = [n.op_type for n in model.graph.node]
    assert "ScatterND" not in ops and "ConstantOfShape" in ops
    onnx.checker.check_model(model, full_check=True)
    (got,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got, zeros_buffer(x), rtol=1e-6, atol=1e-6)


def test_optimize_keeps_the_zero_buffer_a_broadcast_not_a_weight():
    x = np.random.default_rng(2).standard_normal((1024, 1024)).astype(np.float32)
    result = einsat.optimize(zeros_buffer, (x,), limits=einsat.Limits(extract_s=1))
    assert sum(w.nbytes for w in result.graph.weights.values()) < 1024  # was 8.4 MB
    assert Op.EXPAND in {n.op for n in result.graph.nodes}
    assert model_bytes(result.graph) < 10_000


def test_constant_of_shape_round_trips_as_a_broadcast(tmp_path):
    x = np.random.default_rng(3).standard_normal((128, 256)).astype(np.float32)
    g = einsat.functionalize(zeros_buffer, (x,))
    einsat.save_onnx(g, tmp_path / "k.onnx")
    back = einsat.load_onnx(tmp_path / "k.onnx")  # the buffer's slices fold at import: still broadcasts
    assert sum(w.size for w in back.weights.values()) <= 2
    assert Op.EXPAND in {n.op for n in back.nodes}
    np.testing.assert_array_equal(einsat.run(back, {"x": x})["out"], zeros_buffer(x))


def test_numpy_functions_run_eagerly_on_buffers_not_written_yet():
    def masked(x):
        mask = np.triu(np.ones((x.shape[0], x.shape[0]), dtype=bool), 1)  # np.triu is not traced
        assert type(mask) is np.ndarray
        return np.where(mask, -1e9, x @ x.T)
    check(masked, X)


def test_a_written_buffer_is_no_longer_known():
    def written(x):
        buf = np.zeros((3, 3), np.float32)
        buf[0] = x[0, :3]
        return np.triu(buf)  # error here
    with pytest.raises(FrontendError, match="np.triu is not supported"):
        einsat.functionalize(written, (X,))
