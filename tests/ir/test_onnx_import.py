"""ONNX import: folding, names, opaque nodes, opsets, weights, and errors on bad input."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.errors import AttributeValueError, GraphError, OnnxError, ShapeError
from einsat.ir import Op
from einsat.ir.onnx.weights import STRIPPED_KEY, fill_random_weights, random_weight
from einsat.ir.registry import opdef

F = TensorProto.FLOAT


def make(nodes, inputs, outputs, inits=(), opset=17, value_info=()):
    """A model from (name, shape[, elem type]) inputs/outputs (float32; shape None: inferred)."""
    ins = [helper.make_tensor_value_info(v[0], v[2] if len(v) > 2 else F, v[1]) for v in inputs]
    outs = [helper.make_tensor_value_info(v[0], v[2] if len(v) > 2 else F, v[1]) for v in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in inits]
    graph = helper.make_graph(nodes, "m", ins, outs, initializer=inits, value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def ort_outputs(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check_against_ort(model, feeds, rtol=1e-5, atol=1e-6):
    g = einsat.load_onnx(model)
    ours = einsat.run(g, feeds)
    for name, ref in zip(g.outputs, ort_outputs(model, feeds)):
        np.testing.assert_allclose(ours[name], ref, rtol=rtol, atol=atol, err_msg=name)
    return g


def x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- weights, names, folding --------------------------------------------------------------------

def test_initializers_become_weights_and_names_are_kept():
    w = x(4, 3, 3, 3, seed=1)
    m = make([helper.make_node("Conv", ["img", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["y"], name="act")],
             [("img", [1, 3, 8, 8])], [("y", [1, 4, 8, 8])], inits=[("w", w)])
    g = check_against_ort(m, {"img": x(1, 3, 8, 8)})
    assert g.inputs == ("img",) and g.outputs == ("y",)
    assert [(n.name, n.op, n.outputs) for n in g.nodes] == [("conv", Op.CONV, ("c",)), ("act", Op.RELU, ("y",))]
    np.testing.assert_array_equal(g.weights["w"], w)


def test_shape_arithmetic_folds_into_attributes():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a flatten."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    m = make(nodes, [("x", [2, 3, 4])], [("y", [2, 12])],
             inits=[("zero", np.array(0, np.int64)), ("axes0", np.array([0], np.int64)),
                    ("minus1", np.array([-1], np.int64))])
    g = check_against_ort(m, {"x": x(2, 3, 4)})
    assert [n.op for n in g.nodes] == [Op.RESHAPE]
    assert tuple(g.nodes[0].attrs["shape"]) == (2, 12)
    assert not g.weights  # the shape values were read as an attribute, not kept


def test_constant_computations_fold_into_weights():
    """ConstantOfShape, Range, Cast and arithmetic on constants are evaluated at import."""
    nodes = [
        helper.make_node("ConstantOfShape", ["dims"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=F),
        helper.make_node("Mul", ["ones", "rf"], ["scaled"]),
        helper.make_node("Add", ["x", "scaled"], ["y"]),
    ]
    m = make(nodes, [("x", [2, 5])], [("y", [2, 5])],
             inits=[("dims", np.array([2, 5], np.int64)), ("start", np.array(0, np.int64)),
                    ("limit", np.array(5, np.int64)), ("delta", np.array(1, np.int64))])
    g = check_against_ort(m, {"x": x(2, 5)})
    assert [n.op for n in g.nodes] == [Op.ADD]
    np.testing.assert_array_equal(g.weights["scaled"], np.tile(np.arange(5, dtype=np.float32), (2, 1)))


def t5_like_buckets() -> onnx.ModelProto:
    """T5's relative-position buckets in small: the log of the distances (0 among them: -inf), cast
    to integers (-inf has no integer), then a Where that keeps the exact small distances there."""
    nodes = [
        helper.make_node("Constant", [], ["pos"], value=helper.make_tensor("p", TensorProto.INT64, [4], [0, 1, 2, 3])),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Log", ["posf"], ["logp"]),
        helper.make_node("Cast", ["logp"], ["large"], to=TensorProto.INT64),
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("t", TensorProto.INT64, [], [2])),
        helper.make_node("Less", ["pos", "two"], ["small"]),
        helper.make_node("Where", ["small", "pos", "large"], ["bucket"]),
        helper.make_node("Cast", ["bucket"], ["bf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "bf"], ["y"]),
    ]
    g = helper.make_graph(nodes, "t5_buckets", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_folding_warns_of_nothing_a_later_node_discards():
    """#41: loading a T5 export printed NumPy RuntimeWarnings ("divide by zero encountered in
    log", "invalid value encountered in cast") from onnx.reference folding its bucket arithmetic
    at import; the values folded are ONNX's all the same, and the Where discards the -inf ones."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = einsat.load_onnx(t5_like_buckets())
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert [n.op for n in g.nodes] == [Op.ADD]  # the bucket chain folded into one weight
    (bucket,) = g.weights.values()
    np.testing.assert_array_equal(bucket, np.array([0, 1, np.log(2), np.log(3)], np.float32).astype(np.int64))


