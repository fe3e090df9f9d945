"""Fusion as a derivation: each fused form (softmax, scaled and masked softmax, layernorm, RMSNorm,
GELU in its erf and tanh forms, SiLU / SwiGLU, bias + activation + residual) becomes one eop in
its chain's e-class, and the eop computes what the chain computes on random inputs."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.cost.models import cost_model
from einsat.egraph import Limits, Schedule, Session
from einsat.egraph.data import EGraphData
from einsat.ir import GraphBuilder, Op
from einsat.ir.expr import evaluate
from einsat.ir.expr.compose import compose, inline, size
from einsat.ir.expr.nodes import scopes
from einsat.ir.onnx.export import to_onnx
from einsat.ir.ops.eop import expression_of
from einsat.ir.registry import opdef
from einsat.ir.types import TensorType
from einsat.rewrites.derive.fusion import MAX_OPS, fuse_chains, fusion_generator
from einsat.testing.egraphs import assert_consistent
from tests.work_bounded import BY_WORK, ended_by_work

F = np.float64
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


def _gelu_erf(b, x):
    return b.mul(b.mul(x, b.const(0.5, F)), b.add(b.erf(b.div(x, b.const(np.sqrt(2.0), F))), b.const(1.0, F)))


def _gelu_tanh(b, x):
    inner = b.mul(b.add(x, b.mul(b.pow(x, b.const(3.0, F)), b.const(0.044715, F))), b.const(np.sqrt(2 / np.pi), F))
    return b.mul(b.mul(x, b.const(0.5, F)), b.add(b.tanh(inner), b.const(1.0, F)))


def _rmsnorm(b, x, shape):
    ms = b.reduce_mean(b.mul(x, x), axes=(len(shape) - 1,), keepdims=1)
    return b.mul(b.div(x, b.sqrt(b.add(ms, b.const(1e-6, F)))), b.weight("g", (shape[-1],), F))


FORMS = {
    "softmax": lambda b, x, s: b.softmax(x, axis=len(s) - 1),
    "softmax_first_axis": lambda b, x, s: b.softmax(x, axis=0),
    "scaled_masked_softmax": lambda b, x, s: b.softmax(
        b.add(b.mul(x, b.const(0.125, F)), b.input("mask", (1,) * (len(s) - 1) + (s[-1],), F)), axis=len(s) - 1),
    "layernorm_residual": lambda b, x, s: b.layernorm(
        b.add(x, b.input("res", s, F)), b.weight("g", (s[-1],), F), b.weight("beta", (s[-1],), F), axis=len(s) - 1),
    "rmsnorm": lambda b, x, s: _rmsnorm(b, x, s),
    "gelu_erf": lambda b, x, s: _gelu_erf(b, b.add(x, b.weight("bias", (s[-1],), F))),
    "gelu_tanh": lambda b, x, s: _gelu_tanh(b, x),
    "swiglu": lambda b, x, s: b.mul(b.mul(x, b.sigmoid(x)), b.input("up", s, F)),
    "bias_act_residual": lambda b, x, s: b.add(b.relu(b.add(x, b.weight("bias", (s[-1],), F))), b.input("r", s, F)),
}
WHOLE = {"softmax", "softmax_first_axis"}  # one op: nothing to merge, no eop expected


def _session(form: str, shape) -> tuple[Session, EGraphData, int]:
    b = GraphBuilder(form)
    x = b.input("x", shape, F)
    g = b.build(FORMS[form](b, x, shape))
    s = Session(Limits(iterations=1), cost=cost_model("h100-roofline"))
    s.add_graph(g)
    s.run(Schedule((fusion_generator(),)))
    data = s.export()
    return s, data, data.roots[0]


@pytest.mark.parametrize("form", sorted(FORMS))
@settings(max_examples=8, deadline=None)
@given(shape=shapes)
def test_a_fused_chain_is_one_eop_that_computes_the_chain(form, shape):
    _, data, root = _session(form, shape)
    eops = [n for n in data.classes[root].nodes if n.op is Op.EOP]
    if form in WHOLE:
        assert not eops
        return
    assert eops, f"{form}: no fused eop in the output's e-class"
    # the whole chain merged: the eop reads graph inputs and weights only, never an interior value
    for n in eops:
        for c in n.children:
            assert any(m.leaf is not None for m in data.classes[c].nodes), (form, data.classes[c].nodes)
    assert assert_consistent(data, rtol=1e-9, atol=1e-9) >= 2  # fused vs unfused, random inputs


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), data=st.data())
def test_softmax_and_layernorm_expressions_are_their_ops(shape, data):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    d = opdef(Op.SOFTMAX)
    np.testing.assert_allclose(evaluate(d.expression([TensorType.of(x)], {"axis": axis}), [x]),
                               d.numpy([x], {"axis": axis})[0], rtol=1e-12, atol=1e-12)
    norm = shape[axis:]
    scale, bias = rng.standard_normal(norm), rng.standard_normal(norm[-1:])
    attrs = {"axis": axis, "epsilon": 1e-3}
    e = opdef(Op.LAYERNORM).expression([TensorType.of(a) for a in (x, scale, bias)], attrs)
    np.testing.assert_allclose(evaluate(e, [x, scale, bias]), opdef(Op.LAYERNORM).numpy([x, scale, bias], attrs)[0],
                               rtol=1e-9, atol=1e-9)


def test_composing_inlines_maps_and_keeps_reductions_as_scopes():
    t = TensorType((3, 4), F)
    soft = opdef(Op.SOFTMAX).expression([t], {"axis": 1})
    scaled = opdef(Op.MUL).expression([t, TensorType((), F)], {})
    e = compose(soft, 0, scaled, [0, 1])
    assert len(scopes(e)) == 2 and all(s.sums for s in scopes(e))  # the row max and the row sum
    assert inline(e) == e and size(e) > size(soft)
    rng = np.random.default_rng(1)
    x, c = rng.standard_normal((3, 4)), np.asarray(0.3)
    np.testing.assert_allclose(evaluate(e, [x, c]), evaluate(soft, [x * c]), rtol=1e-12, atol=1e-12)


def test_an_interior_value_read_elsewhere_is_not_fused_away():
    b = GraphBuilder("shared")
    x = b.input("x", (2, 8), F)
    h = b.add(x, b.weight("bias", (8,), F))
    g = b.build(b.softmax(h, axis=1), b.relu(h))  # h has two readers: it stays an input of the chains
    s = Session(Limits(iterations=1), cost=cost_model("h100-roofline"))
    s.add_graph(g)
    s.run(Schedule((fusion_generator(),)))
    data = s.export()
    assert not any(n.op is Op.EOP for c in data.classes.values() for n in c.nodes)


def test_no_fusion_for_onnxruntime_targets():
    class Ort:
        folds_weights_at_load = True
    s, data, _ = _session("gelu_erf", (2, 3))
    s.cost = Ort()
    assert fuse_chains(s, data) == 0


def test_a_long_chain_is_cut_at_max_ops():
    b = GraphBuilder("long")
    t = x = b.input("x", (4,), F)
    for _ in range(MAX_OPS + 4):
        t = b.relu(b.add(t, x))
    _, data, root = _session_of(b.build(t))
    (eop,) = [n for n in data.classes[root].nodes if n.op is Op.EOP]
    e = expression_of(eop.attrs["expr"])
    assert sum(1 for _ in str(e).split("Call(fn='relu'")) - 1 == MAX_OPS // 2
    assert assert_consistent(data) > 0


def _session_of(g):
    s = Session(Limits(iterations=1), cost=cost_model("h100-roofline"))
    s.add_graph(g)
    s.run(Schedule((fusion_generator(),)))
    data = s.export()
    return s, data, data.roots[0]


def _kept_eops(graph) -> list[str]:
    return [n.attrs["expr"] for n in graph.nodes if n.op is Op.EOP]


def _without_attention():
    """The default schedule without the attention rewrites (the SDPA op takes the whole
    matmul-softmax-matmul chain where the cost says so): the softmax chain's own alternatives."""
    from einsat.rewrites.schedule import default_schedule
    return Schedule(tuple(p for p in default_schedule().phases if "attention" not in getattr(p, "name", "")))


