"""ONNX export: whole graphs are valid ONNX that onnxruntime runs to einsat's outputs; save_onnx
writes atomically and names the node that fails."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper

import einsat
from einsat.errors import OnnxError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import IR_VERSION, ExportContext, save_onnx, to_onnx
from einsat.ir.registry import opdef
from tests.ir.onnx_check import ort_run


def block():
    """A small CNN block touching weights, multi-output ops, expansions and layout ops."""
    b = GraphBuilder("block")
    x = b.input("x", (2, 3, 8, 8))
    y = b.relu(b.conv(x, b.weight("w", (4, 3, 3, 3)), b.weight("bias", (4,)), stride=2, padding=1))
    y = b.batchnorm(y, b.weight("s", (4,)), b.weight("t", (4,)), b.weight("m", (4,)),
                    b.weight("v", np.full(4, 0.5, np.float32)))
    left, right = b.split(y, axis=1, sizes=(1, 3))
    fixed = b.correct(right, b.slice(left, starts=(0, 0, 1), ends=(2, 1, 3), axes=(0, 1, 2)),
                      region=(0, 1, 1, 0, 2, 2, 3, 4))
    z = b.maxpool(b.concat(left, fixed, axis=1), kernel=2, stride=2, ceil_mode=1)
    flat = b.flatten(z)
    out = b.softmax(b.gemm(flat, b.weight("fc", (10, flat.shape[1])), b.weight("fcb", (10,)), trans_b=1))
    return b.build(out, right, names=["probs", "right"])


def test_export_is_valid_and_matches_onnxruntime(rng):
    g = block()
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == IR_VERSION
    # the least opset its nodes need: Split with `split` as an input, Softmax per axis, ... are 13's
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    ours = einsat.run(g, feeds)
    for name, theirs in zip(g.outputs, ort_run(model, feeds)):
        np.testing.assert_allclose(ours[name], theirs, rtol=1e-4, atol=1e-5)


def test_export_declares_types_and_weights():
    g = block()
    m = to_onnx(g).graph
    assert {t.name for t in m.initializer} >= set(g.weights)
    declared = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                for vi in (*m.input, *m.output, *m.value_info)}
    written = {o for n in m.node for o in n.output}
    for node in g.nodes:  # every einsat value the model holds has its static shape there
        for o in node.outputs:
            if o in written:
                assert declared[o] == list(g.types[o].shape), o
    # the values it does not hold: the softmax's output and the split's second, which the
    # builder's Identities name "probs" and "right"; the file needs no copies, the Softmax and
    # the Split write the outputs themselves (ir/onnx/tidy.py)
    assert {o for n in g.nodes for o in n.outputs} - written == {"softmax11", "split4_1"}
    assert "right" in next(n for n in m.node if n.op_type == "Split").output
    assert list(next(n for n in m.node if n.op_type == "Softmax").output) == ["probs"]
    assert [vi.name for vi in m.input] == ["x"] and [vi.name for vi in m.output] == ["probs", "right"]


def test_fresh_names_never_collide_with_graph_values():
    b = GraphBuilder()
    x = b.input("r/shape", (2, 6))
    y = b.reshape(x, shape=(3, 4), name="r")
    model = to_onnx(b.build(y))
    onnx.checker.check_model(model, full_check=True)
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    assert reshape.input[0] == "r/shape" and reshape.input[1] != "r/shape"


def test_save_onnx_writes_a_loadable_model(tmp_path):
    path = tmp_path / "block.onnx"
    save_onnx(block(), path)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert os.listdir(tmp_path) == ["block.onnx"]


def test_save_onnx_failure_names_the_node_and_leaves_nothing(tmp_path, monkeypatch):
    g = block()
    relu = type(opdef(Op.RELU))

    def broken(self, ctx, node):
        raise ValueError("no luck")

    monkeypatch.setattr(relu, "to_onnx", broken)
    path = tmp_path / "out.onnx"
    with pytest.raises(OnnxError, match=r"node 'relu\d+' \(relu\) .*no luck"):
        save_onnx(g, path)
    assert os.listdir(tmp_path) == []
    path.write_bytes(b"old")  # an existing file is left as it was
    with pytest.raises(OnnxError):
        save_onnx(g, path)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.onnx"]


def test_save_onnx_to_a_missing_directory_is_an_onnx_error(tmp_path):
    with pytest.raises(OnnxError, match="cannot write"):
        save_onnx(block(), tmp_path / "nope" / "out.onnx")


@pytest.mark.parametrize("cap", [12, 27, 17.0, True])
def test_caps_outside_what_einsat_writes_are_refused(cap):
    with pytest.raises(OnnxError, match="opsets 13 to 26"):
        to_onnx(block(), opset=cap)


def test_raw_nodes_declare_their_domain():
    ctx = ExportContext(block(), 21)
    custom = helper.make_node("Custom", ["x"], ["y"], domain="com.example")
    ctx.raw_node(custom, domain="com.example", opset=3)
    assert ctx.domains == {"": 21, "com.example": 3}
    assert ctx.nodes[-1].name  # named, for error messages
    with pytest.raises(OnnxError, match="opset 22, the opset cap is 21"):
        ctx.raw_node(helper.make_node("Relu", ["x"], ["z"]), opset=22)
    with pytest.raises(OnnxError, match="ONNX Attention needs opset 23, the opset cap is 21"):
        ctx.raw_node(helper.make_node("Attention", ["x", "x", "x"], ["z"]))


def test_round_trip_through_load_onnx(rng):
    from einsat.ir.onnx.io import load_onnx

    g = block()
    back = load_onnx(to_onnx(g))
    feeds = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    ours, again = einsat.run(g, feeds), einsat.run(back, feeds)
    for name in g.outputs:
        np.testing.assert_allclose(again[name], ours[name], rtol=1e-5, atol=1e-6)
    assert Op.OPAQUE not in {n.op for n in back.nodes}


def test_saved_model_gets_the_usual_file_mode(tmp_path):
    import os
    import stat

    import einsat

    b = einsat.GraphBuilder()
    g = b.build(b.relu(b.input("x", (2, 3))))
    old = os.umask(0o022)
    try:
        einsat.save_onnx(g, tmp_path / "m.onnx")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "m.onnx").st_mode) == 0o644


@pytest.mark.parametrize("opset", [18, 21, 22, 25, 26])
def test_saved_models_declare_the_ir_version_their_opset_needs_and_onnxruntime_opens_them(tmp_path, opset):
    """The pinned onnx writes IR 14 by default, which the pinned onnxruntime cannot open (it reads
    up to 13): einsat writes the lowest IR version the declared opset needs, 10 at least. The
    declared opset is the least the nodes need: Gelu's 20 where the cap has Gelu, else its
    chain's 13."""
    import onnxruntime as ort
    b = GraphBuilder("small")
    x = b.input("x", (2, 3))
    g = b.build(b.gelu(b.add(x, b.weight("w", (2, 3)))), names=["y"])
    save_onnx(g, tmp_path / "m.onnx", opset=opset)
    m = onnx.load(tmp_path / "m.onnx")
    declared = next(o.version for o in m.opset_import if o.domain == "")
    assert declared == (20 if opset >= 20 else 13)
    needed = helper.find_min_ir_version_for([helper.make_opsetid("", declared)])
    assert m.ir_version == max(IR_VERSION, needed) < onnx.IR_VERSION
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    xv = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (y,) = session.run(["y"], {"x": xv})
    np.testing.assert_allclose(y, einsat.run(g, {"x": xv})["y"], rtol=1e-6)
