"""`einsat info`, called as `einsat.cli.main([...])` with captured output."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from einsat.cli import main
from tests.work_bounded import BY_WORK, ended_by_work

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def test_info_lists_ops_flops_bytes_and_opaque_ops(capsys):
    assert main(["info", str(ZOO / "light_bvlc_alexnet.onnx")]) == 0
    out = capsys.readouterr().out
    assert "data_0  [1, 3, 224, 224] f32" in out.replace("    ", "  ")
    assert re.search(r"prob_1\s+\[1, 1000\] f32", out)
    row = re.compile(r"^  (\w[\w ]*?)\s+(\d+)\s+\S+ ?\w*\s+\S+ ?\w*B$", re.MULTILINE)
    rows = {m.group(1): int(m.group(2)) for m in row.finditer(out)}
    # conv 5, relu 7, lrn 2, maxpool 3, reshape 1, gemm 3, softmax 1; the Dropouts are identities
    assert rows["conv"] == 5 and rows["gemm"] == 3 and rows["lrn"] == 2 and rows["total"] == 22
    # AlexNet: 0.72 GMACs in its convolutions and fully connected layers, 2 FLOPs each
    total = re.search(r"^  total\s+\d+\s+([\d.]+) G", out, re.MULTILINE)
    assert total and 1.3 < float(total.group(1)) < 1.6
    assert "opaque" not in out


def test_info_names_the_opaque_ops(tmp_path, capsys):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), helper.make_node("Relu", ["v"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.array([3], np.int64), "k")]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "topk.onnx")
    assert main(["info", str(tmp_path / "topk.onnx")]) == 0
    out = capsys.readouterr().out
    assert ("opaque (no einsat op; run by onnxruntime, or onnx.reference where onnxruntime lacks it; "
            "FLOPs estimated): TopK") in out


def test_info_fixes_symbolic_dims_with_input_shape(tmp_path, capsys):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(np.ones((4, 3), np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "sym.onnx"
    onnx.save(m, path)
    assert main(["info", str(path)]) == 0  # it lists the symbolic dims and says how to pin them
    out = capsys.readouterr().out
    assert re.search(r"x\s+\[batch, 4\]", out) and "symbols: batch" in out and "--dim batch=" in out
    assert main(["info", str(path), "--input-shape", "x=8,4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"y\s+\[8, 3\] f32", out) and re.search(r"matmul\s+1\s+192\s", out)
    assert main(["info", str(path), "--input-shape", "x=eight"]) == 2
    assert "integer dims" in capsys.readouterr().err


def test_info_lists_every_symbolic_dim_of_a_decode_export_in_one_run(capsys):
    """A Llama decode export has six inputs over two symbols (one of them as `past_sequence + 1`):
    one `einsat info` lists them all, and one `--dim` per symbol pins every input (#40 item 5)."""
    path = str(Path(__file__).resolve().parents[1] / "data" / "models" / "hf_llama_decode_dynamo.onnx")
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert re.search(r"attention_mask\s+\[batch, past_sequence \+ 1\]", out)
    for k in (0, 1):
        for kv in ("key", "value"):
            assert re.search(rf"past_key_values\.{k}\.{kv}\s+\[batch, 2, past_sequence, 16\]", out)
    assert "symbols: batch, past_sequence" in out
    assert main(["info", path, "--dim", "batch=2", "--dim", "past_sequence=7", "--fill-weights", "random"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"attention_mask\s+\[2, 8\] i64", out) and re.search(r"present\.1\.value\s+\[2, 2, 8, 16\]", out)
    assert main(["info", path, "--dim", "seq=7"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "['seq']" in err and "['batch', 'past_sequence']" in err
    assert main(["info", path, "--dim", "batch=0"]) == 2
    assert "N >= 1" in capsys.readouterr().err


def test_info_on_a_bad_file_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 not onnx")
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("einsat: error: ") and "bad.onnx" in err and err.count("\n") == 1


def test_readme_links_resolve_inside_the_repository():
    """A clone has only what is committed: every relative link and picture of the README is in the repo
    (tests/test_citations.py checks that no file cites one outside it)."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)\)", readme)
    assert "docs/architecture.md" in links and "docs/images/playground-egraph.svg" in links
    for link in links:
        if "://" not in link:
            assert (root / link).exists(), link


def test_info_says_which_inputs_are_stripped_weights(tmp_path, capsys):
    from tests.cli.test_optimize import stripped_model
    names = stripped_model(tmp_path / "s.onnx")
    assert main(["info", str(tmp_path / "s.onnx")]) == 0
    out = capsys.readouterr().out
    inputs = out.split("  inputs:\n", 1)[1].split("  outputs:", 1)[0]
    assert inputs.split() == ["x", "[1,", "8,", "10,", "10]", "f32"]  # the real input, not the weights
    assert not any(re.search(rf"^\s+{n}\s", out, re.MULTILINE) for n in names)
    assert f"stripped weights: {len(names)} tensors" in out and "--fill-weights random" in out
    assert main(["info", str(tmp_path / "s.onnx"), "--fill-weights", "random"]) == 0
    assert "stripped" not in capsys.readouterr().out  # filled: they are weights now


def test_info_does_not_promise_to_run_an_op_nothing_implements(tmp_path, capsys):
    from tests.cli.test_optimize import custom_op_model
    custom_op_model(tmp_path / "c.onnx")
    assert main(["info", str(tmp_path / "c.onnx")]) == 0
    out = capsys.readouterr().out
    assert "MyFancyOp" in out and not [line for line in out.splitlines() if "MyFancyOp" in line and "run by" in line]
    (line,) = [line for line in out.splitlines() if "MyFancyOp" in line and "opaque MyFancyOp" not in line]
    assert "cannot run" in line and "com.example" in line and "'fancy'" in line


def _external_data_model(tmp_path) -> Path:
    m = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        initializer=[numpy_helper.from_array(np.ones((64, 64), np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data",
                    size_threshold=0)
    return path


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("einsat: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_file_errors_are_one_line(tmp_path, capsys):
    """A missing or short external-data file, a directory, a missing file: one `einsat: error:` line each,
    for `info` and `optimize` alike, naming what to do where einsat can tell."""
    path = _external_data_model(tmp_path)
    assert main(["info", str(path)]) == 0
    capsys.readouterr()
    data = (tmp_path / "ext.onnx.data").read_bytes()
    (tmp_path / "ext.onnx.data").unlink()
    for command in (["info", str(path)], ["optimize", str(path), "-o", str(tmp_path / "out.onnx")]):
        assert main(command) == 2
        line = _one_error_line(capsys)
        assert "ext.onnx.data" in line and "not in" in line and str(tmp_path) in line, line
    (tmp_path / "ext.onnx.data").write_bytes(data[:100])  # short
    assert main(["info", str(path)]) == 2
    assert "external weight data" in _one_error_line(capsys)
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "a.onnx").write_bytes(b"")
    for command in (["info", str(folder)], ["optimize", str(folder), "-o", str(tmp_path / "out.onnx")]):
        assert main(command) == 2
        line = _one_error_line(capsys)
        assert "is a directory" in line and "a.onnx" in line, line
    assert main(["info", str(tmp_path / "nope.onnx")]) == 2
    assert "no such file" in _one_error_line(capsys)
    assert not (tmp_path / "out.onnx").exists()


def test_input_shape_on_a_static_input_is_refused(tmp_path, capsys):
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["image"], ["y"])], "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 64, 64])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "static.onnx"
    onnx.save(m, path)
    for command in (["info", str(path)], ["optimize", str(path), "-o", str(tmp_path / "out.onnx")]):
        assert main([*command, "--input-shape", "image=1,3,64,64"]) == 2
        line = _one_error_line(capsys)
        assert "'image' already has the static shape [2, 3, 64, 64]" in line, line
    assert not (tmp_path / "out.onnx").exists()


def _untyped_custom_op_model(path: Path) -> None:
    """relu(MyPairOp(x @ w + x @ w)) where MyPairOp (domain com.example) doubles the last axis and the
    model declares no type for its output: ONNX shape inference cannot type it. The sum gives the search
    something to rewrite."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("MatMul", ["x", "w"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h", "h2"], ["s"], name="sum"),
             helper.make_node("MyPairOp", ["s"], ["f"], name="pair", domain="com.example"),
             helper.make_node("Relu", ["f"], ["y"], name="relu")]
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    g = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 1)],
                                ir_version=10), path)