def test_bert_tensat_extracts_a_fused_softmax_per_layer_under_h100():
    import einsat
    from benchmarks.workloads.transformer import bert_tensat
    g = bert_tensat(layers=2)
    result = einsat.optimize(g, cost="h100", rules=_without_attention(), **BY_WORK)
    ended_by_work(result.report)
    exprs = _kept_eops(result.graph)
    assert len([e for e in exprs if "(M " in e and "(exp " in e]) == 2  # scale + softmax, one eop a layer
    assert not any(n.op is Op.SOFTMAX for n in result.graph.nodes)
    model = cost_model("h100")
    assert model.graph_cost(result.graph) < model.graph_cost(g)


def test_a_gelu_chain_after_a_linear_layer_is_one_eop_under_h100():
    import einsat
    b = GraphBuilder("mlp")
    x = b.input("x", (1, 16, 64))
    h = b.add(b.matmul(x, b.weight("w", (64, 256))), b.weight("bias", (256,)))
    half, root2, one = (b.const(v) for v in (0.5, np.sqrt(2.0), 1.0))
    g = b.build(b.mul(b.mul(h, half), b.add(b.erf(b.div(h, root2)), one)))
    result = einsat.optimize(g, cost="h100", **BY_WORK)
    ended_by_work(result.report)
    # the bias add and the GELU in one eop; the GELU recognized in the exporter's erf chain, so the
    # chain holds it as one op (its file writes ONNX's Gelu, not Div, Erf, Add, Mul)
    fused = [n for n in result.graph.nodes if n.op is Op.EOP]
    assert len(fused) == 1 and "(gelu " in fused[0].attrs["expr"]
    assert [op for op, _, _ in json.loads(fused[0].attrs["chain"])["ops"]] == ["add", "gelu"]
    assert not any(n.op in (Op.ERF, Op.DIV, Op.GELU) for n in result.graph.nodes)
    model = to_onnx(result.graph)
    assert sorted(n.op_type for n in model.graph.node) == ["Add", "Gelu", "MatMul"]


