"""packed_attention: NumPy semantics (attention of x's packed Q/K/V projections, against a float64
formula), the export as onnxruntime's com.microsoft Attention where contrib ops are allowed and as
the standard chain where not (opset 17: Attention's chain; 23: ONNX Attention), both run on
onnxruntime against NumPy (masks of every broadcast form, causal, no bias, rows masked fully by
float-min and by -inf), and the import of the com.microsoft op."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.testing.strategies import seeds
from tests.ir.onnx_check import ort_run

MASKS = [None, (1, 1, 1, 5), (2, 1, 1, 5), (2, 1, 5, 5), (1, 3, 5, 5), (2, 3, 5, 5), (5, 5), (5,)]


def _graph(x, w, b, mask_shape, heads, causal=0, scale=None):
    g = GraphBuilder("packed")
    xi = g.input("x", x.shape)
    ins = [xi, g.weight("w", w), None if b is None else g.weight("b", b)]
    if mask_shape is not None:
        ins.append(g.input("mask", mask_shape))
    y = g.op(Op.PACKED_ATTENTION, *ins, num_heads=heads, causal=causal, scale=scale)
    return g.build(y)


def _reference(x, w, b, mask, heads, scale, causal):
    """float64: the projections, the heads, softmax(q kᵀ · scale + mask) v, back to [B, S, H]."""
    qkv = x.astype(np.float64) @ w + (0 if b is None else b)
    bsz, s, h3 = qkv.shape
    h = h3 // 3
    q, k, v = (qkv[..., i * h:(i + 1) * h].reshape(bsz, s, heads, -1).transpose(0, 2, 1, 3) for i in range(3))
    sc = q @ k.transpose(0, 1, 3, 2) * scale + (0 if mask is None else mask)
    if causal:
        sc = sc + np.triu(np.full((s, s), -np.inf), 1)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(bsz, s, h)


def _arrays(seed, bsz, s, hin, heads, d, mask_shape):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((bsz, s, hin)).astype(np.float32)
    w = (rng.standard_normal((hin, 3 * heads * d)) * 0.5).astype(np.float32)
    b = rng.standard_normal(3 * heads * d).astype(np.float32)
    mask = None if mask_shape is None else rng.standard_normal(mask_shape).astype(np.float32)
    return x, w, b, mask


@settings(max_examples=20, deadline=None)
@given(seed=seeds, bsz=st.integers(1, 3), s=st.integers(1, 6), hin=st.integers(1, 8), heads=st.integers(1, 3),
       d=st.integers(1, 4), with_bias=st.booleans(), masked=st.booleans(), causal=st.integers(0, 1),
       scale=st.sampled_from([None, 0.25]))
def test_numpy_semantics_match_the_formula(seed, bsz, s, hin, heads, d, with_bias, masked, causal, scale):
    mask_shape = (bsz, 1, 1, s) if masked else None
    x, w, b, mask = _arrays(seed, bsz, s, hin, heads, d, mask_shape)
    b = b if with_bias else None
    g = _graph(x, w, b, mask_shape, heads, causal, scale)
    assert g.nodes[0].attrs["scale"] == (scale if scale is not None else float(np.float32(1 / np.sqrt(d))))
    feeds = {"x": x} if mask is None else {"x": x, "mask": mask}
    got = einsat.run(g, feeds)[g.outputs[0]]
    assert got.shape == (bsz, s, heads * d) and got.dtype == np.float32
    want = _reference(x, w, b, mask, heads, g.nodes[0].attrs["scale"], causal)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask_shape", MASKS)
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_contrib_export_runs_on_onnxruntime_and_matches_numpy(mask_shape, causal, with_bias):
    x, w, b, mask = _arrays(3, 2, 5, 6, 3, 4, mask_shape)
    g = _graph(x, w, b if with_bias else None, mask_shape, 3, causal)
    feeds = {"x": x} if mask is None else {"x": x, "mask": mask}
    ours = einsat.run(g, feeds)[g.outputs[0]]
    model = to_onnx(g, contrib=True)
    ops = [(n.op_type, n.domain) for n in model.graph.node]
    assert ("Attention", "com.microsoft") in ops
    assert {op for op, _ in ops} <= {"Attention", "Reshape", "Expand"}
    (got,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, ours, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("mask_shape", [None, (2, 1, 1, 5)])
def test_without_contrib_ops_the_standard_chain_is_written_and_matches(opset, mask_shape):
    x, w, b, mask = _arrays(4, 2, 5, 6, 3, 4, mask_shape)
    g = _graph(x, w, b, mask_shape, 3, causal=0)
    feeds = {"x": x} if mask is None else {"x": x, "mask": mask}
    model = to_onnx(g, opset=opset)
    assert all(n.domain == "" for n in model.graph.node)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) <= opset
    (got,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, einsat.run(g, feeds)[g.outputs[0]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fill", [float(np.finfo(np.float32).min), -np.inf])
def test_fully_masked_rows_match_the_chain_on_onnxruntime(fill):
    """onnxruntime 1.31's contrib Attention: a row of float-min biases is the mean of v, one of
    -inf NaN, as NumPy's chain makes them (so any additive mask is written as is)."""
    x, w, b, mask = _arrays(5, 1, 4, 6, 2, 3, (1, 1, 4, 4))
    mask[..., 1, :] = fill
    g = _graph(x, w, b, (1, 1, 4, 4), 2)
    with np.errstate(invalid="ignore"):
        ours = einsat.run(g, {"x": x, "mask": mask})[g.outputs[0]]
    (got,) = ort_run(to_onnx(g, contrib=True), {"x": x, "mask": mask})
    assert np.isnan(ours[0, 1]).all() == (fill == -np.inf)
    np.testing.assert_allclose(got, ours, rtol=1e-5, atol=1e-5)


