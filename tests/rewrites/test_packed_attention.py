"""The packed-attention generator: self-attention over head-split projections of one input becomes
one `packed_attention` (onnxruntime's contrib Attention).

- soundness: on drawn programs (x projected three times, or once by a packed 2-D GEMM split three
  ways as GPT-2's c_attn, with biases or not, heads split by Reshape + Transpose, kᵀ read from the
  heads by one Transpose [0, 2, 3, 1] or not, the attention written as the exporter's chain or as einsat's op, a padding
  mask or none, causal or not, the heads merged back to [B, S, H] or [B·S, H]), the program
  extracted under a model that prefers the packed op holds it, computes the source's outputs in
  NumPy, and its contrib export runs on onnxruntime with the same outputs;
- start => goal: only under a cost model of onnxruntime (`contrib_ops`), and not where Q, K and V
  read different inputs (cross-attention) or have different head sizes;
- the bundled BERT encoder: both layers' attention get the packed op, and the extracted program
  writes com.microsoft Attention and runs on onnxruntime like the source.
"""

from collections import Counter

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st

import einsat
from einsat.cost.model import RooflineCost
from einsat.egraph import Limits, Schedule, Session
from einsat.extract import extract
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.rewrites.algebra.attention import attention_generator
from einsat.rewrites.algebra.packed_attention import packed_attention_generator
from einsat.testing.strategies import seeds
from tests.ir.onnx_check import ort_run
from tests.ir.test_models import MODELS


class OrtLike(RooflineCost):
    """The H100 roofline, but a target that runs onnxruntime's contrib ops (as cost "cpu" does)."""

    contrib_ops = True


def saturate(g, cost=None, iterations=3):
    cost = OrtLike("h100") if cost is None else cost
    s = Session(Limits(iterations=iterations, nodes=200_000, time_s=600), cost=cost)
    s.add_graph(g)
    s.run(Schedule((attention_generator(), packed_attention_generator())))
    return s.export()


def packed(data):
    return [n for c in data.classes.values() for n in c.nodes if n.op is Op.PACKED_ATTENTION]