def test_dropout_is_identity_and_sum_chains_adds():
    nodes = [helper.make_node("Dropout", ["a"], ["d", "mask"]),
             helper.make_node("Sum", ["d", "b", "c", "a"], ["s"]),
             helper.make_node("Cast", ["mask"], ["mf"], to=F),
             helper.make_node("Mul", ["s", "mf"], ["y"])]
    m = make(nodes, [("a", [3, 4]), ("b", [3, 4]), ("c", [1, 4])], [("y", [3, 4])])
    g = check_against_ort(m, {"a": x(3, 4), "b": x(3, 4, seed=1), "c": x(1, 4, seed=2)})
    assert [n.op for n in g.nodes].count(Op.ADD) == 3
    assert Op.OPAQUE not in {n.op for n in g.nodes}


def test_identity_to_an_output_and_duplicate_node_names():
    nodes = [helper.make_node("Relu", ["a"], ["r"], name="same"),
             helper.make_node("Neg", ["r"], ["n"], name="same"),
             helper.make_node("Identity", ["n"], ["y"], name="same")]
    m = make(nodes, [("a", [2, 2])], [("y", [2, 2])])
    g = einsat.load_onnx(m)  # onnxruntime refuses the duplicate names; einsat renames
    xa = x(2, 2)
    np.testing.assert_array_equal(einsat.run(g, {"a": xa})["y"], -np.maximum(xa, 0))
    names = [n.name for n in g.nodes]
    assert len(set(names)) == len(names) == 3 and names[0] == "same"
    assert g.outputs == ("y",) and g.nodes[-1].op is Op.IDENTITY


def test_dead_nodes_are_dropped():
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("TopK", ["a", "k"], ["v", "i"])]
    m = make(nodes, [("a", [2, 5])], [("y", [2, 5])], inits=[("k", np.array([2], np.int64))])
    g = einsat.load_onnx(m)
    assert [n.op for n in g.nodes] == [Op.RELU] and not g.weights


def test_from_bytes_and_path_and_proto_agree(tmp_path):
    m = make([helper.make_node("Relu", ["a"], ["y"])], [("a", [2, 2])], [("y", [2, 2])])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    graphs = [einsat.load_onnx(src) for src in (m, m.SerializeToString(), path, str(path))]
    assert {str(g) for g in graphs} == {str(graphs[0])}


# -- opaque nodes -------------------------------------------------------------------------------

def test_an_op_einsat_lacks_imports_opaque_and_runs():
    nodes = [helper.make_node("TopK", ["a", "k"], ["v", "i"], axis=1),
             helper.make_node("LpNormalization", ["v"], ["y"], axis=1, p=2)]
    m = make(nodes, [("a", [3, 6])], [("y", [3, 2]), ("i", [3, 2], TensorProto.INT64)],
             inits=[("k", np.array([2], np.int64))])
    g = check_against_ort(m, {"a": x(3, 6)})
    assert [n.op_name for n in g.nodes] == ["opaque TopK", "opaque LpNormalization"]
    assert g.types["i"].dtype == np.int64 and g.types["i"].shape == (3, 2)


def test_not_representable_keeps_the_node_opaque(monkeypatch):
    relu = opdef(Op.RELU)

    def refuse(ctx, onode):
        raise ctx.not_representable("not today")

    monkeypatch.setattr(relu, "from_onnx", refuse)
    m = make([helper.make_node("Relu", ["a"], ["y"])], [("a", [2, 3])], [("y", [2, 3])])
    g = check_against_ort(m, {"a": x(2, 3)})
    assert [n.op_name for n in g.nodes] == ["opaque Relu"]


