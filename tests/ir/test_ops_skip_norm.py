"""skip_layernorm and skip_rmsnorm: NumPy semantics (the norm of x + skip (+ bias), and the sum),
the export as onnxruntime's com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization
where contrib ops are allowed and as the minimal standard chain where not (or where onnxruntime's
kernel does not take the shapes), both run on onnxruntime against NumPy, and the import of the
com.microsoft ops."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.errors import ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.ir.types import TensorType
from einsat.testing.strategies import arrays, broadcastable, seeds, shapes
from tests.ir.onnx_check import ort_run

CONTRIB = {Op.SKIP_LAYERNORM: "SkipLayerNormalization", Op.SKIP_RMSNORM: "SkipSimplifiedLayerNormalization"}
NORM = {Op.SKIP_LAYERNORM: "LayerNormalization", Op.SKIP_RMSNORM: "RMSNormalization"}


def _graph(op, x, skip, scale, beta=None, bias=None, axis=-1, eps=1e-5, read_sum=True):
    """x and skip inputs, the rest weights; outputs the norm and (read_sum) relu of the sum."""
    b = GraphBuilder("skip")
    xi, si = b.input("x", x.shape, x.dtype), b.input("skip", skip.shape, skip.dtype)
    params = [b.weight("scale", scale)]
    if op is Op.SKIP_LAYERNORM:
        params.append(None if beta is None else b.weight("beta", beta))
    params.append(None if bias is None else b.weight("bias", bias))
    y, s = b.op(op, xi, si, *params, axis=axis, epsilon=eps)
    return b.build(y, b.relu(s)) if read_sum else b.build(y)


def _reference(op, x, skip, scale, beta, bias, axis, eps):
    """float64 arithmetic on the same values: (norm, sum)."""
    s = x.astype(np.float64) + skip + (0 if bias is None else bias)
    axes = tuple(range(axis % x.ndim, x.ndim))
    if op is Op.SKIP_LAYERNORM:
        d = s - s.mean(axis=axes, keepdims=True)
        y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + np.float32(eps)) * scale
        return (y if beta is None else y + beta), s
    return s / np.sqrt((s * s).mean(axis=axes, keepdims=True) + np.float32(eps)) * scale, s


@pytest.mark.parametrize("op", [Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM])
@settings(max_examples=20, deadline=None)
@given(shape=shapes(1, 4, 1, 6), data=st.data(), seed=seeds, eps=st.sampled_from([1e-5, 1e-12, 0.5]))
def test_numpy_semantics_match_the_formula(op, shape, data, seed, eps):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    skip_shape = data.draw(broadcastable(shape))
    x, skip, scale, beta, bias = arrays(seed, shape, skip_shape, data.draw(broadcastable(norm)),
                                        data.draw(broadcastable(norm)), data.draw(broadcastable(norm)))
    beta = beta if op is Op.SKIP_LAYERNORM and data.draw(st.booleans()) else None
    bias = bias if data.draw(st.booleans()) else None
    g = _graph(op, x, skip, scale, beta, bias, axis, eps)
    node = g.nodes[0]
    assert node.attrs["axis"] == axis % len(shape) and len(node.outputs) == 2
    got = einsat.run(g, {"x": x, "skip": skip})
    y, s = _reference(op, x, skip, scale, beta, bias, axis, eps)
    assert got[g.outputs[0]].dtype == np.float32 and got[g.outputs[0]].shape == x.shape
    np.testing.assert_allclose(got[g.outputs[0]], y, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got[g.outputs[1]], np.maximum(s, 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM])
@pytest.mark.parametrize("shape", [(2, 5, 8), (6, 8)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("read_sum", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_contrib_export_runs_on_onnxruntime_and_matches_numpy(op, shape, with_bias, read_sum, dtype):
    x, skip, scale, beta, bias = (a.astype(dtype) for a in arrays(7, shape, shape, (8,), (8,), (8,)))
    g = _graph(op, x, skip, scale, beta if op is Op.SKIP_LAYERNORM else None, bias if with_bias else None,
               read_sum=read_sum)
    feeds = {"x": x, "skip": skip}
    ours = einsat.run(g, feeds)
    model = to_onnx(g, contrib=True)
    onnx.checker.check_model(model)
    (node, *rest) = model.graph.node
    assert (node.op_type, node.domain) == (CONTRIB[op], "com.microsoft")
    assert [n.op_type for n in rest] == (["Relu"] if read_sum else [])
    # the sum is its fourth output where it is read, else the node writes the norm alone
    assert len(node.output) == (4 if read_sum else 1) and node.output[1:3] in ([], ["", ""])
    assert {o.domain: o.version for o in model.opset_import}["com.microsoft"] == 1
    theirs = ort_run(model, feeds)
    tol = 2e-5 if dtype == np.float32 else 4e-3
    for name, want in zip(g.outputs, theirs):
        np.testing.assert_allclose(want.astype(np.float64), ours[name].astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("op", [Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM])
@pytest.mark.parametrize("opset, contrib, shape, axis", [
    (26, False, (2, 5, 8), -1),   # contrib ops not allowed: the standard ops
    (17, False, (2, 5, 8), -1),   # RMSNormalization is 23's: rmsnorm's chain below
    (26, True, (2, 3, 5, 8), -1),  # onnxruntime's kernel takes rank 2 or 3 only
    (26, True, (5, 8), 0),        # and the last axis only
])
def test_the_standard_export_runs_on_onnxruntime_and_writes_no_contrib_op(op, opset, contrib, shape, axis):
    norm = shape[axis % len(shape):]
    x, skip, scale, beta, bias = arrays(3, shape, shape, norm, norm, norm)
    g = _graph(op, x, skip, scale, beta if op is Op.SKIP_LAYERNORM else None, bias, axis=axis)
    model = to_onnx(g, opset=opset, contrib=contrib)
    onnx.checker.check_model(model, full_check=True)
    types = [n.op_type for n in model.graph.node]
    assert all(n.domain == "" for n in model.graph.node) and {o.domain for o in model.opset_import} == {""}
    norm_ops = [NORM[op]] if op is Op.SKIP_LAYERNORM or opset >= 23 else ["Mul", "ReduceMean", "Add", "Sqrt", "Div",
                                                                          "Mul"]
    assert types == ["Add", "Add"] + norm_ops + ["Relu"]
    feeds = {"x": x, "skip": skip}
    ours = einsat.run(g, feeds)
    for name, want in zip(g.outputs, ort_run(model, feeds)):
        np.testing.assert_allclose(want, ours[name], rtol=2e-5, atol=2e-5)


def _contrib_model(op_type, with_beta, outputs):
    rng = np.random.default_rng(1)
    inits = {"gamma": rng.standard_normal(8).astype(np.float32), "bias": rng.standard_normal(8).astype(np.float32)}
    ins = ["x", "skip", "gamma"]
    if with_beta:
        inits["beta"] = rng.standard_normal(8).astype(np.float32)
        ins.append("beta")
    elif op_type == "SkipLayerNormalization":
        ins.append("")
    ins.append("bias")
    nodes = [helper.make_node(op_type, ins, outputs, domain="com.microsoft", epsilon=1e-6)]
    graph_outputs = [o for o in outputs if o]
    graph = helper.make_graph(nodes, "contrib",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 8]) for n in ("x", "skip")],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT,
                                                             [2, 4, 1] if o == "mean" else [2, 4, 8])
                               for o in graph_outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@pytest.mark.parametrize("op_type, op, with_beta", [("SkipLayerNormalization", Op.SKIP_LAYERNORM, True),
                                                     ("SkipLayerNormalization", Op.SKIP_LAYERNORM, False),
                                                     ("SkipSimplifiedLayerNormalization", Op.SKIP_RMSNORM, False)])
def test_the_com_microsoft_ops_import_as_the_skip_ops(op_type, op, with_beta):
    """What onnxruntime's transformers optimizer writes: read as einsat's op, run by NumPy as
    onnxruntime runs it, and written back as the same contrib op."""
    model = _contrib_model(op_type, with_beta, ["y", "", "", "s"])
    g = einsat.load_onnx(model)
    (node,) = g.nodes
    assert node.op is op and node.attrs == {"axis": 2, "epsilon": float(np.float32(1e-6))}
    assert list(node.outputs) == list(g.outputs) == ["y", "s"]
    x, skip = arrays(5, (2, 4, 8), (2, 4, 8))
    ours = einsat.run(g, {"x": x, "skip": skip})
    for name, want in zip(["y", "s"], ort_run(model, {"x": x, "skip": skip})):
        np.testing.assert_allclose(ours[name], want, rtol=2e-5, atol=2e-5)
    back = to_onnx(g, contrib=True)
    assert [(n.op_type, n.domain) for n in back.graph.node] == [(op_type, "com.microsoft")]


def test_a_contrib_op_whose_statistics_are_read_stays_opaque_and_runs():
    model = _contrib_model("SkipLayerNormalization", True, ["y", "mean", "", ""])
    g = einsat.load_onnx(model)
    assert [n.op for n in g.nodes] == [Op.OPAQUE]
    x, skip = arrays(6, (2, 4, 8), (2, 4, 8))
    ours = einsat.run(g, {"x": x, "skip": skip})
    for name, want in zip(g.outputs, ort_run(model, {"x": x, "skip": skip})):
        np.testing.assert_allclose(ours[name], want, rtol=1e-6, atol=1e-6)


def test_shape_errors():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"skip \[3, 5\] f32 does not broadcast to x"):
        b.skip_layernorm(x, b.input("s", (3, 5)), b.input("g", (4,)))
    with pytest.raises(ShapeError, match=r"bias \[3\] f32 does not broadcast to the normalized dims \[4\]"):
        b.skip_rmsnorm(x, b.input("s2", (2, 3, 4)), b.input("g2", (4,)), b.input("c", (3,)))


@pytest.mark.parametrize("op", [Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM])
def test_the_cpu_profiler_times_the_contrib_op(op):
    """cost="cpu" times a signature as a one-node onnxruntime session (`runtime.profiler`): for a
    skip op that node is onnxruntime's contrib kernel, its domain imported, and it runs."""
    from einsat.ir.signature import signature_of
    from einsat.runtime.profiler import ort_signature_runner, signature_graph

    t, v = TensorType((1, 16, 32), np.float32), TensorType((32,), np.float32)
    ins = [t, t, v, v, v] if op is Op.SKIP_LAYERNORM else [t, t, v, v]
    sig = signature_of(op, {"axis": 2, "epsilon": 1e-5}, ins)
    model = to_onnx(signature_graph(sig), contrib=True)
    assert [(n.op_type, n.domain) for n in model.graph.node] == [(CONTRIB[op], "com.microsoft")]
    run = ort_signature_runner(sig, threads=1)
    assert all(run() > 0 for _ in range(3))
