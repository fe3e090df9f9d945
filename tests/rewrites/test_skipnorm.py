"""The skipnorm generator: a norm of a residual sum becomes one skip op writing the norm and the sum.

- soundness: on drawn programs (layernorm or rmsnorm of x + skip, a bias before the sum or not, the
  norm written as its op or as the exporter's chain), every skip e-node the generator adds computes,
  on random inputs, the values of the two e-classes it was unioned into;
- start => goal: the skip op sits in the norm's class (output 0) and the sum's (output 1), and only
  under a cost model of onnxruntime (`contrib_ops`);
- the bundled exports (BERT, GPT-2, Llama prefill, dynamo and legacy): every norm of a residual sum
  gets its skip op; extracted under a model that prefers it, the program writes onnxruntime's
  contrib ops where contrib ops are allowed (and runs there, matching NumPy) and only standard ops
  where they are not.
"""

from collections import Counter

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einsat
from einsat.cost.model import RooflineCost
from einsat.egraph import Limits, Schedule, Session
from einsat.extract import extract
from einsat.ir import GraphBuilder, Op
from einsat.ir.graph import Graph
from einsat.ir.onnx.export import to_onnx
from einsat.ir.registry import opdef
from einsat.rewrites.algebra.norms import layernorm_generator, rmsnorm_generator
from einsat.rewrites.algebra.skipnorm import skipnorm_generator
from einsat.testing.strategies import seeds
from tests.ir.onnx_check import ort_run
from tests.ir.test_hf_llm_models import feeds as llm_feeds
from tests.ir.test_models import MODELS

SKIPS = (Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM)


class OrtLike(RooflineCost):
    """The H100 roofline, but a target that runs onnxruntime's contrib ops (as cost "cpu" does):
    the skip op moves fewer bytes than its Add and norm, so the extraction takes it."""

    contrib_ops = True


def saturate(g, cost=None, iterations=2):
    cost = OrtLike("h100") if cost is None else cost
    s = Session(Limits(iterations=iterations, nodes=200_000, time_s=600), cost=cost)
    s.add_graph(g)
    s.run(Schedule((rmsnorm_generator(), layernorm_generator(), skipnorm_generator())))
    return s.export()


def skip_nodes(data):
    return [(cid, n) for cid, c in data.classes.items() for n in c.nodes if n.op in SKIPS]


def _program(draw):
    """(graph, feeds, norm, sum): the norm of a residual sum, both graph outputs (the sum is read
    later, as a transformer's residual stream is)."""
    rng = np.random.default_rng(draw(seeds))
    rank = draw(st.integers(2, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(rank - 1)) + (draw(st.integers(2, 6)),)
    h = shape[-1]
    kind = draw(st.sampled_from(["layernorm", "rmsnorm", "layernorm_chain", "rmsnorm_chain"]))
    b = GraphBuilder("skip")
    x, r = b.input("x", shape), b.input("residual", shape)
    if draw(st.booleans()):  # BERT's dense output: MatMul + bias, then the residual
        x = b.add(x, b.weight("dense_bias", rng.standard_normal(h).astype(np.float32)))
    s = b.add(x, r) if draw(st.booleans()) else b.add(r, x)
    w = b.weight("scale", rng.standard_normal(h).astype(np.float32))
    eps = b.weight("eps", np.array(1e-5, np.float32))
    if kind == "layernorm":
        y = b.layernorm(s, w, b.weight("beta", rng.standard_normal(h).astype(np.float32)), axis=rank - 1)
    elif kind == "rmsnorm":
        y = b.rmsnorm(s, w, axis=rank - 1)
    elif kind == "rmsnorm_chain":  # x · (1 / sqrt(mean(x · x) + eps)) · w
        ms = b.reduce_mean(b.mul(s, s), axes=(rank - 1,), keepdims=1)
        one = b.weight("one", np.array(1.0, np.float32))
        y = b.mul(b.mul(s, b.div(one, b.sqrt(b.add(ms, eps)))), w)
    else:  # (x - mean(x)) / sqrt(mean((x - mean(x))²) + eps) · w
        d = b.sub(s, b.reduce_mean(s, axes=(rank - 1,), keepdims=1))
        var = b.reduce_mean(b.mul(d, d), axes=(rank - 1,), keepdims=1)
        y = b.mul(b.div(d, b.sqrt(b.add(var, eps))), w)
    g = b.build(y, s)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "residual": rng.standard_normal(shape).astype(np.float32)}
    return g, feeds


def _values(g: Graph, feeds) -> dict:
    """Every value of `g` on `feeds` (inputs, weights, each node's outputs)."""
    every = Graph(g.nodes, g.input_types(), [o for n in g.nodes for o in n.outputs], g.weights, g.name)
    return {**feeds, **g.weights, **einsat.run(every, feeds)}


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_every_skip_op_computes_the_classes_it_was_unioned_into(data):
    g, feeds = _program(data.draw)
    got = saturate(g)
    skips = skip_nodes(got)
    assert {n.output for _, n in skips} == {0, 1}, "the norm and the sum each get the skip op"
    values = _values(g, feeds)
    named = {cid: c.name for cid, c in got.classes.items() if c.name in values}
    checked = 0
    for cid, n in skips:
        if cid not in named or any(k >= 0 and k not in named for k in n.children):
            continue  # a class no source value names (the chain's normalized value): nothing to compare with
        args = [values[named[k]] if k >= 0 else None for k in n.children]
        out = opdef(n.op).numpy(args, n.attrs)[n.output]
        np.testing.assert_allclose(out, values[named[cid]], rtol=1e-4, atol=1e-5,
                                   err_msg=f"{n.op.value}[{n.output}] in the class of {named[cid]!r}")
        checked += 1
    assert checked >= 2  # the norm's and the sum's, at least


