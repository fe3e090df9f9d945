"""einsat reads opsets 13-25 (`read.MAX_OPSET`), its own half-precision files included, and writes an op
read from a newer opset at that opset.

The claim that opsets 22-25 change nothing einsat maps but element types is checked against onnx's
own schemas here, so a newer onnx that changes a schema fails this test rather than a user's model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, defs, helper

import einsat
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.read import MAX_OPSET
from einsat.ir.precision import convert
from einsat.ir.registry import REGISTRY

# schema changes beyond element types between 21 and MAX_OPSET, and why einsat may read them
KNOWN_CHANGES = {
    "Cast": "round_mode applies to float8e8m0 only, an element type einsat refuses",
    "CastLike": "likewise",
    "QuantizeLinear": "no einsat op: kept opaque, run by onnxruntime",
    "DequantizeLinear": "no einsat op: kept opaque",
    "Attention": "no einsat op: kept opaque",
}
# ops new after 21 that einsat maps, read by their own schema
NEW_AND_MAPPED = {"RMSNormalization": "rmsnorm (opset 23)", "RotaryEmbedding": "rotary (opset 23)"}


def _signature(schema):
    return (sorted(schema.attributes), [(i.name, i.option) for i in schema.inputs],
            [(o.name, o.option) for o in schema.outputs])


def _mapped_onnx_types() -> set[str]:
    return {getattr(d, "onnx_type", None) for d in REGISTRY.values() if not d.onnx_domain} - {None}  # ONNX's own


def test_opsets_22_to_the_newest_read_change_only_types_of_what_einsat_maps():
    mapped = _mapped_onnx_types()
    assert "Conv" in mapped and "Cast" in mapped  # the registry names its ONNX ops
    changed = set()
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") or not 22 <= schema.since_version <= MAX_OPSET:
            continue
        try:
            before = defs.get_schema(schema.name, schema.since_version - 1, "")
        except defs.SchemaError:  # a new op: einsat has none for it, so it is kept opaque
            assert schema.name not in mapped or schema.name in NEW_AND_MAPPED, \
                f"{schema.name} is new at {schema.since_version} and einsat maps it"
            continue
        if _signature(before) != _signature(schema):
            changed.add(schema.name)
    assert changed <= set(KNOWN_CHANGES), sorted(changed - set(KNOWN_CHANGES))
    assert not (changed - {"Cast", "CastLike"}) & mapped


def _conv_model() -> einsat.Graph:
    b = GraphBuilder("conv")
    x = b.input("x", (1, 3, 8, 8))
    y = b.relu(b.conv(x, b.weight("w", np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)),
                      padding=1))
    return b.build(y)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_einsat_reads_its_own_half_precision_files(tmp_path, precision):
    """A bf16 convolution needs opset 22 (its schema takes bfloat16 from there): the file einsat writes
    is read back by einsat, its op for op, and computes what the program computed."""
    g = convert(_conv_model(), precision)
    path = tmp_path / "half.onnx"
    einsat.save_onnx(g, path)
    written = onnx.load(path)
    opset = next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx"))
    if precision == "bf16":
        assert opset >= 22
    back = einsat.load_onnx(path)
    assert [n.op for n in back.nodes] == [n.op for n in g.nodes]
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(einsat.run(back, x)["y" if "y" in back.outputs else back.outputs[0]],
                                  einsat.run(g, x)[g.outputs[0]])


def test_a_newer_opsets_op_is_kept_and_written_at_its_opset(tmp_path):
    """Swish (opset 24) has no einsat op: it is read as an opaque node, runs, and the file einsat
    writes declares opset 24, since no older opset has the op (RMSNormalization, new at 23, is
    read as `rmsnorm`: tests/ir/test_ops_rmsnorm.py)."""
    nodes = [helper.make_node("Swish", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "swish",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=10)
    g = einsat.load_onnx(model)
    assert [n.op for n in g.nodes] == [Op.OPAQUE, Op.RELU]
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    rms = x / (1 + np.exp(-x))  # swish(x) = x · sigmoid(x)
    np.testing.assert_allclose(einsat.run(g, {"x": x})["y"], np.maximum(rms, 0), rtol=1e-5, atol=1e-6)
    einsat.save_onnx(g, tmp_path / "rms.onnx")
    written = onnx.load(tmp_path / "rms.onnx")
    assert next(o.version for o in written.opset_import if o.domain == "") == 24
    again = einsat.load_onnx(tmp_path / "rms.onnx")
    np.testing.assert_allclose(einsat.run(again, {"x": x})["y"], np.maximum(rms, 0), rtol=1e-5, atol=1e-6)