def test_a_legacy_gelu_before_a_linear_layer_writes_onnx_gelu_under_h100():
    """ConvNext's legacy export: (h * (1 + erf(h / sqrt 2))) * 0.5 @ W2. Fused as written, the
    chain's 0.5 moved into W2 (the modeled costs tie) and the file wrote Div, Erf, Add, Mul, in
    which no runtime finds the GELU (0.94x its input on onnxruntime CPU). The recognized GELU
    stands for its erf chain in the fusion: the file writes Add + Gelu, W2 unscaled."""
    import einsat
    rng = np.random.default_rng(0)
    b = GraphBuilder("mlp")
    x = b.input("x", (1, 16, 64))
    h = b.add(b.matmul(x, b.weight("w1", rng.standard_normal((64, 256)).astype(np.float32))),
              b.weight("b1", rng.standard_normal(256).astype(np.float32)))
    half, root2, one = (b.const(v) for v in (0.5, np.sqrt(2.0), 1.0))
    act = b.mul(b.mul(h, b.add(b.erf(b.div(h, root2)), one)), half)
    w2 = rng.standard_normal((256, 64)).astype(np.float32)
    g = b.build(b.matmul(act, b.weight("w2", w2)))
    result = einsat.optimize(g, cost="h100", **BY_WORK)
    ended_by_work(result.report)
    written = sorted(n.op_type for n in to_onnx(result.graph).graph.node)
    assert written == ["Add", "Gelu", "MatMul", "MatMul"], written
    assert any(np.array_equal(w, w2) for w in result.graph.weights.values())  # W2 as given: no 0.5 in it
    feeds = {"x": rng.standard_normal((1, 16, 64)).astype(np.float32)}
    want, got = einsat.run(g, feeds), einsat.run(result.graph, feeds)
    np.testing.assert_allclose(got[result.graph.outputs[0]], want[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_a_bert_layer_extracts_its_layernorms_as_eops_under_h100():
    """Each residual add and layernorm (and the projection's bias add) is one eop: fused_matmul's
    epilogue runs as a kernel of its own on the GPU runtime, so taking the adds into it does not
    leave the norm alone for free (#29)."""
    import einsat
    from benchmarks.workloads.transformer import bert
    g = bert(seq=16, hidden=64, heads=2, layers=1, ffn=256)
    result = einsat.optimize(g, cost="h100", rules=_without_attention(), **BY_WORK)
    ended_by_work(result.report)
    norms = [e for e in _kept_eops(result.graph) if "(sqrt " in e]
    assert len(norms) == 2
    assert not any(n.op is Op.LAYERNORM for n in result.graph.nodes)
    model = cost_model("h100")
    assert model.graph_cost(result.graph) < model.graph_cost(g)


def test_an_unmeasured_fused_eop_is_charged_its_external_inputs_and_output():
    from einsat.cost.devices import H100
    from einsat.cost.model import RooflineCost
    from einsat.ir.expr.measure import flops
    _, data, root = _session("layernorm_residual", (64, 768))
    (eop,) = [n for n in data.classes[root].nodes if n.op is Op.EOP]
    ins = [data.classes[c].type for c in eop.children]
    out = data.classes[root].type
    moved = sum(t.size * 8 for t in ins) + out.size * 8  # float64: x, the residual, scale, bias; the output
    want = H100.launch_us + max(flops(expression_of(eop.attrs["expr"])) / H100.peak_flops(np.float64, False, False),
                                moved / H100.bandwidth) * 1e6
    model = RooflineCost("h100")
    got = model.node_cost(Op.EOP, eop.attrs, ins, [out])
    assert got == pytest.approx(want, rel=1e-9)
    chain = sum(model.node_cost(n.op, n.attrs, [data.classes[c].type for c in n.children], [cls.type])
                for cls in data.classes.values() for n in cls.nodes if n.op in (Op.ADD, Op.LAYERNORM))
    assert got < chain  # two launches and the sum's round trip fewer


def test_a_folded_scalar_keeps_its_rank():
    from einsat.rewrites.post.fold import fold_generator
    b = GraphBuilder("scalars")
    x = b.input("x", (3,), F)
    g = b.build(b.add(x, b.mul(b.const(0.5, F), b.const(2.0, F))))
    s = Session(Limits(iterations=1))
    s.add_graph(g)
    s.run(Schedule((fold_generator(every=1),)))
    data = s.export()
    folded = [np.asarray(data.weights[n.leaf[1]]) for c in data.classes.values() for n in c.nodes
              if n.leaf is not None and n.leaf[1].startswith("fold")]
    assert folded and all(w.shape == () and w == 1.0 for w in folded)


@pytest.mark.parametrize("form", sorted(set(FORMS) - WHOLE))
def test_a_fused_eop_exports_to_onnx_as_its_ops_and_runs_on_onnxruntime(form):
    from einsat.ir.onnx.export import to_onnx
    from tests.ir.onnx_check import check_op
    _, data, root = _session(form, (3, 7))
    eop = max((n for n in data.classes[root].nodes if n.op is Op.EOP), key=lambda n: len(n.attrs["expr"]))
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(data.classes[c].type.shape).astype(np.float32) for c in eop.children]
    g = check_op(Op.EOP, arrays, {"expr": eop.attrs["expr"]}, rtol=1e-5, atol=1e-5)  # NumPy vs onnxruntime
    ops = {n.op_type for n in to_onnx(g).graph.node}
    assert not ops & {"Gather", "Range"}, ops  # element-wise ops and reductions, no index grid


def test_a_reduction_along_a_leading_axis_is_not_fused():
    b = GraphBuilder("lead")
    x = b.input("x", (4, 6), F)
    _, data, root = _session_of(b.build(b.softmax(b.mul(x, b.const(0.5, F)), axis=0)))
    assert not any(n.op is Op.EOP for n in data.classes[root].nodes)  # no row kernel runs it


# -- chains whose interior value is also read outside them: eop_multi --------------------------------

def _prenorm(b, x, s, norm, dtype=F):
    """A pre-norm residual block: h = x + res feeds `norm` and the next residual add, past a matmul."""
    h = b.add(x, b.input("res", s, dtype))
    return b.add(h, b.matmul(norm(b, h, s), b.weight("w", (s[-1], s[-1]), dtype)))


SHARED_FORMS = {
    "layernorm": lambda b, h, s: b.layernorm(h, b.weight("g", (s[-1],), F), b.weight("beta", (s[-1],), F),
                                             axis=len(s) - 1),
    "rmsnorm": lambda b, h, s: _rmsnorm(b, h, s),
    "layernorm_of_biased_sum": lambda b, h, s: b.layernorm(
        b.add(h, b.weight("bias", (s[-1],), F)), b.weight("g", (s[-1],), F), b.weight("beta", (s[-1],), F),
        axis=len(s) - 1),
    "scaled_softmax": lambda b, h, s: b.softmax(b.mul(h, b.const(0.125, F)), axis=len(s) - 1),
}


@pytest.mark.parametrize("form", sorted(SHARED_FORMS))
@settings(max_examples=6, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3).map(tuple))
def test_a_norm_whose_residual_sum_is_read_elsewhere_is_one_eop_writing_the_sum_too(form, shape):
    b = GraphBuilder(form)
    x = b.input("x", shape, F)
    _, data, _ = _session_of(b.build(_prenorm(b, x, shape, SHARED_FORMS[form])))
    multi = [(cid, n) for cid, c in data.classes.items() for n in c.nodes if n.op is Op.EOP_MULTI]
    assert multi, f"{form}: no eop_multi"
    by_app = {}
    for cid, n in multi:
        by_app.setdefault((n.attrs["exprs"], n.children), {})[n.output] = cid
    for (text, children), outs in by_app.items():
        assert sorted(outs) == [0, 1], outs  # the norm and the residual sum, one application
        (sum_cls,) = [outs[1]]
        assert any(n.op is Op.ADD for n in data.classes[sum_cls].nodes)  # the sum's own e-class
        for c in children:  # over the block's inputs and weights: the sum is computed inside
            assert any(m.leaf is not None for m in data.classes[c].nodes), (form, data.classes[c].nodes)
    assert assert_consistent(data, rtol=1e-9, atol=1e-9) >= 2  # fused vs unfused, random inputs


