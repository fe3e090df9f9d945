"""Opaque ONNX nodes on the NumPy backend run in onnxruntime, one cached session per node
signature; onnx.reference runs only what onnxruntime lacks."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import einsat
from einsat.ir import Graph, Node, Op, TensorType
from einsat.runtime import onnx_nodes

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MS = "com.microsoft"


def opaque(proto, inputs, outputs, types, opset):
    return Node(Op.OPAQUE, inputs, outputs, {"op_type": proto.op_type, "domain": proto.domain,
                                             "node": proto.SerializeToString(), "opset": opset,
                                             "output_types": tuple(types)}, proto.name or outputs[0])


def embedding_tail():
    """The ONNX model and einsat's graph of it with every ONNX node opaque: BERT's position ids
    (GatherElements of [1, 512] at [1, 128], where onnx.reference raises), then onnxruntime's
    contrib FastGelu and Gelu (unknown to onnx.reference)."""
    gather = helper.make_node("GatherElements", ["pos", "ids"], ["p"], axis=1, name="pos_gather")
    cast = helper.make_node("Cast", ["p"], ["pf"], to=F, name="cast")
    add = helper.make_node("Add", ["x", "pf"], ["h"], name="add")
    fast = helper.make_node("FastGelu", ["h"], ["y"], domain=MS, name="fast_gelu")
    gelu = helper.make_node("Gelu", ["x"], ["z"], domain=MS, name="gelu")
    pos = np.arange(512, dtype=np.int64)[None]
    ins = [helper.make_tensor_value_info("ids", I64, [1, 128]), helper.make_tensor_value_info("x", F, [1, 128])]
    outs = [helper.make_tensor_value_info("y", F, [1, 128]), helper.make_tensor_value_info("z", F, [1, 128])]
    model = helper.make_model(helper.make_graph([gather, cast, add, fast, gelu], "tail", ins, outs,
                                                [numpy_helper.from_array(pos, "pos")]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    t = TensorType((1, 128))
    nodes = [opaque(gather, ["pos", "ids"], ["p"], [TensorType((1, 128), np.int64)], 17),
             opaque(cast, ["p"], ["pf"], [t], 17), opaque(add, ["x", "pf"], ["h"], [t], 17),
             opaque(fast, ["h"], ["y"], [t], 1), opaque(gelu, ["x"], ["z"], [t], 1)]
    graph = Graph(nodes, {"ids": TensorType((1, 128), np.int64), "x": t}, ["y", "z"], {"pos": pos}, "tail")
    return model, graph


def feeds():
    rng = np.random.default_rng(0)
    return {"ids": rng.integers(0, 512, (1, 128)), "x": rng.standard_normal((1, 128)).astype(np.float32)}


def test_opaque_ops_onnx_reference_cannot_run_match_onnxruntime():
    model, graph = embedding_tail()
    values = {"pos": np.arange(512, dtype=np.int64)[None], "h": feeds()["x"], **feeds()}
    for node in model.graph.node:  # each of these alone fails in onnx.reference
        if node.name in ("pos_gather", "fast_gelu", "gelu"):
            ins = [helper.make_tensor_value_info(i, I64 if values[i].dtype == np.int64 else F, values[i].shape)
                   for i in node.input]
            one = helper.make_model(helper.make_graph([node], "one", ins, [helper.make_empty_tensor_value_info(
                node.output[0])]), opset_imports=model.opset_import, ir_version=10)
            with pytest.raises((ValueError, NotImplementedError)):
                ReferenceEvaluator(one).run(None, {i: values[i] for i in node.input})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())
    got = einsat.run(graph, feeds())
    for name, w in zip(graph.outputs, want):
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_the_imported_model_runs_too():
    model, _ = embedding_tail()
    g = einsat.load_onnx(model)
    assert {n.attrs["op_type"] for n in g.nodes if n.op is Op.OPAQUE} >= {"FastGelu", "Gelu"}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())
    got = einsat.run(g, feeds())
    for name, w in zip(g.outputs, want):
        np.testing.assert_allclose(got[name], w, rtol=1e-6, err_msg=name)


def leaky_node(name, dtype=np.float32, **attrs):
    proto = helper.make_node("LeakyRelu", ["a"], ["b"], name=name, **attrs)
    return opaque(proto, [f"{name}_in"], [f"{name}_out"], [TensorType((3,), dtype)], 16)


def test_one_session_per_node_signature():
    x = [np.ones(3, np.float32)]
    a, b = leaky_node("first", alpha=0.5), leaky_node("second", alpha=0.5)
    session = onnx_nodes._session(onnx_nodes.signature(a, x))
    assert session is not None
    assert onnx_nodes._session(onnx_nodes.signature(b, x)) is session  # other names, same node
    other = leaky_node("third", alpha=0.25)
    assert onnx_nodes._session(onnx_nodes.signature(other, x)) is not session  # other attributes
    double = leaky_node("fourth", np.float64, alpha=0.5)
    assert onnx_nodes.signature(double, [np.ones(3)]) != onnx_nodes.signature(a, x)  # other dtypes
    np.testing.assert_array_equal(onnx_nodes.run_opaque(other, [np.array([-4, 0, 2], np.float32)])[0], [-1, 0, 2])


def test_onnx_reference_runs_what_onnxruntime_lacks():
    """Momentum (ai.onnx.preview.training) has no onnxruntime kernel: onnx.reference runs it."""
    proto = helper.make_node("Momentum", ["r", "t", "x", "g", "v"], ["x2", "v2"], domain="ai.onnx.preview.training",
                             alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.0)
    t3 = TensorType((3,))
    node = opaque(proto, ["r", "t", "x", "g", "v"], ["x2", "v2"], [t3, t3], 1)
    args = [np.array(0.1, np.float32), np.array(1, np.int64), np.ones(3, np.float32),
            np.array([1, 2, 3], np.float32), np.array([1, 0, -1], np.float32)]
    assert onnx_nodes._session(onnx_nodes.signature(node, args)) is None
    x2, v2 = onnx_nodes.run_opaque(node, args)
    v_want = 0.9 * args[4] + 0.5 * args[3]  # the spec's standard momentum
    np.testing.assert_allclose(v2, v_want, rtol=1e-6)
    np.testing.assert_allclose(x2, args[2] - 0.1 * v_want, rtol=1e-6)


def test_an_op_nothing_implements_is_a_clear_error_naming_the_node_op_and_domain(tmp_path):
    from einsat.errors import ExecutionError
    from tests.cli.test_optimize import custom_op_model
    custom_op_model(tmp_path / "c.onnx")
    g = einsat.load_onnx(tmp_path / "c.onnx")
    assert [n.name for n in onnx_nodes.unrunnable(g)] == ["fancy"]
    with pytest.raises(ExecutionError) as e:
        einsat.run(g, {"x": np.ones((4, 8), np.float32)})
    text = str(e.value)
    assert "'fancy'" in text and "MyFancyOp" in text and "'com.example'" in text
    assert "NotImplementedError" not in text and "einsat.register_onnx_op" in text


def test_a_registered_implementation_runs_an_op_nothing_else_implements(tmp_path):
    from onnx.reference.op_run import OpRun

    from tests.cli.test_optimize import custom_op_model

    class MyFancyOp(OpRun):
        op_domain = "com.example"

        def _run(self, x, scale=None):
            return (np.tanh(x) * np.float32(scale),)

    custom_op_model(tmp_path / "c.onnx", scale=3.0)
    g = einsat.load_onnx(tmp_path / "c.onnx")
    einsat.register_onnx_op(MyFancyOp)
    try:
        assert onnx_nodes.unrunnable(g) == []
        x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
        w = g.weights["w"]
        want = np.maximum(np.tanh(x @ w + x @ w) * 3, 0)  # relu(fancy(x @ w + x @ w)), fancy = 3 tanh
        np.testing.assert_allclose(einsat.run(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    finally:
        from einsat.ir.ops.opaque import unregister_onnx_op
        unregister_onnx_op(MyFancyOp)
    assert [n.name for n in onnx_nodes.unrunnable(g)] == ["fancy"]
