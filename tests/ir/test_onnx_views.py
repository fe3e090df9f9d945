"""The written ONNX has no view the program does not need (#37, `einsat.ir.onnx.tidy`): no
Identity, no Transpose or Reshape that cancels or composes with its neighbour, no Reshape or
Expand to the shape a value already has; and what is left computes what the program computes
on onnxruntime. The optimized files of the bundled models hold no more views than their inputs."""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import einsat
from einsat.ir import Graph, GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.ir.onnx.tidy import minimal_views
from tests.ir.onnx_check import ort_run
from tests.work_bounded import by_work, ended_by_work

F = np.float32
VIEWS = ("Reshape", "Expand", "Transpose", "Identity")
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _views(model: onnx.ModelProto) -> Counter:
    """The view ops of `model`, less the Expand of a padding mask [..., 1, Sk] to the queries that ONNX
    Attention takes (onnxruntime does not broadcast its query axis): part of writing the fused op."""
    attention_inputs = {i for n in model.graph.node if n.op_type == "Attention" for i in n.input}
    return Counter(n.op_type for n in model.graph.node
                   if n.op_type in VIEWS and not (n.op_type == "Expand" and n.output[0] in attention_inputs))


def _matches_on_onnxruntime(g: Graph, model: onnx.ModelProto, seed: int = 0) -> None:
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in g.input_types().items()}
    want = einsat.run(g, feeds)
    for name, got in zip(g.outputs, ort_run(model, feeds)):
        np.testing.assert_allclose(got, want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_views_that_cancel_or_compose_are_not_written():
    b = GraphBuilder("views")
    x = b.input("x", (2, 3, 4), F)
    back = b.transpose(b.transpose(b.relu(x), perm=(0, 2, 1)), perm=(0, 2, 1))  # cancels
    turned = b.transpose(b.transpose(b.tanh(x), perm=(1, 0, 2)), perm=(0, 2, 1))  # one transpose
    flat = b.reshape(b.reshape(b.sigmoid(x), shape=(6, 4)), shape=(24,))  # one reshape
    same = b.reshape(b.exp(x), shape=(2, 3, 4))  # to its own shape
    g = b.build(b.add(back, b.weight("w", (4,), F)), turned, flat, b.add(same, x))
    model = to_onnx(g)
    assert _views(model) == Counter({"Transpose": 1, "Reshape": 1}), _views(model)
    perm = [list(a.ints) for n in model.graph.node if n.op_type == "Transpose" for a in n.attribute]
    assert perm == [[1, 2, 0]]
    _matches_on_onnxruntime(g, model)


def test_an_identity_at_an_output_is_written_only_where_the_output_needs_a_copy():
    b = GraphBuilder("outputs")
    x = b.input("x", (3, 4), F)
    y = b.relu(x)
    g = b.build(b.identity(y), b.squeeze(b.exp(x), axes=()), b.identity(x))  # the last: an input as output
    model = to_onnx(g)
    assert _views(model) == Counter({"Identity": 1}), _views(model)
    (copy,) = [n for n in model.graph.node if n.op_type == "Identity"]
    assert list(copy.input) == ["x"]
    _matches_on_onnxruntime(g, model)


def test_a_value_read_by_a_control_flow_body_keeps_its_name():
    """An If or Loop body reads outer values by name: the view writing such a value stays."""
    inner = helper.make_graph([helper.make_node("Add", ["a", "t"], ["b"])], "body", [], [])
    nodes = [helper.make_node("Identity", ["x"], ["t"]),
             helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)]
    kept = minimal_views(nodes, ["y"], [], {"x": (3,), "t": (3,)}, ["x", "c"])
    assert [n.op_type for n in kept] == ["Identity", "If"]


