"""transpose, reshape, flatten, squeeze, unsqueeze, expand: NumPy semantics against
onnxruntime, canonical attributes, shape errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.registry import opdef
from einsat.testing.strategies import arrays, axes, broadcastable, seeds, shapes
from tests.ir.onnx_check import check_op


@given(shapes(0, 4), st.data(), seeds)
def test_transpose(shape, data, seed):
    perm = data.draw(st.none() | st.permutations(range(len(shape))).map(tuple))
    g = check_op(Op.TRANSPOSE, arrays(seed, shape), {} if perm is None else {"perm": perm})
    assert g.nodes[0].attrs["perm"] == (tuple(reversed(range(len(shape)))) if perm is None else perm)


@st.composite
def reshape_cases(draw):
    """A shape, and a target written with -1 and 0 (copy) where ONNX allows them."""
    shape = draw(shapes(1, 4, 1, 4))
    size = int(np.prod(shape))
    target, rest = [], size
    while rest > 1 and len(target) < 4:
        d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
        target.append(d)
        rest //= d
    target.append(rest)
    final = tuple(target)
    written = list(target)
    for k in range(min(len(written), len(shape))):
        if written[k] == shape[k] and draw(st.booleans()):
            written[k] = 0
    if draw(st.booleans()):
        written[draw(st.integers(0, len(written) - 1))] = -1
    return shape, tuple(written), final


@given(reshape_cases(), seeds)
def test_reshape_resolves_minus_one_and_zero(case, seed):
    shape, written, final = case
    g = check_op(Op.RESHAPE, arrays(seed, shape), {"shape": written})
    assert g.nodes[0].attrs["shape"] == final


@given(shapes(0, 4), st.data(), seeds)
def test_flatten(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape)))
    g = check_op(Op.FLATTEN, arrays(seed, shape), {"axis": axis})
    assert g.nodes[0].attrs["axis"] == (axis if axis >= 0 else axis + len(shape))


@given(shapes(0, 4, 1, 3), st.data(), seeds)
def test_squeeze(shape, data, seed):
    ones = [k for k, d in enumerate(shape) if d == 1]
    listed = st.lists(st.sampled_from(ones), unique=True).map(tuple) if ones else st.nothing()
    chosen = data.draw(st.none() | listed)
    g = check_op(Op.SQUEEZE, arrays(seed, shape), {} if chosen is None else {"axes": chosen})
    assert g.nodes[0].attrs["axes"] == (tuple(ones) if chosen is None else tuple(sorted(chosen)))


@given(shapes(0, 3), st.data(), seeds)
def test_unsqueeze(shape, data, seed):
    n = data.draw(st.integers(1, 2))
    ax = data.draw(axes(len(shape) + n, min_size=n).map(lambda a: a[:n]))
    check_op(Op.UNSQUEEZE, arrays(seed, shape), {"axes": ax})


@given(shapes(0, 3, 1, 3), st.data(), seeds)
def test_expand_is_bidirectional(shape, data, seed):
    src = data.draw(broadcastable(shape))
    # the target may itself have 1s where the input is larger (ONNX Expand broadcasts both ways)
    target = tuple(1 if data.draw(st.booleans()) else d for d in shape)
    g = check_op(Op.EXPAND, arrays(seed, src), {"shape": target})
    assert g.nodes[0].attrs["shape"] == tuple(np.broadcast_shapes(src, target))


def test_views_move_no_bytes_and_transpose_does():
    t = TensorType((2, 3))
    for op in (Op.RESHAPE, Op.FLATTEN, Op.SQUEEZE, Op.UNSQUEEZE, Op.IDENTITY):
        assert opdef(op).bytes([t], [t], {}) == 0
    assert opdef(Op.TRANSPOSE).bytes([t], [t], {"perm": (1, 0)}) == 2 * 24


def test_layout_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"cannot reshape \[2, 3, 4\] \(24 elements\) to \(5, 5\)"):
        b.reshape(x, shape=(5, 5))
    with pytest.raises(ShapeError, match="more than one -1"):
        b.reshape(x, shape=(-1, -1))
    with pytest.raises(ShapeError, match="not a permutation"):
        b.transpose(x, perm=(0, 0, 1))
    with pytest.raises(ShapeError, match=r"cannot squeeze axes \[1\]"):
        b.squeeze(x, axes=(1,))
    with pytest.raises(ShapeError, match="do not broadcast"):
        b.expand(x, shape=(3, 3, 4))
    with pytest.raises(ShapeError, match="axis 4 is out of range for rank 3"):
        b.flatten(x, axis=4)
