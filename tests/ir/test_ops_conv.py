"""conv: NumPy semantics against onnxruntime, shapes, FLOPs, ONNX import forms."""

import pytest
from hypothesis import given
from onnx import helper

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.registry import opdef
from einsat.testing.strategies import arrays, conv_cases, seeds
from tests.ir.onnx_check import check_import, check_op


@given(conv_cases(), seeds)
def test_conv_matches_onnxruntime(case, seed):
    x, w, b = arrays(seed, case["x"], case["w"], (case["w"][0],))
    check_op(Op.CONV, [x, w, b if case["bias"] else None], case["attrs"])


def test_conv_flops_are_two_per_multiply_add():
    # N=2, F=8, out 6x6 (8x8, k3, no pad), C/g=2 (C=4, g=2), k=3x3
    t = TensorType
    ins = [t((2, 4, 8, 8)), t((8, 2, 3, 3)), t((8,))]
    outs = [t((2, 8, 6, 6))]
    attrs = {"stride": (1, 1), "padding": (0,) * 4, "dilation": (1, 1), "groups": 2}
    assert opdef(Op.CONV).flops(ins, outs, attrs) == 2 * (2 * 8 * 6 * 6) * (2 * 3 * 3) + 2 * 8 * 6 * 6
    assert opdef(Op.CONV).flops(ins[:2], outs, attrs) == 2 * (2 * 8 * 6 * 6) * (2 * 3 * 3)


def test_conv_shorthands_are_expanded():
    b = GraphBuilder()
    y = b.conv(b.input("x", (1, 2, 9, 9)), b.weight("w", (4, 2, 3, 3)), stride=2, padding=1)
    node = b.build(y).nodes[0]
    assert node.attrs["stride"] == (2, 2) and node.attrs["padding"] == (1, 1, 1, 1)
    assert y.shape == (1, 4, 5, 5)


def test_conv_errors_name_the_problem():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    with pytest.raises(ShapeError, match=r"input channels 3 .* groups 2"):
        b.conv(x, b.weight("w", (4, 1, 3, 3)), groups=2)
    with pytest.raises(ShapeError, match="smaller than the dilated kernel"):
        b.conv(x, b.weight("w2", (4, 3, 3, 3)), dilation=2)
    with pytest.raises(AttributeValueError, match="padding"):
        b.conv(x, b.weight("w3", (4, 3, 3, 3)), padding=-1)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_imports_auto_pad(auto_pad):
    x, w = arrays(0, (1, 2, 7, 6), (3, 2, 3, 2))
    onode = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad, strides=[2, 1])
    check_import(onode, {"x": x}, {"w": w})