def _program(draw, cross=False, uneven=False, packed_source=None):
    """(graph, feeds): BERT's self-attention block over x [B, S, Hin]."""
    rng = np.random.default_rng(draw(seeds))
    bsz, s, hin, heads, d = (draw(st.integers(1, 3)), draw(st.integers(2, 5)), draw(st.integers(2, 6)),
                             draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    h = heads * d
    biased, chain, masked = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    causal = 0 if chain else int(draw(st.booleans()))
    flat = draw(st.booleans())
    b = GraphBuilder("self_attention")
    x = b.input("x", (bsz, s, hin))
    other = b.input("memory", (bsz, s, hin)) if cross else x
    feeds = {"x": rng.standard_normal((bsz, s, hin)).astype(np.float32)}
    if cross:
        feeds["memory"] = rng.standard_normal((bsz, s, hin)).astype(np.float32)

    if packed_source is None:  # GPT-2's c_attn: one 2-D GEMM, split
        packed_source = not cross and not uneven and draw(st.booleans())
    key_t = chain and draw(st.booleans())  # kᵀ straight from the heads: Transpose(.., [0, 2, 3, 1])

    def split_heads(p, dh=d, perm=(0, 2, 1, 3)):
        return b.transpose(b.reshape(p, shape=(bsz, s, heads, dh)), perm=perm)

    def projection(src, name, width):
        w = b.weight(f"w{name}", (rng.standard_normal((hin, width)) * 0.5).astype(np.float32))
        p = b.matmul(src, w)
        return b.add(p, b.weight(f"b{name}", rng.standard_normal(width).astype(np.float32))) if biased else p

    if packed_source:
        flat_x = b.reshape(x, shape=(bsz * s, hin))
        qkv = b.reshape(projection(flat_x, "qkv", 3 * h), shape=(bsz, s, 3 * h))
        pq, pk, pv = b.split(qkv, axis=2, sizes=(h, h, h))
    else:
        pq, pk, pv = (projection(x, "q", h), projection(other, "k", h),
                      projection(other, "v", 2 * h if uneven else h))
    q, v = split_heads(pq), split_heads(pv, 2 * d if uneven else d)
    k = split_heads(pk, perm=(0, 2, 3, 1) if key_t else (0, 2, 1, 3))
    mask = None
    if masked:  # a padding mask over the keys, computed at run time
        mask = b.input("mask", (bsz, 1, 1, s))
        keep = rng.random((bsz, 1, 1, s)) < 0.7
        keep[..., 0] = True
        feeds["mask"] = np.where(keep, 0.0, -1e4).astype(np.float32)
    scale = float(np.float32(1 / np.sqrt(d)))
    if chain:
        kt = k if key_t else b.transpose(k, perm=(0, 1, 3, 2))
        scores = b.mul(b.matmul(q, kt), b.weight("scale", np.array(scale, np.float32)))
        if mask is not None:
            scores = b.add(scores, mask)
        y = b.matmul(b.softmax(scores, axis=-1), v)
    else:
        y = b.attention(q, k, v, mask, scale=scale, causal=causal)
    dv = 2 * d if uneven else d
    y = b.reshape(b.transpose(y, perm=(0, 2, 1, 3)), shape=(bsz * s, heads * dv) if flat else (bsz, s, heads * dv))
    y = b.relu(y)
    return b.build(y), feeds


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_the_extracted_packed_attention_computes_the_source_on_numpy_and_onnxruntime(data):
    g, feeds = _program(data.draw)
    got = saturate(g)
    assert packed(got), "the self-attention gets the packed op"
    result = extract(got, OrtLike("h100"), method="greedy")
    kept = Counter(n.op for n in result.graph.nodes)
    assert kept[Op.PACKED_ATTENTION] == 1, kept
    want = einsat.run(g, feeds)[g.outputs[0]]
    ours = einsat.run(result.graph, feeds)[result.graph.outputs[0]]
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    model = to_onnx(result.graph, contrib=True)
    onnx.checker.check_model(model)
    assert Counter((n.domain, n.op_type) for n in model.graph.node)[("com.microsoft", "Attention")] == 1
    (theirs,) = ort_run(model, feeds)
    np.testing.assert_allclose(theirs, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=6, deadline=None)
@given(st.data())
def test_a_packed_projection_split_three_ways_keeps_its_own_weight(data):
    """GPT-2's c_attn (x reshaped to 2-D, one GEMM, reshaped back, split into Q, K, V): the packed
    op reads the model's weight (and bias) as they are, no concatenation."""
    g, feeds = _program(data.draw, packed_source=True)
    got = saturate(g)
    (n,) = packed(got)
    names = {cid: c.name for cid, c in got.classes.items()}
    assert names[n.children[1]] == "wqkv"
    assert len(n.children) < 3 or n.children[2] < 0 or names[n.children[2]] == "bqkv"
    result = extract(got, OrtLike("h100"), method="greedy")
    np.testing.assert_allclose(einsat.run(result.graph, feeds)[result.graph.outputs[0]],
                               einsat.run(g, feeds)[g.outputs[0]], rtol=1e-4, atol=1e-4)


@settings(max_examples=4, deadline=None)
@given(st.data())
def test_only_for_onnxruntime_targets(data):
    g, _ = _program(data.draw)
    assert packed(saturate(g))
    assert not packed(saturate(g, cost=RooflineCost("h100")))


@settings(max_examples=4, deadline=None)
@given(st.data(), st.sampled_from(["cross", "uneven"]))
def test_not_where_q_k_v_read_different_inputs_or_head_sizes(data, kind):
    g, _ = _program(data.draw, cross=kind == "cross", uneven=kind == "uneven")
    got = saturate(g)
    assert any(n.op is Op.ATTENTION for c in got.classes.values() for n in c.nodes)
    assert not packed(got)


def test_the_bert_encoder_s_attention_is_packed_and_runs_on_onnxruntime():
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (1, 128)), "attention_mask": np.ones((1, 128), np.int64),
             "token_type_ids": np.zeros((1, 128), np.int64)}
    g = einsat.load_onnx(MODELS / "bert_encoder.onnx", fill_weights="random",
                         input_shapes={k: v.shape for k, v in feeds.items()})
    data = saturate(g)
    assert len({(n.children, tuple(sorted(n.attrs.items()))) for n in packed(data)}) == 2  # two layers
    result = extract(data, OrtLike("h100"), method="greedy")
    assert Counter(n.op for n in result.graph.nodes)[Op.PACKED_ATTENTION] == 2
    model = to_onnx(result.graph, contrib=True)
    assert Counter((n.domain, n.op_type) for n in model.graph.node)[("com.microsoft", "Attention")] == 2
    want = einsat.run(g, feeds)
    for out, theirs in zip(result.graph.outputs, ort_run(model, feeds)):
        scale = float(np.abs(want[out]).max()) or 1.0
        np.testing.assert_allclose(theirs, want[out], rtol=1e-3, atol=1e-4 * scale, err_msg=out)
