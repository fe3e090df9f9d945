"""reduce_max, reduce_min, argmax (einsat/ir/ops/extrema.py): NumPy against onnxruntime."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import EinsatError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.testing.strategies import arrays, seeds
from tests.ir.onnx_check import check_op


@st.composite
def reduce_cases(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape),
                         max_size=len(shape)).map(tuple))
    return shape, axes, draw(st.sampled_from([0, 1]))


@pytest.mark.parametrize("op, fn", [(Op.REDUCE_MAX, np.max), (Op.REDUCE_MIN, np.min)], ids=["max", "min"])
@given(case=reduce_cases(), seed=seeds)
def test_reduce_extremum(op, fn, case, seed):
    shape, axes, keepdims = case
    (x,) = arrays(seed, shape)
    g = check_op(op, [x], {"axes": axes, "keepdims": keepdims})
    want = fn(x, axis=tuple(a % len(shape) for a in axes) or None, keepdims=bool(keepdims))
    assert g.types[g.outputs[0]].shape == np.shape(want)


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data(), seed=seeds)
def test_argmax_takes_the_first_maximum(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.floor(arrays(seed, shape)[0])  # ties are likely
    g = check_op(Op.ARGMAX, [x], {"axis": axis, "keepdims": data.draw(st.sampled_from([0, 1]))})
    assert g.types[g.outputs[0]].dtype == np.int64


def test_empty_axes_cannot_be_reduced():
    with pytest.raises(EinsatError, match="empty axis"):
        Graph([Node(Op.REDUCE_MAX, ["x"], ["y"], {"axes": (1,)})], {"x": TensorType((2, 0))}, ["y"])
