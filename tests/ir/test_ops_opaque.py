"""The opaque op: ONNX nodes einsat has no op for run (onnxruntime on the NumPy backend, their registry
semantics through onnx.reference) and export unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.errors import AttributeValueError, ExecutionError, ShapeError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.ir.onnx.export import to_onnx
from einsat.ir.ops.opaque import run_onnx_node

F = TensorProto.FLOAT


def one_node_model(node, inputs, outputs, inits=(), opset=13):
    ins = [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, s, t in outputs]
    inits = [numpy_helper.from_array(v, n) for n, v in inits]
    graph = helper.make_graph([node], "g", ins, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def round_trip(model, feeds):
    """Import, run, export: einsat, onnxruntime on the original and on the export all agree."""
    g = einsat.load_onnx(model)
    assert all(n.op is Op.OPAQUE for n in g.nodes)
    exported = to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    ours = einsat.run(g, feeds)
    for name, ref, back in zip(g.outputs, ort_run(model, feeds), ort_run(exported, feeds)):
        np.testing.assert_allclose(ours[name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(back, ref)
    return g, exported


def test_multi_output_op_with_int_output():
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, largest=1)
    m = one_node_model(node, [("x", [4, 7], F)], [("values", [4, 3], F), ("indices", [4, 3], TensorProto.INT64)],
                       inits=[("k", np.array([3], np.int64))])
    g, _ = round_trip(m, {"x": np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)})
    node = g.nodes[0]
    assert node.outputs == ("values", "indices") and node.attrs["opset"] == 13
    assert g.flops() == 4 * 3 * 2  # the documented estimate: one operation per output element


def test_lrn_sums_over_channels():
    """onnx.reference's LRN is wrong when batch != channels (onnx/onnx#7805); an opaque LRN node
    runs the spec's (LRN imports as einsat's lrn op; this is the opaque evaluator's own fix)."""
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=0.3, beta=0.75, bias=1.0)
    m = one_node_model(node, [("x", [1, 8, 5, 5], F)], [("y", [1, 8, 5, 5], F)])
    x = np.random.default_rng(1).standard_normal((1, 8, 5, 5)).astype(np.float32)
    (got,) = run_onnx_node(node.SerializeToString(), "", 13, [x])
    np.testing.assert_allclose(got, ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_node_whose_schema_changed_is_converted_on_export():
    """Resize changed after opset 13: exporting under the default cap goes through the version
    converter to the cap's Resize (19's schema, whose meaning changed at 19: declared there)."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    m = one_node_model(node, [("x", [1, 2, 3, 4], F)], [("y", [1, 2, 6, 8], F)],
                       inits=[("scales", np.array([1, 1, 2, 2], np.float32))])
    g, exported = round_trip(m, {"x": np.random.default_rng(2).standard_normal((1, 2, 3, 4)).astype(np.float32)})
    assert g.nodes[0].inputs == ("x", "", "scales")  # an absent optional input keeps its position
    assert [o.version for o in exported.opset_import if o.domain == ""] == [19]


def test_attributes_round_trip_exactly():
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=1)
    m = one_node_model(node, [("x", [3, 4], F)], [("y", [3, 4], F)])
    _, exported = round_trip(m, {"x": np.arange(12, dtype=np.float32).reshape(3, 4)})
    (back,) = [n for n in exported.graph.node if n.op_type == "LpNormalization"]
    assert list(back.attribute) == list(node.attribute)


def opaque_node(node_proto, inputs, outputs, output_types, opset=13):
    return Node(Op.OPAQUE, inputs, outputs, {"op_type": node_proto.op_type, "node": node_proto.SerializeToString(),
                                             "opset": opset, "output_types": output_types})


def test_bad_attributes_and_arity_are_errors():
    proto = helper.make_node("Neg", ["a"], ["b"])
    t = TensorType((2,))
    with pytest.raises(AttributeValueError, match="node"):
        Graph([Node(Op.OPAQUE, ["x"], ["y"], {"op_type": "Neg", "node": "text", "opset": 13,
                                               "output_types": (t,)})], {"x": t}, ["y"])
    with pytest.raises(AttributeValueError, match="output_types"):
        Graph([opaque_node(proto, ["x"], ["y"], ())], {"x": t}, ["y"])
    with pytest.raises(ShapeError, match="takes 1 inputs"):
        Graph([opaque_node(proto, ["x", "x"], ["y"], (t,))], {"x": t}, ["y"])


def test_a_wrong_promised_type_fails_at_run_time_naming_the_node():
    proto = helper.make_node("Neg", ["a"], ["b"])
    g = Graph([opaque_node(proto, ["x"], ["y"], (TensorType((3,)),))], {"x": TensorType((2,))}, ["y"])
    with pytest.raises(ExecutionError, match=r"'y' \(opaque Neg\).*promised"):
        einsat.run(g, {"x": np.ones(2, np.float32)})


def test_run_onnx_node_returns_only_named_outputs():
    proto = helper.make_node("Dropout", ["a"], ["out", ""])
    (y,) = run_onnx_node(proto.SerializeToString(), "", 13, [np.ones(3, np.float32)])
    np.testing.assert_array_equal(y, np.ones(3, np.float32))
