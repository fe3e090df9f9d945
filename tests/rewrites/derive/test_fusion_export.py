"""A fused eOperator exports as the chain of ops it was fused from (#37): its `chain` attribute
(`einsat.ir.ops.eop_chain`) names the source ops, and the ONNX export writes each as its own ONNX
form (LayerNormalization, Softmax, Erf, ...), which onnxruntime runs with its own kernels. The
expression stays the semantics: the written chain is checked against the eop's NumPy run on
random inputs, and it carries no expansion (Range, Gather, Expand, ...)."""

import pickle

import numpy as np
import onnx
import pytest

from einsat.cost.models import cost_model
from einsat.egraph import Limits, Schedule, Session
from einsat.errors import EinsatError, OnnxError
from einsat.ir import GraphBuilder, Op
from einsat.ir.graph import Graph, Node
from einsat.ir.onnx.export import to_onnx
from einsat.ir.ops import eop_chain
from einsat.ir.registry import normalize_attrs
from einsat.ir.signature import signature_of
from einsat.ir.types import TensorType
from einsat.rewrites.derive.fusion import fusion_generator
from tests.ir.onnx_check import check_op

F = np.float32
EXPANSION = {"Range", "Gather", "Expand", "Reshape", "Transpose", "Identity", "ReduceSum", "ReduceMax", "Where"}


def _fused(g):
    s = Session(Limits(iterations=1), cost=cost_model("h100-roofline"))
    s.add_graph(g)
    s.run(Schedule((fusion_generator(),)))
    data = s.export()
    return data, [n for c in data.classes.values() for n in c.nodes if n.op in (Op.EOP, Op.EOP_MULTI)]


def _gelu_erf(b, x):
    return b.mul(b.mul(x, b.const(0.5, F)), b.add(b.erf(b.div(x, b.const(np.sqrt(2.0), F))), b.const(1.0, F)))


def _prenorm_layernorm(b):
    x = b.input("x", (2, 5, 16), F)
    h = b.add(x, b.input("res", (2, 5, 16), F))
    n = b.layernorm(b.add(h, b.weight("bias", (16,), F)), b.weight("g", (16,), F), b.weight("beta", (16,), F),
                    axis=2)
    return b.add(h, b.matmul(n, b.weight("w", (16, 16), F)))


def _scaled_masked_softmax(b):
    x = b.input("x", (2, 4, 8, 8), F)
    return b.softmax(b.add(b.mul(x, b.const(0.125, F)), b.input("mask", (1, 1, 1, 8), F)), axis=3)


def _bias_gelu(b):
    x = b.input("x", (4, 32), F)
    return _gelu_erf(b, b.add(x, b.weight("bias", (32,), F)))


# form -> (program, the op the eop of that form kind is, the ONNX ops its export must write)
FORMS = {
    "layernorm_residual": (_prenorm_layernorm, Op.EOP_MULTI, {"LayerNormalization", "Add"}),
    "scaled_masked_softmax": (_scaled_masked_softmax, Op.EOP, {"Softmax", "Mul", "Add"}),
    "bias_gelu": (_bias_gelu, Op.EOP, {"Erf", "Div", "Mul", "Add"}),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_fused_chain_exports_as_its_ops_and_matches_the_eop_on_onnxruntime(form):
    build, kind, wanted = FORMS[form]
    b = GraphBuilder(form)
    data, eops = _fused(b.build(build(b)))
    root = data.classes[data.roots[0]].nodes
    whole = [n for n in eops if n.op is kind and (kind is Op.EOP_MULTI or n in root)]  # the whole chain's
    assert whole, f"{form}: no {kind.value} fused"
    rng = np.random.default_rng(7)
    for n in eops:  # every fused chain (the whole one and its parts) writes back its own ops
        assert n.attrs["chain"], f"{form}: a fused {kind.value} carries no chain"
        arrays = [rng.standard_normal(data.classes[c].type.shape).astype(F) for c in n.children]
        attrs = {k: n.attrs[k] for k in ("expr", "exprs", "chain") if k in n.attrs}
        g = check_op(n.op, arrays, attrs)  # the eop's NumPy (its expression) vs the written chain on onnxruntime
        written = [p.op_type for p in to_onnx(g).graph.node]
        assert not EXPANSION & set(written), (form, written)
        if n in whole:
            assert wanted <= set(written), (form, written)


def test_without_a_chain_the_same_eop_exports_as_its_expression():
    b = GraphBuilder("softmax")
    _, eops = _fused(b.build(_scaled_masked_softmax(b)))
    n = eops[0]
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 4, 8, 8)).astype(F), rng.standard_normal((1, 1, 1, 8)).astype(F)]
    g = check_op(Op.EOP, arrays, {"expr": n.attrs["expr"]})
    assert "Softmax" not in {p.op_type for p in to_onnx(g).graph.node}


