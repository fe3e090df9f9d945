"""gather_elements, gather_nd (einsat/ir/ops/indexing.py), clip, isnan (ops/math.py) and cumsum
(ops/reduce.py): NumPy against onnxruntime on drawn cases, ONNX mappings both ways."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import EinsatError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.testing.strategies import arrays, seeds
from tests.ir.onnx_check import check_import, check_op

SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@given(shape=SHAPES, data=st.data(), seed=seeds)
def test_gather_elements(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    ax = axis % len(shape)
    ishape = tuple(data.draw(st.integers(1, d + 2 if k == ax else d)) for k, d in enumerate(shape))
    rng = np.random.default_rng(seed)
    idx = rng.integers(-shape[ax], shape[ax], ishape).astype(data.draw(st.sampled_from([np.int32, np.int64])))
    (x,) = arrays(seed, shape)
    g = check_op(Op.GATHER_ELEMENTS, [x, idx], {"axis": axis})
    assert g.types[g.outputs[0]].shape == ishape


@given(data=st.data(), seed=seeds)
def test_gather_nd(data, seed):
    b = data.draw(st.integers(0, 1))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=b + 1, max_size=4).map(tuple))
    m = data.draw(st.integers(1, len(shape) - b))
    mid = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.integers(-shape[b + j], shape[b + j], shape[:b] + mid) for j in range(m)], axis=-1)
    (x,) = arrays(seed, shape)
    g = check_op(Op.GATHER_ND, [x, idx.astype(np.int64)], {"batch_dims": b})
    assert g.types[g.outputs[0]].shape == shape[:b] + mid + shape[b + m:]


@given(shape=SHAPES, low=st.sampled_from([-np.inf, -0.5, 0.0]), high=st.sampled_from([np.inf, 0.5, 6.0, -1.0]),
       seed=seeds)
def test_clip(shape, low, high, seed):
    (x,) = arrays(seed, shape)
    check_op(Op.CLIP, [x * 4], {"low": low, "high": high})


def test_clip_imports_relu6_and_one_sided_bounds():
    x = np.linspace(-8, 8, 12, dtype=np.float32).reshape(3, 4)
    g = check_import(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), {"x": x}, {"lo": np.float32(0),
                     "hi": np.float32(6)})
    assert g.nodes[0].op is Op.CLIP and dict(g.nodes[0].attrs) == {"low": 0.0, "high": 6.0}
    g = check_import(helper.make_node("Clip", ["x", "", "hi"], ["y"]), {"x": x}, {"hi": np.float32(1)})
    assert g.nodes[0].attrs["low"] == -np.inf


@given(shape=SHAPES, seed=seeds)
def test_isnan(shape, seed):
    (x,) = arrays(seed, shape)
    x[np.random.default_rng(seed).random(shape) < 0.3] = np.nan
    g = check_op(Op.ISNAN, [x])
    assert g.types[g.outputs[0]].dtype == np.bool_


@given(shape=SHAPES, data=st.data(), seed=seeds)
def test_cumsum(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    flag = st.sampled_from([0, 1])
    attrs = {"axis": axis, "exclusive": data.draw(flag), "reverse": data.draw(flag)}
    (x,) = arrays(seed, shape)
    check_op(Op.CUMSUM, [x], attrs)


def test_cumsum_law():
    """exclusive: out[i] = Σ_{j<i} x[j]; reverse: Σ_{j≥i}; both: Σ_{j>i}."""
    from einsat.ir.registry import opdef
    x = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    run = lambda **a: opdef(Op.CUMSUM).numpy([x], {"axis": 0, "exclusive": 0, "reverse": 0, **a})[0].tolist()
    assert run() == [1, 3, 7, 15] and run(exclusive=1) == [0, 1, 3, 7]
    assert run(reverse=1) == [15, 14, 12, 8] and run(exclusive=1, reverse=1) == [14, 12, 8, 0]


BAD = [
    (Op.GATHER_ELEMENTS, [((2, 3), np.float32), ((2,), np.int64)], {}, "must have data's rank"),
    (Op.GATHER_ELEMENTS, [((2, 3), np.float32), ((2, 3), np.float32)], {}, "int32 or int64"),
    (Op.GATHER_ND, [((2, 3), np.float32), ((4, 3), np.int64)], {}, "longer than data's 2"),
    (Op.GATHER_ND, [((2, 3), np.float32), ((3, 1), np.int64)], {"batch_dims": 1}, "share their first"),
    (Op.CLIP, [((2, 3), np.int32)], {}, "floating-point"),
]


@pytest.mark.parametrize("op, inputs, attrs, reason", BAD, ids=[c[0].value for c in BAD])
def test_bad_inputs_name_the_shapes(op, inputs, attrs, reason):
    types = {f"x{k}": TensorType(s, d) for k, (s, d) in enumerate(inputs)}
    with pytest.raises(EinsatError, match=reason):
        Graph([Node(op, list(types), ["y"], attrs, name="bad")], types, ["y"])


def test_index_out_of_range_is_an_error_when_it_runs():
    import einsat
    types = {"x": TensorType((2, 3)), "i": TensorType((2, 3), np.int64)}
    g = Graph([Node(Op.GATHER_ELEMENTS, ["x", "i"], ["y"], {"axis": 1})], types, ["y"])
    with pytest.raises(EinsatError, match="gather_elements"):
        einsat.run(g, {"x": np.zeros((2, 3), np.float32), "i": np.full((2, 3), 3, np.int64)})