def test_shapes_that_do_not_fit_are_refused_by_name():
    x, w, b, _ = _arrays(0, 1, 4, 6, 2, 3, None)
    with pytest.raises(ShapeError, match="not a multiple of num_heads"):
        _graph(x, w, b, None, 4)
    with pytest.raises(ShapeError, match=r"w \[Hin, 3·H\]"):
        _graph(x, w[:5], b, None, 2)
    with pytest.raises(ShapeError, match="bias"):
        _graph(x, w, b[:-1], None, 2)


def test_the_com_microsoft_op_imports_as_packed_attention():
    """What onnxruntime's transformers optimizer writes for BERT: read as einsat's op, run by NumPy
    as onnxruntime runs it, and written back as the same contrib op."""
    x, w, b, mask = _arrays(6, 2, 5, 6, 3, 4, (2, 3, 5, 5))
    node = helper.make_node("Attention", ["x", "w", "b", "", "", "mask"], ["y"], domain="com.microsoft", num_heads=3)
    graph = helper.make_graph([node], "att", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                              helper.make_tensor_value_info("mask", TensorProto.FLOAT, mask.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 5, 12))],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    g = einsat.load_onnx(model)
    (n,) = g.nodes
    assert n.op is Op.PACKED_ATTENTION and n.attrs == {"num_heads": 3, "scale": 0.5, "causal": 0}
    ours = einsat.run(g, {"x": x, "mask": mask})[g.outputs[0]]
    (want,) = ort_run(model, {"x": x, "mask": mask})
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)
    back = to_onnx(g, contrib=True)
    assert [(o.op_type, o.domain) for o in back.graph.node] == [("Attention", "com.microsoft")]


def test_symbolic_batch_and_sequence_write_the_contrib_op_and_run_at_every_size():
    """A file with dynamic axes keeps them: the mask's rank-4 shape and its rows are computed from
    the inputs' shapes at run time."""
    _, w, b, _ = _arrays(8, 1, 1, 6, 3, 4, None)
    node = helper.make_node("Attention", ["x", "w", "b", "", "", "mask"], ["y"], domain="com.microsoft", num_heads=3)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 6]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", 1, 1, "S"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 12])]
    graph = helper.make_graph([node], "att", inputs, outputs,
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    g = einsat.load_onnx(helper.make_model(graph, opset_imports=opsets, ir_version=8), symbolic=True)
    assert g.nodes[0].op is Op.PACKED_ATTENTION
    written = to_onnx(g, contrib=True)
    assert ("com.microsoft", "Attention") in {(n.domain, n.op_type) for n in written.graph.node}
    assert [d.dim_param for d in written.graph.input[0].type.tensor_type.shape.dim][:2] == ["B", "S"]
    for bsz, s in ((1, 3), (2, 7)):
        x, _, _, mask = _arrays(bsz + s, bsz, s, 6, 3, 4, (bsz, 1, 1, s))
        (got,) = ort_run(written, {"x": x, "mask": mask})
        np.testing.assert_allclose(got, _reference(x, w, b, mask, 3, 0.5, 0), rtol=1e-4, atol=1e-4)
