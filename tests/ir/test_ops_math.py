"""Element-wise math, comparisons, logic, cast (einsat/ir/ops/math.py): NumPy against onnxruntime."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import EinsatError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.testing.strategies import arrays, broadcastable, seeds
from tests.ir.onnx_check import check_op

SHAPES = st.lists(st.integers(1, 4), max_size=3).map(tuple)
PAIRS = SHAPES.flatmap(lambda s: st.tuples(st.just(s), broadcastable(s)).flatmap(
    lambda p: st.sampled_from([p, p[::-1]])))

UNARY = [Op.EXP, Op.NEG, Op.ABS, Op.FLOOR, Op.SIN, Op.COS]
POSITIVE = [Op.LOG, Op.SQRT]
BINARY = [Op.MAXIMUM, Op.MINIMUM, Op.GREATER, Op.LESS, Op.GREATER_EQUAL, Op.LESS_EQUAL, Op.EQUAL]
LOGIC = [Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_XOR]


@pytest.mark.parametrize("op", UNARY + POSITIVE, ids=lambda o: o.value)
@given(shape=st.lists(st.integers(1, 4), max_size=3).map(tuple), seed=seeds)
def test_unary(op, shape, seed):
    (x,) = arrays(seed, shape)
    check_op(op, [np.abs(x) + 0.1 if op in POSITIVE else x])


@pytest.mark.parametrize("op", BINARY + [Op.POW], ids=lambda o: o.value)
@given(shapes=PAIRS, seed=seeds)
def test_binary_broadcasts(op, shapes, seed):
    a, b = arrays(seed, *shapes)
    if op is Op.POW:
        a = np.abs(a) + 0.5
    if op is Op.EQUAL:
        b = np.where(np.random.default_rng(seed).random(b.shape) < 0.5, b, 0.0).astype(np.float32)
        a = np.zeros_like(a)
    g = check_op(op, [a, b])
    if op in BINARY[2:]:
        assert g.types[g.outputs[0]].dtype == np.bool_


@pytest.mark.parametrize("op", LOGIC + [Op.LOGICAL_NOT], ids=lambda o: o.value)
@given(shapes=PAIRS, seed=seeds)
def test_logic(op, shapes, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.random(s) < 0.5 for s in shapes)
    check_op(op, [a] if op is Op.LOGICAL_NOT else [a, b])


@pytest.mark.parametrize("src, dst", [(np.float32, "int64"), (np.float32, "float64"), (np.int64, "float32"),
                                      (np.bool_, "float32"), (np.float32, "bool")])
def test_cast(src, dst):
    x = (np.arange(-6, 6).reshape(3, 4) * 1.7).astype(src)
    g = check_op(Op.CAST, [x], {"dtype": dst})
    assert g.nodes[0].attrs["dtype"] == np.dtype(dst).name


def test_bad_inputs():
    f = {"a": TensorType((2,)), "b": TensorType((2,), np.int64)}
    with pytest.raises(EinsatError, match="different dtypes"):
        Graph([Node(Op.GREATER, ["a", "b"], ["y"])], f, ["y"])
    with pytest.raises(EinsatError, match="take bool inputs"):
        Graph([Node(Op.LOGICAL_AND, ["a", "a"], ["y"])], f, ["y"])
    with pytest.raises(EinsatError, match="not a NumPy dtype"):
        Graph([Node(Op.CAST, ["a"], ["y"], {"dtype": "float77"})], f, ["y"])