def test_no_eop_multi_where_an_input_of_the_chain_descends_from_the_shared_value():
    """norm(h + h @ w): the matmul reads h, so an eop writing h and reading the matmul would
    read what it writes; the plain chain (norm + add, h an input) is offered instead."""
    b = GraphBuilder("cycle")
    x = b.input("x", (4, 8), F)
    h = b.add(x, b.input("r", (4, 8), F))
    m = b.matmul(h, b.weight("w", (8, 8), F))
    g = b.build(b.layernorm(b.add(h, m), b.weight("g", (8,), F), b.weight("beta", (8,), F), axis=1))
    _, data, root = _session_of(g)
    assert not any(n.op is Op.EOP_MULTI for c in data.classes.values() for n in c.nodes)
    assert any(n.op is Op.EOP for n in data.classes[root].nodes)
    assert assert_consistent(data) > 0


def test_a_prenorm_block_extracts_its_norm_and_residual_sum_as_one_eop_multi_under_h100():
    import einsat
    b = GraphBuilder("preln")
    x = b.input("x", (1, 16, 64))
    g = b.build(_prenorm(b, x, (1, 16, 64), lambda b, h, s: b.layernorm(
        h, b.weight("g", (64,)), b.weight("beta", (64,)), axis=2), np.float32))
    result = einsat.optimize(g, cost="h100", **BY_WORK)
    ended_by_work(result.report)
    (node,) = [n for n in result.graph.nodes if n.op is Op.EOP_MULTI]
    assert len(node.outputs) == 2 and "(sqrt " in node.attrs["exprs"]
    assert not any(n.op in (Op.LAYERNORM, Op.ADD) and n.outputs[0] != result.graph.outputs[0]
                   for n in result.graph.nodes)  # only the final residual add stays an add
    model = cost_model("h100")
    assert model.graph_cost(result.graph) < model.graph_cost(g)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, 16, 64)).astype(np.float32),
             "res": rng.standard_normal((1, 16, 64)).astype(np.float32)}
    want, got = einsat.run(g, feeds), einsat.run(result.graph, feeds)
    np.testing.assert_allclose(got[g.outputs[0]], want[g.outputs[0]], rtol=1e-5, atol=1e-5)


def test_an_eop_multi_exports_to_onnx_as_its_outputs_ops_and_runs_on_onnxruntime():
    from tests.ir.onnx_check import check_op
    b = GraphBuilder("preln")
    x = b.input("x", (3, 7), F)
    _, data, _ = _session_of(b.build(_prenorm(b, x, (3, 7), SHARED_FORMS["layernorm"])))
    (n, *_) = [n for c in data.classes.values() for n in c.nodes if n.op is Op.EOP_MULTI]
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(data.classes[c].type.shape).astype(np.float32) for c in n.children]
    check_op(Op.EOP_MULTI, arrays, {"exprs": n.attrs["exprs"]}, rtol=1e-5, atol=1e-5)  # NumPy vs onnxruntime
