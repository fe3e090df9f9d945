"""avgpool, maxpool, global_avgpool: NumPy semantics against onnxruntime (padding, ceil_mode,
dilation), shapes, canonical ceil_mode, ONNX import forms."""

import numpy as np
import pytest
from hypothesis import given
from onnx import helper

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.testing.strategies import arrays, pool_cases, seeds, shapes
from tests.ir.onnx_check import check_import, check_op


@given(pool_cases("avg"), seeds)
def test_avgpool_matches_onnxruntime(case, seed):
    check_op(Op.AVGPOOL, arrays(seed, case["x"]), case["attrs"])


@given(pool_cases("max"), seeds)
def test_maxpool_matches_onnxruntime(case, seed):
    check_op(Op.MAXPOOL, arrays(seed, case["x"]), case["attrs"])


@given(shapes(3, 5, 1, 4), seeds)
def test_global_avgpool_matches_onnxruntime(shape, seed):
    check_op(Op.GLOBAL_AVGPOOL, arrays(seed, shape))


def test_ceil_mode_windows():
    b = GraphBuilder()
    x = b.input("x", (1, 1, 5))
    # padded 5 - 2 = 3 over stride 2: floor gives 2 windows, ceil a third one on [4, 6)
    assert b.avgpool(x, kernel=2, stride=2, ceil_mode=1).shape == (1, 1, 3)
    assert b.maxpool(x, kernel=2, stride=2).shape == (1, 1, 2)
    # with pads (1, 1) the ceil window would start in the end padding: dropped, ceil_mode moot
    y = b.avgpool(x, kernel=2, stride=2, padding=(1, 1), ceil_mode=1)
    assert y.shape == (1, 1, 3)
    assert b.build(y).producer(y.name).attrs["ceil_mode"] == 0
    g = b.build(b.avgpool(x, kernel=2, stride=2, ceil_mode=1, count_include_pad=1))
    import einsat
    out = einsat.run(g, {"x": np.arange(5, dtype=np.float32).reshape(1, 1, 5)})[g.outputs[0]]
    np.testing.assert_array_equal(out.ravel(), [0.5, 2.5, 4.0])  # the last window holds one element


def test_pool_errors():
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    with pytest.raises(ShapeError, match="padding 2\\+0 must be smaller than the kernel 2"):
        b.maxpool(x, kernel=2, padding=(2, 0, 0, 0))
    with pytest.raises(ShapeError, match="smaller than the window 5"):
        b.maxpool(x, kernel=3, dilation=2)
    with pytest.raises(ShapeError, match=r"\[N, C, \*spatial\]"):
        b.avgpool(b.input("v", (4, 4)), kernel=2)
    with pytest.raises(ShapeError, match="kernel=\\(2, 2, 2\\) needs 2 values"):
        b.avgpool(x, kernel=(2, 2, 2))


@pytest.mark.parametrize("op_type, attrs", [
    ("MaxPool", {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER", "strides": [1, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2], "ceil_mode": 1}),
])
def test_pools_import_auto_pad(op_type, attrs):
    check_import(helper.make_node(op_type, ["x"], ["y"], **attrs), {"x": arrays(2, (1, 2, 7, 6))[0]})


def test_dilated_same_pool_follows_the_onnx_spec():
    """SAME pads cover the dilated window (ONNX spec, onnx.reference, ONNX shape inference);
    onnxruntime 1.31 pads for the undilated kernel and returns 6 rows here instead of 7."""
    onode = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_UPPER",
                             dilations=[2, 1])
    g = check_import(onode, {"x": arrays(2, (1, 2, 7, 6))[0]}, reference=True)
    assert g.nodes[0].attrs["padding"] == (1, 0, 1, 1)
    assert g.types["y"].shape == (1, 2, 7, 6)