def test_the_skip_op_goes_into_the_norm_s_class_and_the_sum_s():
    b = GraphBuilder("block")
    x, r = b.input("x", (2, 4, 8)), b.input("residual", (2, 4, 8))
    s = b.add(x, r)
    w, beta = b.weight("w", np.ones(8, np.float32)), b.weight("beta", np.zeros(8, np.float32))
    y = b.layernorm(s, w, beta)
    g = b.build(y, b.relu(s))
    data = saturate(g)
    by_name = {c.name: cid for cid, c in data.classes.items() if c.name}
    outputs = {n.output: cid for cid, n in skip_nodes(data)}
    assert outputs == {0: by_name[y.name], 1: by_name[s.name]}
    (node, _) = [n for _, n in skip_nodes(data)]
    assert node.op is Op.SKIP_LAYERNORM
    assert node.children[:4] == (by_name["x"], by_name["residual"], by_name["w"], by_name["beta"])
    # under a model of another target (the GPU's: its fused eop_multi writes both) nothing is added
    assert not skip_nodes(saturate(g, cost=RooflineCost("h100")))


# -- the bundled exports ---------------------------------------------------------------------------

def _bundled(name):
    if name.startswith("hf_llama"):
        feeds = llm_feeds(name.removeprefix("hf_"))
    elif name == "hf_gpt2":
        rng = np.random.default_rng(0)
        feeds = {"input_ids": rng.integers(0, 1000, (1, 8)), "attention_mask": np.ones((1, 8), np.int64)}
    else:
        rng = np.random.default_rng(0)
        feeds = {"input_ids": rng.integers(0, 1000, (1, 128)), "attention_mask": np.ones((1, 128), np.int64),
                 "token_type_ids": np.zeros((1, 128), np.int64)}
    g = einsat.load_onnx(MODELS / f"{name}.onnx", fill_weights="random",
                         input_shapes={k: v.shape for k, v in feeds.items()})
    return g, {k: v for k, v in feeds.items() if k in g.inputs}


# (model, skip op, norms of a residual sum: each with output 0 and 1, and the bias forms among them)
BUNDLED = [("bert_encoder", Op.SKIP_LAYERNORM, 5, 4),             # embeddings' sum, 2 layers x 2 norms
           ("hf_gpt2", Op.SKIP_LAYERNORM, 25, 0),                 # 12 layers x 2, the final norm
           ("hf_llama_prefill_dynamo", Op.SKIP_RMSNORM, 4, 0),    # 2 layers x 2 (the first reads the embedding)
           ("hf_llama_prefill_legacy", Op.SKIP_RMSNORM, 4, 0)]    # the same, inside Cast(x, float32) pairs


@pytest.mark.parametrize("name, op, norms, biased", [
    p if p[0] in ("bert_encoder", "hf_llama_prefill_legacy") else pytest.param(*p, marks=pytest.mark.slow)
    for p in BUNDLED])
def test_every_norm_of_a_residual_sum_gets_its_skip_op(name, op, norms, biased):
    g, _ = _bundled(name)
    data = saturate(g)
    found = Counter((n.op, n.output, len([k for k in n.children if k >= 0])) for _, n in skip_nodes(data))
    plain = 4 if op is Op.SKIP_LAYERNORM else 3  # x, skip, scale (, beta)
    assert found == Counter({k: v for k, v in {(op, 0, plain): norms, (op, 1, plain): norms,
                                               (op, 0, plain + 1): biased, (op, 1, plain + 1): biased}.items() if v})


@pytest.mark.parametrize("name, op", [
    pytest.param(*p[:2], marks=pytest.mark.slow) if p[0] == "hf_gpt2" else p[:2] for p in BUNDLED])
def test_the_extracted_skip_ops_write_as_contrib_ops_and_run_on_onnxruntime(name, op):
    g, feeds = _bundled(name)
    result = extract(saturate(g, iterations=1), OrtLike("h100"), method="greedy")
    kept = Counter(n.op for n in result.graph.nodes)
    assert kept[op] >= 2, kept
    want = einsat.run(g, feeds)
    ours = einsat.run(result.graph, feeds)
    contrib = to_onnx(result.graph, contrib=True)
    onnx.checker.check_model(contrib)
    written = Counter((n.domain, n.op_type) for n in contrib.graph.node)
    assert written[("com.microsoft", {Op.SKIP_LAYERNORM: "SkipLayerNormalization",
                                      Op.SKIP_RMSNORM: "SkipSimplifiedLayerNormalization"}[op])] == kept[op]
    standard = to_onnx(result.graph, contrib=False)
    onnx.checker.check_model(standard, full_check=True)
    assert {n.domain for n in standard.graph.node} == {""} and {o.domain for o in standard.opset_import} == {""}
    for model in (contrib, standard):
        for out, theirs in zip(result.graph.outputs, ort_run(model, feeds)):
            scale = float(np.abs(want[out]).max()) or 1.0
            np.testing.assert_allclose(theirs, ours[out], rtol=1e-3, atol=1e-4 * scale, err_msg=out)
            np.testing.assert_allclose(theirs, want[out], rtol=1e-3, atol=1e-4 * scale, err_msg=out)
