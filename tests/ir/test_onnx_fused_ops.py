"""einsat's fused ops export as ONNX's own fused operators where the opset cap has them (#37):
attention as `Attention` (23), layernorm as `LayerNormalization` (17), GELU as `Gelu` (20),
softmax as `Softmax`; under a lower cap, the chain. Each written file runs on onnxruntime and
computes what einsat's NumPy reference computes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import einsat
from einsat.errors import OnnxError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import EXPORT_OPSET, to_onnx
from einsat.ir.registry import REGISTRY
from tests.ir.onnx_check import one_node, ort_run

RTOL, ATOL = 1e-4, 1e-5  # fp32 sums of a few dozen terms, any BLAS kernel

# The registry ops with a direct ONNX fused operator: op -> (ONNX op, the opset that has it, the
# op types written below that opset); test_every_fused_onnx_op_is_listed fails for one missing here.
FUSED = {
    Op.ATTENTION: ("Attention", 23, {"Transpose", "MatMul", "Mul", "Add", "Softmax"}),
    Op.LAYERNORM: ("LayerNormalization", 17, None),  # 17 is the oldest cap with a fused form only
    Op.GELU: ("Gelu", 20, {"Div", "Erf", "Mul", "Add"}),
    Op.SOFTMAX: ("Softmax", 13, None),
    Op.RMSNORM: ("RMSNormalization", 23, {"Mul", "ReduceMean", "Add", "Sqrt", "Div"}),
    Op.ROTARY: ("RotaryEmbedding", 23, {"Unsqueeze", "Slice", "Mul", "Sub", "Add", "Concat"}),
}
ONNX_FUSED_OPERATORS = {"Attention", "LayerNormalization", "RMSNormalization", "RotaryEmbedding", "Gelu",
                        "Softmax", "GroupNormalization"}


def _rng():
    return np.random.default_rng(37)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _inputs(op):
    rng = _rng()
    if op is Op.ATTENTION:
        return [_f32(rng, 2, 4, 5, 8), _f32(rng, 2, 4, 7, 8), _f32(rng, 2, 4, 7, 8)], {"causal": 1}
    if op is Op.LAYERNORM:
        return [_f32(rng, 2, 5, 16), _f32(rng, 16), _f32(rng, 16)], {}
    if op is Op.GELU:
        return [_f32(rng, 3, 16)], {}
    if op is Op.RMSNORM:
        return [_f32(rng, 2, 5, 16), _f32(rng, 16)], {}
    if op is Op.ROTARY:
        return [_f32(rng, 2, 4, 5, 16), _f32(rng, 2, 5, 8), _f32(rng, 2, 5, 8)], {}
    return [_f32(rng, 3, 16)], {"axis": -1}


def _written(g, feeds, cap):
    """(op types written, declared opset) of `g` under `cap`, after checking the file on
    onnxruntime against einsat's NumPy run."""
    model = to_onnx(g, opset=cap)
    onnx.checker.check_model(model, full_check=True)
    ours = einsat.run(g, feeds)
    for name, theirs in zip(g.outputs, ort_run(model, feeds)):
        np.testing.assert_allclose(theirs, ours[name], rtol=RTOL, atol=ATOL, err_msg=f"cap {cap}")
    declared = next(o.version for o in model.opset_import if o.domain == "")
    return [n.op_type for n in model.graph.node], declared


def test_every_fused_onnx_op_is_listed():
    """A registry op exporting as one of ONNX's fused operators is in FUSED (so it is tested below)."""
    mapped = {d.op for d in REGISTRY.values()
              if getattr(d, "onnx_type", None) in ONNX_FUSED_OPERATORS and not d.onnx_domain}  # not com.microsoft's
    assert mapped - {Op.ATTENTION} <= set(FUSED), sorted(o.value for o in mapped - set(FUSED))


@pytest.mark.parametrize("op", list(FUSED), ids=lambda o: o.value)
def test_fused_op_exports_as_the_onnx_operator_and_runs(op):
    fused, since, chain = FUSED[op]
    inputs, attrs = _inputs(op)
    g, feeds = one_node(op, inputs, attrs)
    types, declared = _written(g, feeds, None)
    assert types == [fused] and declared == since
    types, declared = _written(g, feeds, 17)
    assert declared <= 17
    if chain is None:
        assert types == [fused]
    else:
        assert fused not in types and set(types) <= chain, types


def _attention(q, k, v, mask=None, mask_input=False, **attrs):
    """attention(q, k, v, mask) with q, k, v graph inputs and the mask a weight (a constant) or,
    with `mask_input`, a graph input too."""
    b = GraphBuilder("att")
    ins = [b.input(n, a.shape) for n, a in (("q", q), ("k", k), ("v", v))]
    m = None if mask is None else b.input("mask", mask.shape) if mask_input else b.weight("mask", mask)
    g = b.build(b.attention(*ins, m, **attrs))
    feeds = {"q": q, "k": k, "v": v, **({"mask": mask} if mask_input else {})}
    return g, feeds