@pytest.mark.slow  # ~3 s; each fused form's export alone: tests/rewrites/derive/test_fusion_export.py
def test_a_program_of_onnx_ops_optimized_for_the_gpu_writes_no_views():
    """Every op of this program has its ONNX form (the fused chains write theirs back): the
    file written for the default cost adds no Reshape, Expand, Transpose or Identity."""
    b = GraphBuilder("block")
    x = b.input("x", (1, 16, 64), F)
    h = b.add(x, b.input("res", (1, 16, 64), F))
    n = b.layernorm(h, b.weight("g", (64,), F), b.weight("beta", (64,), F), axis=2)
    a = b.add(b.matmul(n, b.weight("w1", (64, 128), F)), b.weight("b1", (128,), F))
    half, root2, one = (b.const(v, F) for v in (0.5, np.sqrt(2.0), 1.0))
    gelu = b.mul(b.mul(a, half), b.add(b.erf(b.div(a, root2)), one))
    scores = b.softmax(b.add(b.mul(b.input("s", (1, 4, 16, 16), F), b.const(0.125, F)),
                             b.input("mask", (1, 1, 1, 16), F)), axis=3)
    g = b.build(b.add(h, b.matmul(gelu, b.weight("w2", (128, 64), F))), scores)
    assert not _views(to_onnx(g))
    result = einsat.optimize(g, cost="h100", **by_work(iterations=2, extractor="greedy"))
    ended_by_work(result.report)
    fused = [node for node in result.graph.nodes if node.op in (Op.EOP, Op.EOP_MULTI)]
    assert fused and all(node.attrs["chain"] for node in fused)  # the GPU program fuses; the file writes chains
    model = to_onnx(result.graph)
    assert not _views(model), _views(model)
    written = Counter(node.op_type for node in model.graph.node)
    # the GELU recognized in its erf chain is written as ONNX Gelu (onnxruntime: BiasGelu with its bias add)
    assert written["LayerNormalization"] == 1 and written["Softmax"] == 1 and written["Gelu"] == 1
    assert written["Erf"] == 0
    _matches_on_onnxruntime(g, model)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_encoder", "resnet18"])
def test_the_file_written_for_the_default_cost_has_no_more_views_than_its_input(name):
    path = MODELS / f"{name}.onnx"
    before = _views(onnx.load(path))
    result = einsat.optimize(str(path), **by_work(iterations=3, nodes=6000))
    after = _views(to_onnx(result.graph))
    for op in VIEWS:
        assert after[op] <= before[op], (name, op, before, after)


def test_a_slice_of_the_whole_tensor_is_not_written_and_a_real_one_is():
    """A Slice by steps of 1 that keeps every axis's length copies its input (a legacy decoder
    export's `past[:, :, :, :]`, eight of them per 2-layer decode step, one at each present
    output): dropped, also where it writes a graph output. A slice that shortens an axis, and
    one over the whole axis by step -1 (a reversal), stay."""
    b = GraphBuilder("slices")
    x = b.input("x", (2, 3, 4), F)
    r = b.relu(x)
    whole = b.op(Op.SLICE, r, starts=(0, 0, 0), ends=(2, 3, 4))
    part = b.op(Op.SLICE, b.exp(x), starts=(0, 1), ends=(2, 3))
    back = b.op(Op.SLICE, b.tanh(x), starts=(-1,), ends=(-5,), axes=(2,), steps=(-1,))
    g = b.build(b.add(whole, x), part, back, b.op(Op.SLICE, b.sigmoid(x), starts=(0,), ends=(2,)))
    model = to_onnx(g)
    slices = [n for n in model.graph.node if n.op_type == "Slice"]
    assert len(slices) == 2, [n.input[0] for n in slices]  # the shortened and the reversed
    assert not any(n.op_type == "Slice" and n.output[0] == g.outputs[3] for n in model.graph.node)
    assert any(n.op_type == "Sigmoid" and n.output[0] == g.outputs[3] for n in model.graph.node)
    _matches_on_onnxruntime(g, model)


