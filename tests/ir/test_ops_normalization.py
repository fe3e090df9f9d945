"""batchnorm, layernorm, softmax: NumPy semantics against onnxruntime, shapes, import forms."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.testing.strategies import arrays, broadcastable, seeds, shapes
from tests.ir.onnx_check import NotRepresentable, check_op, import_node


@given(shapes(2, 4, 1, 4), st.sampled_from([1e-5, 1e-3]), seeds)
def test_batchnorm_matches_onnxruntime(shape, eps, seed):
    c = shape[1]
    x, scale, bias, mean, var = arrays(seed, shape, (c,), (c,), (c,), (c,))
    check_op(Op.BATCHNORM, [x, scale, bias, mean, np.abs(var) + 0.1], {"epsilon": eps})


@given(shapes(1, 4, 1, 5), st.data(), seeds)
def test_layernorm_matches_onnxruntime(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    scale_shape = data.draw(broadcastable(norm))
    bias_shape = data.draw(st.none() | broadcastable(norm))
    x, scale, bias = arrays(seed, shape, scale_shape, bias_shape or ())
    g = check_op(Op.LAYERNORM, [x, scale, bias if bias_shape is not None else None],
                 {"axis": axis, "epsilon": 1e-5})
    assert g.nodes[0].attrs["axis"] == axis % len(shape)


@given(shapes(1, 4, 1, 5), st.data(), seeds)
def test_softmax_matches_onnxruntime(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = arrays(seed, shape)
    check_op(Op.SOFTMAX, [4 * x], {"axis": axis})


def test_normalization_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    v3, v4 = b.input("v3", (3,)), b.input("v4", (4,))
    with pytest.raises(ShapeError, match=r"mean \[4\] f32 must be \[3\]"):
        b.batchnorm(x, v3, v3, v4, v3)
    with pytest.raises(ShapeError, match=r"scale \[3\] f32 .* normalized dims \[4\]"):
        b.layernorm(x, v3)
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3"):
        b.softmax(x, axis=3)


def test_training_mode_batchnorm_stays_opaque():
    onode = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                             training_mode=1)
    c = arrays(0, (3,))[0]
    with pytest.raises(NotRepresentable, match="training mode"):
        import_node(onode, {"x": arrays(1, (2, 3, 4))[0]}, {"s": c, "b": c, "m": c, "v": np.abs(c)})