def test_einsat_bugs_on_valid_nodes_fall_back_to_opaque_with_a_warning(monkeypatch):
    from einsat.ir.onnx.importer import OpaqueFallbackWarning

    m = make([helper.make_node("Relu", ["a"], ["y"])], [("a", [2, 3])], [("y", [2, 3])])
    relu = opdef(Op.RELU)
    monkeypatch.setattr(relu, "from_onnx", lambda ctx, onode: {}["crash"])
    with pytest.warns(OpaqueFallbackWarning, match="KeyError"):
        g = check_against_ort(m, {"a": x(2, 3)})
    assert [n.op_name for n in g.nodes] == ["opaque Relu"]
    monkeypatch.undo()
    monkeypatch.setattr(relu, "infer", lambda types, attrs: [einsat.TensorType((3, 2))])
    with pytest.warns(OpaqueFallbackWarning, match=r"einsat infers \[3, 2\] f32.*\[2, 3\] f32"):
        g = check_against_ort(m, {"a": x(2, 3)})
    assert [n.op_name for n in g.nodes] == ["opaque Relu"]


def test_the_import_context_interface(monkeypatch):
    """What `from_onnx` sees: constants, types, opset, emit; attributes as Python values."""
    seen = {}
    add = opdef(Op.ADD)

    def spy(ctx, onode):
        seen["constant"] = ctx.constant(onode.input[1])
        seen["type"] = ctx.type(onode.input[0])
        seen["opset"] = ctx.opset
        doubled = ctx.emit(Op.ADD, [onode.input[0], onode.input[0]], {})
        every_kind = helper.make_node("Any", [], ["o"], i=3, f=0.5, s="txt", ints=[1, 2], strs=["p", "q"],
                                      t=numpy_helper.from_array(np.eye(2, dtype=np.float32)))
        seen["attrs"] = ctx.attrs(every_kind)
        return [doubled, onode.input[1]], {}

    monkeypatch.setattr(add, "from_onnx", spy)
    m = make([helper.make_node("Add", ["a", "b"], ["y"])], [("a", [2, 2])], [("y", [2, 2])],
             inits=[("b", np.full((2, 2), 5, np.float32))], opset=19)
    g = einsat.load_onnx(m)
    a = seen["attrs"]
    assert (a["i"], a["f"], a["s"], a["ints"], a["strs"]) == (3, 0.5, "txt", (1, 2), ("p", "q"))
    np.testing.assert_array_equal(a["t"], np.eye(2))
    np.testing.assert_array_equal(seen["constant"], 5)
    assert seen["type"] == einsat.TensorType((2, 2)) and seen["opset"] == 19
    xa = x(2, 2)
    np.testing.assert_allclose(einsat.run(g, {"a": xa})["y"], 2 * xa + 5, rtol=1e-6)


