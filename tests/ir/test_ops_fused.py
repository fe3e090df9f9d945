"""fused_conv and fused_matmul: the unfused computation, onnxruntime on their expansion."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einsat
from einsat import GraphBuilder, Op
from einsat.errors import AttributeValueError, ShapeError
from tests.ir.onnx_check import check_op

ACTS = ["none", "relu", "sigmoid", "tanh"]


def unfused(kind, act, bias, residual):
    """The same computation from separate ops."""
    def build(b, x, w, bb, z):
        y = b.conv(x, w, bb if bias else None, padding=1) if kind == "conv" else b.matmul(x, w)
        if kind == "matmul" and bias:
            y = b.add(y, bb)
        if residual:
            y = b.add(y, z)
        return y if act == "none" else b.op(Op(act), y)
    return build


@given(st.sampled_from(["conv", "matmul"]), st.sampled_from(ACTS), st.booleans(), st.booleans(),
       st.integers(0, 2 ** 16))
def test_fused_equals_unfused(kind, act, bias, residual, seed):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("f")
    if kind == "conv":
        x, w = b.input("x", (2, 3, 5, 5)), b.weight("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        bb, z = b.weight("b", rng.standard_normal(4).astype(np.float32)), b.input("z", (2, 4, 5, 5))
        fused = b.fused_conv(x, w, bb if bias else None, z if residual else None, padding=1, activation=act)
    else:
        x, w = b.input("x", (2, 3, 4)), b.weight("w", rng.standard_normal((4, 5)).astype(np.float32))
        bb, z = b.weight("b", rng.standard_normal(5).astype(np.float32)), b.input("z", (3, 5))
        fused = b.fused_matmul(x, w, bb if bias else None, z if residual else None, activation=act)
    ref = unfused(kind, act, bias, residual)(b, x, w, bb, z)
    g = b.build(fused, ref)
    feeds = {n: rng.standard_normal(g.types[n].shape).astype(np.float32) for n in g.inputs}
    out = einsat.run(g, feeds)
    np.testing.assert_allclose(out[g.outputs[0]], out[g.outputs[1]], rtol=1e-5, atol=1e-5)
    assert g.types[g.outputs[0]] == g.types[g.outputs[1]]
    flops = {n.op: n.definition.flops(*g.node_types(n), n.attrs) for n in g.nodes}
    assert flops[Op(f"fused_{kind}")] >= flops[Op.CONV if kind == "conv" else Op.MATMUL]


@pytest.mark.parametrize("act", ACTS)
def test_fused_conv_onnx(act, rng):
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    z = rng.standard_normal((1, 3, 3, 3)).astype(np.float32)
    check_op(Op.FUSED_CONV, [x, w, bias, z], {"stride": 2, "padding": 1, "activation": act})
    check_op(Op.FUSED_CONV, [x, w], {"activation": act})


@pytest.mark.parametrize("act", ACTS)
def test_fused_matmul_onnx(act, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    check_op(Op.FUSED_MATMUL, [a, w, rng.standard_normal(5).astype(np.float32),
                               rng.standard_normal((2, 3, 5)).astype(np.float32)], {"activation": act})
    check_op(Op.FUSED_MATMUL, [a, w, None, rng.standard_normal((3, 5)).astype(np.float32)], {"activation": act})


def test_bad_fused_inputs_are_named():
    b = GraphBuilder("bad")
    x, w = b.input("x", (1, 2, 4, 4)), b.weight("w", (3, 2, 3, 3))
    with pytest.raises(ShapeError, match="residual"):
        b.fused_conv(x, w, None, b.input("z", (1, 3, 4, 4)))
    with pytest.raises(AttributeValueError, match="activation"):
        b.fused_conv(x, w, activation="gelu")
    with pytest.raises(ShapeError, match="bias"):
        b.fused_matmul(b.input("a", (2, 3)), b.weight("m", (3, 4)), b.weight("c", (2, 5)))
