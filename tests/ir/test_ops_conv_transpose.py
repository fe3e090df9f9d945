"""conv_transpose: NumPy semantics against onnxruntime, the adjoint law, FLOPs, ONNX import forms."""

import numpy as np
import pytest
from hypothesis import given
from onnx import helper

import einsat
from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.registry import opdef
from einsat.testing.strategies import arrays, conv_transpose_cases, seeds
from tests.ir.onnx_check import check_import, check_op


@given(conv_transpose_cases(), seeds)
def test_conv_transpose_matches_onnxruntime(case, seed):
    f = case["w"][1] * case["attrs"]["groups"]
    x, w, b = arrays(seed, case["x"], case["w"], (f,))
    check_op(Op.CONV_TRANSPOSE, [x, w, b if case["bias"] else None], case["attrs"])


@given(conv_transpose_cases(), seeds)
def test_conv_transpose_is_the_adjoint_of_conv(case, seed):
    """<conv_transpose(x, w), y> = <x, conv(y, w)>: the transposed op is the adjoint of the
    convolution with the same weight, stride, padding, dilation and groups."""
    a = case["attrs"]
    b = GraphBuilder()
    x = b.input("x", case["x"], np.float64)
    w = b.input("w", case["w"], np.float64)
    up = b.conv_transpose(x, w, **a)
    conv_attrs = {k: a[k] for k in ("stride", "padding", "dilation", "groups")}
    g = b.build(up)
    b2 = GraphBuilder()
    y = b2.input("y", up.shape, np.float64)
    w2 = b2.input("w", case["w"], np.float64)
    down = b2.conv(y, w2, **conv_attrs)
    assert down.shape == case["x"]  # output_padding < stride adds no conv window
    g2 = b2.build(down)
    xs, ws, ys = arrays(seed, case["x"], case["w"], up.shape, dtype=np.float64)
    left = np.vdot(einsat.run(g, {"x": xs, "w": ws})[g.outputs[0]], ys)
    right = np.vdot(xs, einsat.run(g2, {"y": ys, "w": ws})[g2.outputs[0]])
    np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9)


def test_conv_transpose_flops():
    # x [2, 4, 5, 5], w [4, 3, 3, 3], groups 2: each input element meets 3·3·3 weights
    t = TensorType
    ins = [t((2, 4, 5, 5)), t((4, 3, 3, 3)), t((6,))]
    outs = [t((2, 6, 11, 11))]
    attrs = {"stride": (2, 2), "padding": (0,) * 4, "dilation": (1, 1), "groups": 2,
             "output_padding": (0, 0)}
    macs = 2 * 4 * 5 * 5 * 3 * 3 * 3
    assert opdef(Op.CONV_TRANSPOSE).flops(ins, outs, attrs) == 2 * macs + 2 * 6 * 11 * 11


def test_conv_transpose_output_size_and_errors():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 5, 5))
    y = b.conv_transpose(x, b.weight("w", (4, 2, 3, 3)), stride=2, padding=1, output_padding=1, groups=2)
    assert y.shape == (1, 4, 2 * 4 + 1 + 3 - 2, 10)
    with pytest.raises(ShapeError, match="output_padding 2 must be smaller than the stride 2"):
        b.conv_transpose(x, b.weight("w2", (4, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="weight's first dim 3"):
        b.conv_transpose(x, b.weight("w3", (3, 2, 3, 3)))


@pytest.mark.parametrize("attrs", [
    {"output_shape": [10, 9], "strides": [2, 2]},
    {"output_shape": [10, 9], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"auto_pad": "SAME_UPPER", "strides": [2, 1]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 3], "dilations": [2, 1]},
    {"auto_pad": "VALID", "group": 2, "output_padding": [1, 0], "strides": [2, 1]},
])
def test_conv_transpose_imports_output_shape_and_auto_pad(attrs):
    x, w = arrays(1, (1, 4, 5, 5), (4, 3, 3, 2))
    onode = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    check_import(onode, {"x": x}, {"w": w})
