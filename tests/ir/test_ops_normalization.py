"""batchnorm, layernorm, softmax: NumPy semantics against onnxruntime, shapes, import forms."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.testing.strategies import arrays, broadcastable, seeds, shapes
from tests.ir.onnx_check import NotRepresentable, check_op, import_node


@given(shapes(2, 4, 1, 4), st.sampled_from([1e-5, 1e-3]), seeds)
def test_batchnorm_matches_onnxruntime(shape, eps, seed):
    c = shape[1]
    x, scale, bias, mean, var = arrays(seed, shape, (c,), (c,), (c,), (c,))
    check_op(Op.BATCHNORM, [x, scale, bias, mean, np.abs(var) + 0.1], {"epsilon": eps})


@given(shapes(1, 4, 1, 5), st.data(), seeds)
def test_layernorm_matches_onnxruntime(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    scale_shape = data.draw(broadcastable(norm))
    bias_shape = data.draw(st.none() | broadcastable(norm))
    x, scale, bias = arrays(seed, shape, scale_shape, bias_shape or ())
    g = check_op(Op.LAYERNORM, [x, scale, bias if bias_shape is not None else None],
                 {"axis": axis, "epsilon": 1e-5})
    assert g.nodes[0].attrs["axis"] == axis % len(shape)


@given(shapes(1, 4, 1, 5), st.data(), seeds)
def test_softmax_matches_onnxruntime(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = arrays(seed, shape)
    check_op(Op.SOFTMAX, [4 * x], {"axis": axis})


def test_normalization_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    v3, v4 = b.input("v3", (3,)), b.input("v4", (4,))
    with pytest.raises(ShapeError, match=r"mean \[4\] f32 must be \[3\]"):
        b.batchnorm(x, v3, v3, v4, v3)
    with pytest.raises(ShapeError, match=r"scale \[3\] f32 .* normalized dims \[4\]"):
        b.layernorm(x, v3)
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3"):
        b.softmax(x, axis=3)


def test_training_mode_batchnorm_stays_opaque():
    onode = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                             training_mode=1)
    c = arrays(0, (3,))[0]
    with pytest.raises(NotRepresentable, match="training mode"):
        import_node(onode, {"x": arrays(1, (2, 3, 4))[0]}, {"s": c, "b": c, "m": c, "v": np.abs(c)})


@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 7), st.integers(1, 3), st.integers(1, 3)),
       size=st.sampled_from([1, 3, 5]), beta=st.sampled_from([0.75, 0.5, 1.0]), seed=seeds)
def test_lrn_matches_onnxruntime(shape, size, beta, seed):
    """Odd sizes: onnxruntime refuses even ones (test_lrn_window_is_the_specs has one)."""
    (x,) = arrays(seed, shape)
    check_op(Op.LRN, [x * 3], {"size": size, "alpha": 1e-2, "beta": beta, "bias": 2.0}, rtol=1e-5, atol=1e-6)


@given(shape=st.sampled_from([(2, 6, 3), (1, 5, 2, 3), (1, 4, 2, 2, 3)]), size=st.sampled_from([2, 3, 4]),
       seed=seeds)
def test_lrn_of_any_rank_and_size_exports_to_what_onnxruntime_runs(shape, size, seed):
    """onnxruntime runs LRN on rank 4 with an odd size only: other ranks are reshaped around it, even
    sizes written out as an average pool of squares (`LRN.to_onnx`); both equal the spec's LRN."""
    import einsat
    b = GraphBuilder("lrn")
    x = b.input("x", shape)
    g = b.build(b.lrn(x, size=size, alpha=0.5, beta=0.75, bias=1.5))
    (data,) = arrays(seed, shape)
    feeds = {"x": data * 3}
    want = einsat.run(g, feeds)[g.outputs[0]]
    got = einsat.run(g, feeds, backend="onnxruntime")[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lrn_window_is_the_specs():
    """Channel c sums the squares of channels c - ⌊(size-1)/2⌋ .. c + ⌈(size-1)/2⌉ (onnx/onnx#7805:
    onnx.reference's own LRN summed over the batch axis)."""
    from einsat.ir.registry import opdef
    x = np.zeros((1, 5, 1, 1), np.float32)
    x[0, 2] = 2.0
    y = opdef(Op.LRN).numpy([x], {"size": 2, "alpha": 2.0, "beta": 1.0, "bias": 1.0})[0]
    # size 2: channel c reads c and c + 1, so only channels 1 and 2 see x[2] = 2: 1 + (2/2)·4 = 5
    assert y[0, 2, 0, 0] == np.float32(2.0 / 5.0) and y[0, 1, 0, 0] == 0.0