def test_a_slice_is_written_over_the_axes_it_cuts_without_steps_of_one():
    """A cyclic shift (Swin's torch.roll, as a legacy export writes it): two Slices of one axis.
    Written over every axis with steps of 1, onnxruntime kept them as 58 Slices in Swin; over
    the axis they cut, without steps, it joins them into Splits (onnxslim's file ran 20). A
    reversal keeps its steps."""
    b = GraphBuilder("roll")
    x = b.relu(b.input("x", (1, 8, 8, 4), F))
    head = b.op(Op.SLICE, x, starts=(0, 3, 0, 0), ends=(1, 8, 8, 4))
    tail = b.op(Op.SLICE, x, starts=(0, 0, 0, 0), ends=(1, 3, 8, 4))
    back = b.op(Op.SLICE, x, starts=(-1,), ends=(-9,), axes=(2,), steps=(-1,))
    g = b.build(b.concat(head, tail, axis=1), back)
    model = to_onnx(g)
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    slices = [[consts[i] for i in n.input[1:]] for n in model.graph.node if n.op_type == "Slice"]
    assert sorted(slices) == [[[0], [3], [1]], [[3], [8], [1]], [[7], [-9], [2], [-1]]], slices
    _matches_on_onnxruntime(g, model)


def test_a_pad_by_zero_is_not_written_and_a_real_one_is():
    """Swin's legacy export pads each stage's map to a multiple of its window: by zero where the
    window divides it, a Pad that copies its input (twelve in swin_legacy, kept by einsat's file
    where onnxslim's dropped them). Dropped; a Pad that adds a border stays, and so does one
    whose begins and ends cancel (its shape is kept, its contents move)."""
    b = GraphBuilder("pads")
    x = b.input("x", (1, 4, 6, 8), F)
    zero = b.op(Op.PAD, b.relu(x), pads=(0, 0, 0, 0, 0, 0, 0, 0))
    border = b.op(Op.PAD, b.exp(x), pads=(0, 0, 1, 1, 0, 0, 1, 1))
    g = b.build(b.add(zero, x), border, b.op(Op.PAD, b.sigmoid(x), pads=(0,) * 8))
    model = to_onnx(g)
    pads = [n for n in model.graph.node if n.op_type == "Pad"]
    assert len(pads) == 1 and pads[0].output[0] == g.outputs[1], [n.output[0] for n in pads]
    assert any(n.op_type == "Sigmoid" and n.output[0] == g.outputs[2] for n in model.graph.node)
    _matches_on_onnxruntime(g, model)
    nodes = [helper.make_node("Pad", ["a", "p"], ["b"]), helper.make_node("Relu", ["b"], ["c"])]
    shifted = numpy_helper.from_array(np.array([0, 1, 0, -1], np.int64), "p")  # a row moved down: no alias
    kept = minimal_views(nodes, ["c"], [shifted], {"a": (3, 4), "b": (3, 4), "c": (3, 4)}, ["a"])
    assert [n.op_type for n in kept] == ["Pad", "Relu"]


def test_a_transpose_moving_only_axes_of_size_one_is_written_as_a_reshape_and_joins_its_neighbours():
    """[1, 1, h, d] -> [1, h, 1, d] keeps the elements in order: a Reshape, composed with the
    Reshape before it into one; a transpose that reorders two axes of size > 1 stays."""
    b = GraphBuilder("moves")
    x = b.input("x", (1, 64), F)
    heads = b.reshape(b.relu(x), shape=(1, 1, 4, 16))
    moved = b.transpose(heads, perm=(0, 2, 1, 3))
    swapped = b.transpose(b.reshape(b.exp(x), shape=(1, 1, 4, 16)), perm=(0, 1, 3, 2))
    g = b.build(b.tanh(moved), b.tanh(swapped))
    model = to_onnx(g)
    assert _views(model) == Counter({"Reshape": 2, "Transpose": 1}), _views(model)
    (t,) = [n for n in model.graph.node if n.op_type == "Transpose"]
    assert [list(a.ints) for a in t.attribute] == [[0, 1, 3, 2]]
    _matches_on_onnxruntime(g, model)