def _mask(rng, *shape, fill=-np.inf):
    """An additive mask of 0 and `fill` whose every row keeps key 0."""
    m = np.where(rng.random(shape) < 0.3, fill, 0.0).astype(np.float32)
    m[..., 0] = 0.0
    return m


VARIANTS = {  # name: (q, k, v shapes, constant mask's shape, attrs, what the default cap writes)
    "mha": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6), None, {}, ["Attention"]),
    "causal": ((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8), None, {"causal": 1}, ["Attention"]),
    "causal_rect": ((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8), None, {"causal": 1}, ["Attention"]),
    "scale": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), None, {"scale": 0.7}, ["Attention"]),
    "mask": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (5, 7), {}, ["Attention"]),
    "mask_per_batch": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 1, 5, 7), {"causal": 1}, ["Attention"]),
    "mqa": ((2, 4, 5, 8), (2, 1, 7, 8), (2, 1, 7, 8), (4, 5, 7), {}, ["Attention"]),
    "gqa": ((2, 2, 3, 5, 8), (2, 2, 1, 7, 8), (2, 2, 1, 7, 8), (5, 7), {"causal": 1},
            ["Reshape", "Reshape", "Reshape", "Attention", "Reshape"]),
    "mask_over_keys_only": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 1, 1, 7), {}, ["Attention"]),
    # a padding mask computed at run time: ONNX Attention and the correction of its fully masked rows
    "padding_at_run_time": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 1, 1, 7), {"mask_input": True},
                            ["Expand", "Attention", "Softmax", "MatMul", "ReduceMax", "LessOrEqual", "Where"]),
    "gqa_padding_at_run_time": ((2, 2, 3, 5, 8), (2, 2, 1, 7, 8), (2, 2, 1, 7, 8), (1, 7), {"mask_input": True},
                                ["Expand", "Reshape", "Reshape", "Reshape", "Attention", "Reshape", "Softmax",
                                 "MatMul", "ReduceMax", "LessOrEqual", "Where"]),
    # what ONNX Attention (as onnxruntime runs it) does not take, or not exactly at a cost worth it: the chain
    "causal_padding_at_run_time": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 1, 1, 7),
                                   {"mask_input": True, "causal": 1}, None),
    "batch_broadcast": ((2, 4, 5, 8), (1, 4, 7, 8), (1, 4, 7, 8), None, {}, None),
    "rank3": ((4, 5, 8), (4, 7, 8), (4, 7, 8), None, {"causal": 1}, None),
    "mask_at_run_time": ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (5, 7), {"mask_input": True}, None),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_attention_variants_export_run_and_match(name):
    qs, ks, vs, ms, attrs, fused = VARIANTS[name]
    rng = _rng()
    # a run-time mask may mask a row fully: the chain (float-min biases on every key give the mean of v)
    mask = _mask(rng, *ms, fill=np.finfo(np.float32).min if attrs.get("mask_input") else -np.inf) if ms else None
    if attrs.get("mask_input"):
        mask[..., 1 if ms[-2] > 1 else 0, :] = np.finfo(np.float32).min  # a left-padded prompt's row, a padded entry
    g, feeds = _attention(_f32(rng, *qs), _f32(rng, *ks), _f32(rng, *vs), mask, **attrs)
    types, declared = _written(g, feeds, None)
    if fused is None:
        assert "Attention" not in types and "Softmax" in types and declared < 23
    else:
        assert types == fused and declared == 23
    for cap in (17, 22):
        types, declared = _written(g, feeds, cap)
        assert "Attention" not in types and declared <= cap


@pytest.mark.parametrize("fill", [np.finfo(np.float32).min, -np.inf, -1e30])
def test_a_padding_mask_at_run_time_is_exact_on_every_row(fill):
    """Batch entry 0 masked fully (float-min: the chain's mean of v; -inf: NaN; -1e30: an ordinary
    bias, which onnxruntime computes as the chain does), entry 1 in part: the corrected ONNX
    Attention matches einsat's NumPy on every row."""
    rng = _rng()
    mask = np.zeros((2, 1, 1, 7), np.float32)
    mask[0] = fill
    mask[1, ..., 4:] = fill
    g, feeds = _attention(_f32(rng, 2, 4, 5, 8), _f32(rng, 2, 4, 7, 8), _f32(rng, 2, 4, 7, 6), mask, mask_input=True)
    types, _ = _written(g, feeds, None)
    assert "Attention" in types and "Where" in types
    want = einsat.run(g, feeds)[g.outputs[0]]
    assert np.isnan(want[0]).all() == (fill == -np.inf) and np.isfinite(want[1]).all()


