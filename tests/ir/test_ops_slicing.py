"""concat, split, slice, pad, gather: NumPy semantics against onnxruntime, canonical slices,
ONNX import forms."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.ir.ops.slicing import canonical_slice
from einsat.ir.registry import normalize_attrs
from einsat.ir.types import TensorType
from einsat.testing.strategies import arrays, seeds, shapes, slice_cases
from tests.ir.onnx_check import check_import, check_op


@given(shapes(1, 3), st.data(), seeds)
def test_concat(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    a = axis % len(shape)
    parts = arrays(seed, *(shape[:a] + (s,) + shape[a + 1:] for s in sizes))
    check_op(Op.CONCAT, parts, {"axis": axis})


@given(shapes(1, 3), st.data(), seeds)
def test_split(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    cuts = sorted(data.draw(st.lists(st.integers(0, dim), max_size=3)))
    sizes = tuple(np.diff([0] + cuts + [dim]))
    check_op(Op.SPLIT, arrays(seed, shape), {"axis": axis, "sizes": sizes})


@given(slice_cases(), seeds)
def test_slice(case, seed):
    g = check_op(Op.SLICE, arrays(seed, case["x"]), case["attrs"])
    attrs = dict(g.nodes[0].attrs)
    assert attrs["axes"] == tuple(range(len(case["x"])))
    # normalization is idempotent: the canonical form is a fixed point
    assert normalize_attrs(Op.SLICE, attrs, [TensorType(case["x"])]) == attrs


@given(st.integers(-9, 9), st.integers(-9, 9), st.sampled_from([-3, -2, -1, 1, 2, 3]), st.integers(0, 6))
def test_canonical_slice_selects_the_same_elements(start, end, step, dim):
    """canonical_slice keeps ONNX's selection (Python's, for in-range bounds) and is idempotent."""
    s, e, st_ = canonical_slice(start, end, step, dim)
    want = list(range(dim))[slice(start, end, step)]
    assert list(range(dim))[slice(s, e if e >= 0 else None, st_)] == want
    assert canonical_slice(s, e, st_, dim) == (s, e, st_)


@st.composite
def pad_cases(draw):
    shape = draw(shapes(1, 3, 1, 4))
    mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
    top = [d - 1 if mode == "reflect" else 3 for d in shape]
    pads = tuple(draw(st.integers(0, top[k % len(shape)])) for k in range(2 * len(shape)))
    attrs = {"pads": pads, "mode": mode}
    if mode == "constant" and draw(st.booleans()):
        attrs["value"] = draw(st.sampled_from([1.5, -2.0]))
    return shape, attrs


@given(pad_cases(), seeds)
def test_pad(case, seed):
    shape, attrs = case
    check_op(Op.PAD, arrays(seed, shape), attrs)


@given(shapes(1, 3), st.data(), seeds)
def test_gather(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    idx_shape = data.draw(shapes(0, 2, 1, 3))
    rng = np.random.default_rng(seed)
    idx = rng.integers(-dim, dim, size=idx_shape).astype(data.draw(st.sampled_from([np.int32, np.int64])))
    check_op(Op.GATHER, [arrays(seed, shape)[0], idx], {"axis": axis})


def test_slicing_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(ShapeError, match=r"sizes \(1, 1\) do not add up to dim 1"):
        b.split(x, axis=1, sizes=(1, 1))
    with pytest.raises(ShapeError, match="differ in a dim other than the axis 0"):
        b.concat(x, b.input("y", (2, 4)), axis=0)
    with pytest.raises(ShapeError, match="steps must not be 0"):
        b.slice(x, starts=(0,), ends=(1,), steps=(0,))
    with pytest.raises(ShapeError, match="reflect padding 2\\+0 of dim 0 needs pads < its size 2"):
        b.pad(x, pads=(2, 0, 0, 0), mode="reflect")
    with pytest.raises(AttributeValueError, match="mode"):
        b.pad(x, pads=(0, 0, 0, 0), mode="wrap")
    with pytest.raises(ShapeError, match="indices must be int32 or int64"):
        b.gather(x, b.input("i", (2,)))


def test_imports_split_forms():
    x = arrays(0, (2, 7))[0]
    # opset 18 num_outputs: the last piece is smaller
    g = check_import(helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3), {"x": x})
    assert g.nodes[0].attrs["sizes"] == (3, 3, 1)
    onode = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=-1)
    g = check_import(onode, {"x": x}, {"s": np.array([2, 5])})
    assert g.nodes[0].attrs == {"axis": 1, "sizes": (2, 5)}
    g = check_import(helper.make_node("Split", ["x"], ["a", "b"], axis=0), {"x": x}, opset=13)
    assert g.nodes[0].attrs["sizes"] == (1, 1)


def test_imports_pad_with_axes_and_value():
    x = arrays(0, (2, 3, 4))[0]
    onode = helper.make_node("Pad", ["x", "p", "v", "a"], ["y"], mode="constant")
    g = check_import(onode, {"x": x}, {"p": np.array([1, 2, 0, 3]), "v": np.array(2.5, np.float32),
                                       "a": np.array([-1, 0])})
    assert g.nodes[0].attrs["pads"] == (2, 0, 1, 3, 0, 0)  # begins (axis 0, 1, 2), then ends