def test_an_eops_grid_of_the_shape_its_body_has_is_not_expanded():
    """An eOperator's expression writes its grid as an Expand of its body (`ir.expr.onnx`): where
    the body has the grid's shape already (an element-wise op of a whole input) no Expand is
    written, nor the constant it read."""
    from einsat.ir.expr import Call, Expr, Iter, fingerprint
    from einsat.ir.expr.build import read
    b = GraphBuilder("eop")
    x = b.input("x", (3, 4), F)
    g = b.build(b.eop(x, expr=fingerprint(Expr((Iter("i", 0, 3), Iter("j", 0, 4)), (),
                                               Call("relu", (read(0, "i", "j"),))))))
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Relu"]
    assert not model.graph.initializer  # the grid's shape was read by the Expand alone
    _matches_on_onnxruntime(g, model)


def _expand(x: str, out: str, shape) -> tuple[onnx.NodeProto, onnx.TensorProto]:
    target = numpy_helper.from_array(np.asarray(shape, np.int64), f"{out}_shape")
    return helper.make_node("Expand", [x, target.name], [out]), target


def _run(nodes, initializers, outputs) -> list[np.ndarray]:
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (2, 6))],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
                              initializer=initializers)
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(F)
    return ort_run(model, {"x": x})


def test_shapes_of_element_wise_gather_and_reduction_values_let_an_expansion_go():
    """The shapes the export's own values have follow from their ops' rules: an Expand to that
    shape writes its input unchanged and goes; one that broadcasts, or follows an op of another
    domain (whose rule tidy does not know), stays; the outputs are the same on onnxruntime."""
    axes = numpy_helper.from_array(np.asarray([1], np.int64), "axes")
    rows = numpy_helper.from_array(np.asarray([[0], [1]], np.int64), "rows")
    cols = numpy_helper.from_array(np.asarray([0, -1, 0], np.int64), "cols")
    e1, s1 = _expand("g", "e1", (2, 6))          # a Gelu's value: its input's shape
    e2, s2 = _expand("r", "e2", (2,))            # a ReduceSum's over constant axes, keepdims=0
    e3, s3 = _expand("gathered", "e3", (2, 3))   # a Gather's: the indices' shape, from an Add's broadcast
    wide, s4 = _expand("gathered", "wide", (4, 2, 3))  # a real broadcast
    e4, s5 = _expand("f", "e4", (2, 6))          # after com.microsoft's FastGelu: shape unknown
    nodes = [helper.make_node("Gelu", ["x"], ["g"]), e1,
             helper.make_node("ReduceSum", ["e1", "axes"], ["r"], keepdims=0), e2,
             helper.make_node("Add", ["rows", "cols"], ["i"]), helper.make_node("Gather", ["e2", "i"], ["gathered"]),
             e3, wide, helper.make_node("FastGelu", ["x"], ["f"], domain="com.microsoft"), e4]
    inits = [axes, rows, cols, s1, s2, s3, s4, s5]
    outputs = ["e3", "wide", "e4"]
    kept = minimal_views([onnx.NodeProto.FromString(n.SerializeToString()) for n in nodes], outputs, inits,
                         {"x": (2, 6)}, ["x"])
    assert [n.output[0] for n in kept if n.op_type == "Expand"] == ["wide", "e4"]
    assert [n.input[0] for n in kept if n.op_type == "ReduceSum"] == ["g"]  # e1 read as g itself
    assert [n.output[0] for n in kept if n.op_type == "Gather"] == ["e3"]  # the output written by the Gather
    for want, got in zip(_run(nodes, inits, outputs), _run(kept, inits, outputs)):
        np.testing.assert_array_equal(got, want)
