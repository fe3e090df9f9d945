"""Symbolic import, execution and export (issue #40, docs/dynamic-shapes.md, steps 1-2).

`load_onnx(..., symbolic=True)` keeps the inputs' `dim_param`s as symbols; `einsat.run` binds
them from the inputs' shapes; `to_onnx` writes them back as `dim_param`s and computes what
shapes need at run time. The round trip (no optimization: the identity program) of the bundled
dynamic exports runs on onnxruntime at three sizes and matches the input model there.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import einsat
from einsat.errors import InputError
from einsat.ir.dims import evaluate, sym
from einsat.ir.onnx.export import to_onnx
from einsat.ir.onnx.read import SymbolicShapesError
from einsat.ir.onnx.weights import fill_random_weights
from tests.ir.test_models import MODELS, assert_fp32_close

# a query row whose every key is padding: NumPy's softmax of it is NaN (the exports zero it)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

SIZES = [{"batch": 1, "sequence": 1, "past_sequence": 1},
         {"batch": 2, "sequence": 7, "past_sequence": 5},
         {"batch": 3, "sequence": 13, "past_sequence": 11}]


def feeds(g, sizes: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name in g.inputs:
        t = g.types[name]
        shape = [evaluate(d, sizes) for d in t.shape]
        if "mask" in name:  # left padding of one token where there is more than one
            out[name] = np.ones(shape, t.dtype)
            if shape[-1] > 1:
                out[name][..., 0] = 0
        elif t.dtype.kind in "iu":
            out[name] = rng.integers(0, 2 if "type" in name else 100, shape).astype(t.dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(t.dtype)
    return out


def session(model: onnx.ModelProto):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def dim_params(values) -> dict[str, list]:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def round_trip(name: str, numpy_at: int | None = None) -> None:
    model = fill_random_weights(onnx.load(MODELS / f"{name}.onnx"), seed=0)
    g = einsat.load_onnx(model, symbolic=True)
    assert all(not g.types[n].is_static for n in g.inputs), name
    written = to_onnx(g)
    onnx.checker.check_model(written, full_check=True)
    inputs = {n.name for n in written.graph.input}
    assert {k: v for k, v in dim_params(written.graph.input).items()} == \
        {k: v for k, v in dim_params(model.graph.input).items() if k in inputs}, f"{name}: the inputs' dims"
    before, after = session(model), session(written)
    for k, sizes in enumerate(SIZES):
        if "total_sequence" in {s for n in g.inputs for s in g.types[n].symbols}:
            sizes = {**sizes, "total_sequence": sizes["past_sequence"] + 1}
        x = feeds(g, sizes, k)
        want = before.run(list(g.outputs), x)
        got = after.run(list(g.outputs), x)
        for out, a, b in zip(g.outputs, got, want):
            assert_fp32_close(a, b, f"{name} at {sizes}: {out}")
        if k == numpy_at:  # the NumPy executor on the symbolic program, at the inputs' sizes
            ours = einsat.run(g, x)
            for out, b in zip(g.outputs, want):
                assert_fp32_close(ours[out], b, f"{name} on NumPy at {sizes}: {out}")


@pytest.mark.parametrize("name", ["hf_llama_prefill_dynamo", "hf_llama_decode_dynamo", "hf_llama_prefill_legacy",
                                  "hf_llama_decode_legacy", "hf_qwen2_decode_dynamo"])
def test_llm_round_trip_keeps_dynamic_axes(name):
    round_trip(name, numpy_at=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf_bert_base", "hf_gpt2", "hf_distilbert", "hf_resnet50"])
def test_big_model_round_trip_keeps_dynamic_axes(name):
    round_trip(name, numpy_at=1)


def test_decode_types_carry_past_sequence_plus_one():
    g = einsat.load_onnx(MODELS / "hf_llama_decode_dynamo.onnx", fill_weights="random", symbolic=True)
    b, p = sym("batch"), sym("past_sequence")
    assert g.types["attention_mask"].shape == (b, p + 1)
    assert g.types["present.0.key"].shape == (b, 2, p + 1, 16)
    assert g.types["logits"].shape == (b, 1, 512)


def test_the_default_import_still_refuses_symbolic_dims():
    """`load_onnx` imports symbols only when asked (`symbolic=True`); `optimize` asks
    (tests/pipeline/test_symbolic_optimize.py)."""
    with pytest.raises(SymbolicShapesError, match="--dim batch=N --dim sequence=N") as e:
        einsat.load_onnx(MODELS / "hf_llama_prefill_dynamo.onnx", fill_weights="random")
    assert e.value.symbols == ["batch", "sequence"] and set(e.value.inputs) == {"input_ids", "attention_mask"}


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_reshape_targets_use_0_and_minus_1_and_expand_computes_its_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 2, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "sequence", 8])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i01"], ["bs"]),
             helper.make_node("Concat", ["bs", "c24"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"]),                 # [batch, sequence, 2, 4]
             helper.make_node("Reshape", ["x", "flat"], ["f"]),              # [batch * sequence, 8]
             helper.make_node("Expand", ["one", "s"], ["e"]),                # [batch, sequence, 8]
             helper.make_node("Add", ["e", "f3"], ["z"])]
    inits = [helper.make_tensor("i01", TensorProto.INT64, [2], [0, 1]),
             helper.make_tensor("c24", TensorProto.INT64, [2], [2, 4]),
             helper.make_tensor("flat", TensorProto.INT64, [2], [-1, 8]),
             helper.make_tensor("one", TensorProto.FLOAT, [1], [1.5])]
    model = _model(nodes + [helper.make_node("Reshape", ["f", "s"], ["f3"])], [x], [y, z], inits)
    g = einsat.load_onnx(model, symbolic=True)
    b, s = sym("batch"), sym("sequence")
    assert g.types["y"].shape == (b, s, 2, 4) and g.types["f"].shape == (b * s, 8)
    written = to_onnx(g)
    targets = [onnx.numpy_helper.to_array(i).tolist() for i in written.graph.initializer]
    assert [0, 0, 2, 4] in targets and [-1, 8] in targets, targets
    assert [n.op_type for n in written.graph.node].count("Shape") >= 1  # Expand's target is computed
    assert dim_params(written.graph.output) == {"y": ["batch", "sequence", 2, 4], "z": ["batch", "sequence", 8]}
    for sizes in ({"batch": 1, "sequence": 1}, {"batch": 3, "sequence": 5}):
        xv = np.random.default_rng(0).standard_normal((sizes["batch"], sizes["sequence"], 8)).astype(np.float32)
        want = session(model).run(["y", "z"], {"x": xv})
        got = session(written).run(["y", "z"], {"x": xv})
        ours = einsat.run(g, {"x": xv})
        for a, c, w in zip(got, (ours["y"], ours["z"]), want):
            np.testing.assert_array_equal(a, w)
            np.testing.assert_array_equal(c, w)


def test_a_symbolic_slice_end_beyond_its_dim_is_refused_at_run_time():
    """A position table of 8 rows sliced to the sequence: the program holds for sequence <= 8 and
    says so when run beyond (onnxruntime would clamp, then fail to broadcast)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 4])
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Slice", ["table", "zero", "s"], ["rows"]),
             helper.make_node("Add", ["x", "rows"], ["y"])]
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    inits = [onnx.numpy_helper.from_array(table, "table"), helper.make_tensor("zero", TensorProto.INT64, [1], [0])]
    g = einsat.load_onnx(_model(nodes, [x], [y], inits), symbolic=True)
    assert g.types["y"].shape == (sym("batch"), sym("sequence"), 4)
    xv = np.ones((2, 8, 4), np.float32)
    np.testing.assert_array_equal(einsat.run(g, {"x": xv})["y"], xv + table)
    with pytest.raises(InputError, match="sequence = 9"):
        einsat.run(g, {"x": np.ones((2, 9, 4), np.float32)})


def test_inputs_that_disagree_on_a_symbol_are_refused():
    g = einsat.load_onnx(MODELS / "hf_llama_decode_dynamo.onnx", fill_weights="random", symbolic=True)
    x = feeds(g, SIZES[1], 0)
    x["attention_mask"] = np.ones((2, 9), np.int64)  # past_sequence + 1 = 6, not 9
    with pytest.raises(InputError, match="past_sequence"):
        einsat.run(g, x)