def test_custom_domain_node_imports_and_reports_at_run_time():
    node = helper.make_node("Mystery", ["a"], ["y"], domain="com.example")
    m = make([node], [("a", [2, 2])], [("y", [2, 2])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    g = einsat.load_onnx(m)
    assert g.nodes[0].attrs["domain"] == "com.example" and g.nodes[0].attrs["opset"] == 1
    with pytest.raises(einsat.errors.ExecutionError, match="Mystery"):
        einsat.run(g, {"a": x(2, 2)})


def test_data_dependent_shapes_are_a_clear_error():
    m = make([helper.make_node("NonZero", ["a"], ["y"])], [("a", [2, 3])], [("y", [2, "n"], TensorProto.INT64)])
    with pytest.raises(ShapeError, match=r"NonZero.*static"):
        einsat.load_onnx(m)


# -- opsets and input shapes ----------------------------------------------------------------------

def test_old_opset_is_converted_with_its_semantics():
    """Softmax before opset 13 flattens from `axis` on: the converted model keeps that meaning."""
    m = make([helper.make_node("Softmax", ["a"], ["y"], axis=1)], [("a", [2, 3, 4])], [("y", [2, 3, 4])], opset=11)
    check_against_ort(m, {"a": x(2, 3, 4)})


def test_newer_opset_is_converted_down():
    m = make([helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Softmax", ["r"], ["y"])],
             [("a", [2, 5])], [("y", [2, 5])], opset=26)
    g = check_against_ort(m, {"a": x(2, 5)})
    assert [n.op for n in g.nodes] == [Op.RELU, Op.SOFTMAX]


def test_symbolic_dims_need_input_shapes():
    m = make([helper.make_node("Relu", ["a"], ["y"])], [("a", ["batch", 3])], [("y", ["batch", 3])])
    with pytest.raises(OnnxError, match=r"'a'.*'batch'.*input_shapes"):
        einsat.load_onnx(m)
    g = einsat.load_onnx(m, input_shapes={"a": (5, 3)})
    assert g.types["y"] == einsat.TensorType((5, 3))
    with pytest.raises(OnnxError, match="'nope'"):
        einsat.load_onnx(m, input_shapes={"nope": (1,)})


def test_one_error_lists_every_symbolic_input_and_one_size_per_symbol_pins_them():
    from einsat.ir.dims import sym
    from einsat.ir.onnx.read import SymbolicShapesError, parse_dim, shapes_for_dims
    m = make([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
             [("a", ["batch", "past"]), ("b", ["batch", 1])], [("y", ["batch", "past + 1"])])
    with pytest.raises(SymbolicShapesError) as info:
        einsat.load_onnx(m)
    assert info.value.inputs == {"a": [sym("batch"), sym("past")], "b": [sym("batch"), 1]}
    assert info.value.symbols == ["batch", "past"]
    assert "--dim batch=N --dim past=N" in str(info.value) and "'a'" in str(info.value) and "'b'" in str(info.value)
    shapes = shapes_for_dims(m, {"batch": 3, "past": 5})
    assert shapes == {"a": (3, 5), "b": (3, 1)}
    g = einsat.load_onnx(m, input_shapes=shapes)
    assert g.types["y"] == einsat.TensorType((3, 6))
    assert shapes_for_dims(m, {"batch": 3}) == {"b": (3, 1)}  # 'a' still needs 'past'
    with pytest.raises(OnnxError, match=r"\['seq'\].*\['batch', 'past'\]"):
        shapes_for_dims(m, {"seq": 4})
    assert parse_dim("past_sequence + 1") == sym("past_sequence") + 1
    assert parse_dim("(s + 1) // 2") != sym("s") and parse_dim("2*b*s") == 2 * sym("b") * sym("s")
    assert parse_dim("seq-len?") == sym("seq-len?")  # not an expression: one symbol of that name


def test_input_shapes_pin_symbolic_dims_only():
    """A static input keeps its shape: pinning it to another is refused, naming the input and its shape
    (the graph's Reshape targets and weights were written for the declared size)."""
    static = make([helper.make_node("Relu", ["image"], ["y"])], [("image", [2, 3, 64, 64])], [("y", [2, 3, 64, 64])])
    with pytest.raises(OnnxError, match=r"'image' already has the static shape \[2, 3, 64, 64\].*only symbolic"):
        einsat.load_onnx(static, input_shapes={"image": (1, 3, 64, 64)})
    same = einsat.load_onnx(static, input_shapes={"image": (2, 3, 64, 64)})  # its own shape: nothing to change
    assert same.types["y"] == einsat.TensorType((2, 3, 64, 64))
    # an input with a symbolic dim may take other fixed dims (a convolutional export's image side)
    mixed = make([helper.make_node("Relu", ["a"], ["y"])], [("a", ["batch", 3])], [("y", ["batch", 3])])
    assert einsat.load_onnx(mixed, input_shapes={"a": (5, 4)}).types["y"] == einsat.TensorType((5, 4))
    with pytest.raises(OnnxError, match=r"rank 2.*rank 3"):
        einsat.load_onnx(mixed, input_shapes={"a": (5, 3, 1)})
    with pytest.raises(OnnxError, match=r">= 0"):
        einsat.load_onnx(mixed, input_shapes={"a": (-1, 3)})


# -- random weights -------------------------------------------------------------------------------

def zoo_like():
    """Weights as the zoo files have them: ConstantOfShape placeholders, plus int shapes."""
    placeholder = numpy_helper.from_array(np.array([0.02], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=placeholder),
             helper.make_node("ConstantOfShape", ["var_shape"], ["var"], value=placeholder),
             helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["bn"]),
             helper.make_node("Reshape", ["bn", "flat"], ["y"])]
    return make(nodes, [("x", [1, 2, 5, 5])], [("y", [1, 36])],
                inits=[("w_shape", np.array([4, 2, 3, 3], np.int64)), ("var_shape", np.array([4], np.int64)),
                       ("s", np.ones(4, np.float32)), ("b", np.zeros(4, np.float32)),
                       ("mean", np.zeros(4, np.float32)), ("flat", np.array([1, -1], np.int64))])


def test_fill_weights_random_is_seeded_and_matches_the_filled_model():
    m = zoo_like()
    g = einsat.load_onnx(m, fill_weights="random", seed=3)
    same = einsat.load_onnx(fill_random_weights(m, seed=3))
    assert set(g.weights) == set(same.weights) == {"w", "var", "s", "b", "mean"}
    for k in g.weights:
        np.testing.assert_array_equal(g.weights[k], same.weights[k])
    np.testing.assert_array_equal(g.weights["w"], random_weight("w", (4, 2, 3, 3), np.float32, 3))
    assert np.all(g.weights["var"] >= 0.5)  # a valid variance
    other = einsat.load_onnx(m, fill_weights="random", seed=4)
    assert not np.array_equal(other.weights["w"], g.weights["w"])
    check_against_ort(fill_random_weights(m, seed=3), {"x": x(1, 2, 5, 5)})


def test_stripped_weights_are_inputs_until_filled():
    m = make([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", [2, 3]), ("w", [3, 4])], [("y", [2, 4])])
    entry = m.metadata_props.add()
    entry.key, entry.value = STRIPPED_KEY, '["w"]'
    assert einsat.load_onnx(m).inputs == ("a", "w")
    g = einsat.load_onnx(m, fill_weights="random")
    assert g.inputs == ("a",) and g.weights["w"].shape == (3, 4)
    with pytest.raises(OnnxError, match="fill_weights='zeros'"):
        einsat.load_onnx(m, fill_weights="zeros")


# -- bad input ----------------------------------------------------------------------------------

def test_missing_unreadable_truncated_and_garbage_files(tmp_path):
    with pytest.raises(OnnxError, match=r"nope\.onnx: no such file"):
        einsat.load_onnx(tmp_path / "nope.onnx")
    with pytest.raises(OnnxError, match="is a directory, not an ONNX file"):
        einsat.load_onnx(tmp_path)
    data = zoo_like().SerializeToString()
    for name, content in (("cut.onnx", data[: len(data) // 2]), ("junk.onnx", b"\x08\xff garbage \x00" * 7),
                          ("empty.onnx", b"")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(OnnxError, match=rf"{name}: not"):
            einsat.load_onnx(tmp_path / name)
    with pytest.raises(OnnxError, match="not a readable ONNX model"):
        einsat.load_onnx(b"\xff\xff\xff")


def test_cycle_names_its_nodes():
    nodes = [helper.make_node("Add", ["a", "q"], ["p"], name="first"),
             helper.make_node("Relu", ["p"], ["q"], name="second"),
             helper.make_node("Neg", ["p"], ["y"], name="out")]
    m = make(nodes, [("a", [2])], [("y", [2])])
    with pytest.raises(GraphError, match=r"cycle.*'first' \(Add\).*'second' \(Relu\)"):
        einsat.load_onnx(m)


def test_shape_mismatch_names_file_node_and_shapes(tmp_path):
    m = make([helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")], [("a", [2, 3]), ("b", [4, 5])],
             [("y", [2, 3])])
    path = tmp_path / "mismatch.onnx"
    onnx.save(m, path)
    with pytest.raises(ShapeError, match=r"mismatch\.onnx.*'bad_add'.*\[2, 3\].*\[4, 5\]"):
        einsat.load_onnx(path)


def test_constants_that_cannot_fold_are_reported_by_the_op():
    m = make([helper.make_node("Reshape", ["c", "shape"], ["r"], name="bad_reshape"),
              helper.make_node("Add", ["a", "r"], ["y"])], [("a", [4])], [("y", [4])],
             inits=[("c", np.ones((2, 3), np.float32)), ("shape", np.array([4], np.int64))])
    with pytest.raises(ShapeError, match=r"'bad_reshape'.*\[2, 3\]"):
        einsat.load_onnx(m)


def test_unknown_attribute_value_names_the_node():
    m = make([helper.make_node("Conv", ["a", "w"], ["y"], name="c1", auto_pad="BOGUS")],
             [("a", [1, 1, 4, 4])], [("y", [1, 1, 2, 2])], inits=[("w", x(1, 1, 3, 3))])
    with pytest.raises(AttributeValueError, match=r"'c1'.*BOGUS"):
        einsat.load_onnx(m)


def test_save_onnx_failure_leaves_no_file(tmp_path, monkeypatch):
    g = einsat.load_onnx(make([helper.make_node("Relu", ["a"], ["y"])], [("a", [2])], [("y", [2])]))

    def broken(ctx, node):
        raise ValueError("cannot")

    monkeypatch.setattr(opdef(Op.RELU), "to_onnx", broken)
    target = tmp_path / "out.onnx"
    with pytest.raises(OnnxError, match="relu"):
        einsat.save_onnx(g, target)
    assert list(tmp_path.iterdir()) == []
