"""Element-wise ops: NumPy semantics against onnxruntime on broadcasting shapes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.ir import Op
from einsat.testing.strategies import arrays, broadcastable, seeds, shapes
from tests.ir.onnx_check import check_op

BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV]
UNARY = [(Op.RELU, {}), (Op.SIGMOID, {}), (Op.TANH, {}), (Op.ERF, {}), (Op.GELU, {}),
         (Op.GELU, {"approximate": "tanh"}), (Op.LEAKY_RELU, {"alpha": 0.2}), (Op.LEAKY_RELU, {})]


@given(st.sampled_from(BINARY), shapes(0, 3), st.data(), seeds)
def test_binary_ops_broadcast_like_onnxruntime(op, shape, data, seed):
    other = data.draw(broadcastable(shape))
    a, b = arrays(seed, shape, other)
    if data.draw(st.booleans()):
        a, b = b, a
    if op is Op.DIV:
        b = np.where(np.abs(b) < 0.1, 1.0, b).astype(np.float32)
    check_op(op, [a, b])


@pytest.mark.parametrize("op, attrs", UNARY, ids=lambda v: getattr(v, "value", str(v)))
@given(shape=shapes(0, 3), seed=seeds)
def test_unary_ops_match_onnxruntime(op, attrs, shape, seed):
    (x,) = arrays(seed, shape)
    check_op(op, [3 * x], attrs)


@given(shapes(0, 3), st.data(), seeds)
def test_where_matches_onnxruntime(shape, data, seed):
    c_shape, b_shape = data.draw(broadcastable(shape)), data.draw(broadcastable(shape))
    c, a, b = arrays(seed, c_shape, shape, b_shape)
    check_op(Op.WHERE, [c > 0, a, b])