def test_the_chain_leaves_signatures_unchanged_and_travels_in_pickles():
    b = GraphBuilder("gelu")
    _, eops = _fused(b.build(_bias_gelu(b)))
    n = eops[0]
    t = TensorType((4, 32), F)
    ins = [t] + [TensorType((32,), F)] * (len(n.children) - 1)
    with_chain = signature_of(Op.EOP, dict(n.attrs), ins)
    without = signature_of(Op.EOP, {"expr": n.attrs["expr"]}, ins)
    assert with_chain.key == without.key and "chain" not in with_chain.key  # a profile's entry serves both
    node = Node(Op.EOP, tuple(f"x{k}" for k in range(len(ins))), ("y",), dict(n.attrs))
    g = Graph([node], {f"x{k}": s for k, s in enumerate(ins)}, ["y"])
    assert pickle.loads(pickle.dumps(g)).nodes[0].attrs["chain"] == n.attrs["chain"]  # a partition worker's graph


@pytest.mark.parametrize("text, reason", [
    ("not json", "not a chain's JSON"),
    ('{"ops":[["nonsense",{},[["in",0]]]],"out":[0]}', "registry op"),
    ('{"ops":[["relu",{},[["op",0]]]],"out":[0]}', "bad input reference"),
    ('{"ops":[["relu",{},[["in",3]]]],"out":[0]}', "reads input 3"),
    ('{"ops":[["relu",{},[["in",0]]]],"out":[0,0]}', "writes 2 outputs"),
    ('{"ops":[["relu",{},[["in",0]]]],"out":[1]}', "do not name"),
])
def test_a_malformed_chain_is_refused_with_a_reason(text, reason):
    expr = eop_chain.decode('{"ops":[["relu",{},[["in",0]]]],"out":[0]}')  # a valid one decodes
    assert expr.out == (0,)
    with pytest.raises(EinsatError, match=reason):
        normalize_attrs(Op.EOP, {"expr": "(E (L 0:4) (S) (relu (T 0 i0)))", "chain": text}, [TensorType((4,), F)])


def test_a_chain_whose_output_type_disagrees_is_an_export_error():
    chain = eop_chain.encode([(Op.REDUCE_SUM, {"axes": (0,), "keepdims": 0}, [("in", 0)])], [0])
    node = Node(Op.EOP, ("x",), ("y",), {"expr": "(E (L 0:4) (S) (relu (T 0 i0)))", "chain": chain})
    g = Graph([node], {"x": TensorType((4,), F)}, ["y"])
    with pytest.raises(OnnxError, match="computes"):
        to_onnx(g)


def test_a_converted_half_chain_writes_its_casts_and_its_fp32_weights_cast_back():
    """bf16 conversion: cast(layernorm(cast(x + r, f32), g32, b32), bf16); the eop reads g and b cast
    to the half, so the written chain casts them back for the fp32 norm, as the eop computes.
    (onnxruntime's CPU provider has no bf16 Add: the written file is checked by onnx's checker and
    its ops; fp16 chains keep their casts unfused, rewrites.derive.fusion.)"""
    from einsat.ir.precision import convert
    rng = np.random.default_rng(0)
    b = GraphBuilder("norm")
    x = b.add(b.input("x", (4, 32)), b.input("r", (4, 32)))
    g32, b32 = (b.weight(name, rng.standard_normal(32).astype(F)) for name in ("g", "beta"))
    y = b.layernorm(x, g32, b32, axis=1)
    half = convert(b.build(y), "bf16", half_io=True)
    data, eops = _fused(half)
    (n,) = [n for n in eops if n in data.classes[data.roots[0]].nodes]
    gb = GraphBuilder("eop")
    ins = [gb.input(f"i{k}", data.classes[c].type.shape, dtype=data.classes[c].type.dtype)
           for k, c in enumerate(n.children)]
    g = gb.build(gb.eop(*ins, expr=n.attrs["expr"], chain=n.attrs["chain"]))
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    written = [p.op_type for p in model.graph.node]
    assert written.count("Cast") == 4 and "LayerNormalization" in written, written  # g, b back to fp32; x in; y out
