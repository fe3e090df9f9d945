"""reduce_sum, reduce_mean: NumPy semantics against onnxruntime, canonical axes, import forms."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.registry import opdef
from einsat.testing.strategies import arrays, axes, seeds, shapes
from tests.ir.onnx_check import check_import, check_op


@given(st.sampled_from([Op.REDUCE_SUM, Op.REDUCE_MEAN]), shapes(0, 4, 1, 4), st.data(), seeds)
def test_reductions_match_onnxruntime(op, shape, data, seed):
    ax = data.draw(axes(len(shape)))
    keep = data.draw(st.integers(0, 1))
    g = check_op(op, arrays(seed, shape), {"axes": ax, "keepdims": keep})
    want = tuple(sorted(a % len(shape) for a in ax)) if ax else tuple(range(len(shape)))
    assert g.nodes[0].attrs["axes"] == want


def test_reduce_flops_and_errors():
    t = TensorType
    attrs = {"axes": (1,), "keepdims": 1}
    assert opdef(Op.REDUCE_SUM).flops([t((2, 3, 4))], [t((2, 1, 4))], attrs) == 24
    assert opdef(Op.REDUCE_MEAN).flops([t((2, 3, 4))], [t((2, 1, 4))], attrs) == 24 + 8
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(ShapeError, match="axis 2 is out of range for rank 2"):
        b.reduce_sum(x, axes=(2,))
    with pytest.raises(ShapeError, match="name an axis twice"):
        b.reduce_mean(x, axes=(1, -1))


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_reduce_mean_imports_axes_attribute_or_input(opset):
    x = arrays(0, (2, 3, 4))[0]
    if opset < 18:
        onode = helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, -1], keepdims=0)
        check_import(onode, {"x": x}, opset=opset)
    else:
        onode = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
        check_import(onode, {"x": x}, {"axes": np.array([0, -1])}, opset=opset)