def test_an_untyped_opaque_op_is_typed_by_running_it_once(tmp_path, capsys):
    """Without an implementation the error names both ways out; with `register_onnx_op`'s, `einsat info`
    describes the model (the op's output type learned by running it once) and it optimizes, proved."""
    from onnx.reference.op_run import OpRun

    import einsat
    from einsat.ir.ops.opaque import unregister_onnx_op

    class MyPairOp(OpRun):
        op_domain = "com.example"

        def _run(self, x):
            return (np.concatenate([x, 2 * x], axis=-1),)

    path = tmp_path / "pair.onnx"
    _untyped_custom_op_model(path)
    assert main(["info", str(path)]) == 2
    line = _one_error_line(capsys)
    assert "'f'" in line and "register_onnx_op" in line and "value_info" in line, line
    einsat.register_onnx_op(MyPairOp)
    try:
        assert main(["info", str(path)]) == 0
        out = capsys.readouterr().out
        assert re.search(r"y\s+\[4, 16\] f32", out), out
        g = einsat.load_onnx(path)
        x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
        h = 2 * (x @ numpy_helper.to_array(onnx.load(path).graph.initializer[0]))
        np.testing.assert_allclose(einsat.run(g, {"x": x})["y"], np.maximum(np.concatenate([h, 2 * h], -1), 0),
                                   rtol=1e-5, atol=1e-6)
        result = einsat.optimize(g, cost="h100", **BY_WORK)
        ended_by_work(result.report)
        assert "proved" in str(result.report.verification)
        einsat.save_onnx(result.graph, tmp_path / "out.onnx")
        assert einsat.load_onnx(tmp_path / "out.onnx").types["y"] == einsat.TensorType((4, 16))
    finally:
        unregister_onnx_op(MyPairOp)


def test_an_untyped_opaque_op_whose_shape_follows_its_values_is_refused(tmp_path, capsys):
    """Running once cannot type an op whose output shape depends on the values: two example inputs
    disagree, and the error says so rather than fixing the shape one draw happened to give."""
    from onnx.reference.op_run import OpRun

    import einsat
    from einsat.ir.ops.opaque import unregister_onnx_op

    class MyPairOp(OpRun):  # keeps the values above the mean: as many as the draw has
        op_domain = "com.example"

        def _run(self, x):
            return (x[x > x.mean()],)

    path = tmp_path / "pair.onnx"
    _untyped_custom_op_model(path)
    einsat.register_onnx_op(MyPairOp)
    try:
        assert main(["info", str(path)]) == 2
        line = _one_error_line(capsys)
        assert "'pair'" in line and "depend on its input values" in line, line
    finally:
        unregister_onnx_op(MyPairOp)