@pytest.mark.parametrize("causal", [0, 1])
def test_a_constant_mask_with_a_fully_masked_row_writes_the_chain(causal):
    """Row 2 attends only key 3: masked fully under the causal triangle (j <= 2), not without it."""
    rng = _rng()
    mask = np.zeros((5, 7), np.float32)
    mask[2, :] = -np.inf
    mask[2, 3] = 0.0
    g, feeds = _attention(_f32(rng, 2, 4, 5, 8), _f32(rng, 2, 4, 7, 8), _f32(rng, 2, 4, 7, 8), mask, causal=causal)
    model = to_onnx(g)
    assert ("Attention" in [n.op_type for n in model.graph.node]) == (not causal)
    if not causal:  # with the triangle the row is NaN in the chain; without, both compute it
        _written(g, feeds, None)


def test_attention_in_half_precision_runs_as_onnx_attention():
    rng = _rng()
    q, k, v = (_f32(rng, 1, 2, 5, 8).astype(np.float16) for _ in range(3))
    b = GraphBuilder("att16")
    g = b.build(b.attention(*(b.input(n, (1, 2, 5, 8), np.float16) for n in "qkv"), causal=1))
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Attention"]
    (got,) = ort_run(model, {"q": q, "k": k, "v": v})
    want = einsat.run(g, {"q": q, "k": k, "v": v})[g.outputs[0]]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_an_opaque_op_newer_than_the_cap_is_refused_by_name():
    """An ONNX Attention read from a model stays opaque; under a cap below 23 it cannot be written."""
    from onnx import TensorProto, helper

    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="att0")
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (1, 2, 3, 4)) for n in "qkvy"]
    model = helper.make_model(helper.make_graph([node], "g", vi[:3], vi[3:]),
                              opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    g = einsat.load_onnx(model)
    assert to_onnx(g).opset_import[0].version == 23
    with pytest.raises(OnnxError, match=r"Attention.*needs opset 23, the opset cap is 21"):
        to_onnx(g, opset=21)


def test_types_newer_than_the_cap_are_refused_by_name():
    """bfloat16 Conv is opset 22's: under cap 21 the error names the node and op."""
    from einsat.ir.precision import convert

    b = GraphBuilder("conv")
    x = b.input("x", (1, 3, 8, 8))
    g = convert(b.build(b.conv(x, b.weight("w", _f32(_rng(), 4, 3, 3, 3)), padding=1)), "bf16")
    assert to_onnx(g).opset_import[0].version == 22
    with pytest.raises(OnnxError, match=r"\(Conv\) takes its input types .*from opset 22 on; the opset cap is 21"):
        to_onnx(g, opset=21)


def test_the_default_cap_is_the_newest_opset_onnxruntime_opens():
    import onnxruntime as ort
    from onnx import TensorProto, helper

    def opens(opset):
        vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2,)) for n in "xy"]
        m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", vi[:1], vi[1:]),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 — onnxruntime's refusal of an opset it does not know
            return False
        return True

    assert opens(EXPORT_OPSET) and not opens(EXPORT_OPSET + 1)


def _bert_layer():
    from benchmarks.workloads.transformer import bert

    return bert(batch=1, seq=8, hidden=16, heads=2, layers=1, ffn=32)


@pytest.mark.parametrize("cap", [17, 19, EXPORT_OPSET])
def test_the_written_nodes_mean_the_same_at_every_opset_from_the_declared_to_the_cap(cap):
    """The declared opset is the least at which the nodes (written for the cap) are valid: the same
    file declared at any opset up to the cap passes the checker and computes the same outputs."""
    from onnx import helper

    g = _bert_layer()
    x = {"x": _f32(_rng(), 1, 8, 16)}
    model = to_onnx(g, opset=cap)
    declared = next(o.version for o in model.opset_import if o.domain == "")
    assert 13 <= declared <= cap
    want = ort_run(model, x)[0]
    for v in range(declared, cap + 1):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.opset_import[0].version = v
        m.ir_version = max(m.ir_version, helper.find_min_ir_version_for(list(m.opset_import)))
        onnx.checker.check_model(m, full_check=True)
        np.testing.assert_array_equal(ort_run(m, x)[0], want, err_msg=f"declared {v}")
    if declared > 13:  # and one below is not valid: some node needs the declared opset
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.opset_import[0].version = declared - 1
        with pytest.raises(onnx.checker.ValidationError):
            onnx.checker.check_model(m, full_check=True)
