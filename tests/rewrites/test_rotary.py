"""The rotary generator: HF's x · C + rotate_half(x) · S becomes one `rotary` op.

- soundness: on drawn programs (the caches cos/sin(concat(f, f)) scaled, cast, unsqueezed over the
  heads, computed from an input or constants; the sum's and products' operands in either order),
  every rotary e-node the generator adds computes, on random inputs, the value of the class it was
  unioned into (its half caches evaluated from the e-graph's own terms);
- no rotary where the caches' halves are not equal by construction (cos(concat(f, g)), a cache
  given as an input), nor for a rotate-half of another tensor than the one multiplied by cos;
- start => goal: extracted under the default cost (the H100 roofline), the program keeps the op,
  runs as the input does, and writes ONNX RotaryEmbedding (opset 23) that onnxruntime runs;
- the bundled exports (Llama, Qwen2, Mistral; prefill and decode; dynamo and legacy): each
  layer's q and k rotations (4 in all) are found.
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
from einsat.rewrites.algebra.rotary import rotary_generator
from einsat.testing.strategies import seeds
from tests.ir.onnx_check import ort_run
from tests.rewrites.test_recognize_models import LLMS, _llm


def saturate(g, iterations=1):
    s = Session(Limits(iterations=iterations, nodes=200_000, time_s=600), cost=RooflineCost("h100"))
    s.add_graph(g)
    s.run(Schedule((rotary_generator(),)))
    return s.export()


def rotaries(data):
    return [(cid, n) for cid, c in data.classes.items() for n in c.nodes if n.op is Op.ROTARY]


def _cache(b, f, fn, scale, cast):
    """fn(concat(f, f)) [· scale] [cast], unsqueezed over the heads: HF's cos/sin cache."""
    c = getattr(b, fn)(b.concat(f, f, axis=-1))
    if scale:
        c = b.mul(c, b.weight(f"{fn}_scaling", np.array(0.75, np.float32)))
    if cast:
        c = b.cast(c, dtype="float32")
    return b.unsqueeze(c, axes=(1,))


def _rotate_half(b, x, d):
    h = d // 2
    shape = x.type.shape
    hi = b.slice(x, starts=(0, 0, 0, h), ends=(*shape[:3], d), axes=(0, 1, 2, 3), steps=(1, 1, 1, 1))
    lo = b.slice(x, starts=(0, 0, 0, 0), ends=(*shape[:3], h), axes=(0, 1, 2, 3), steps=(1, 1, 1, 1))
    return b.concat(b.neg(hi), lo, axis=-1)


def _program(draw, broken=None):
    """(graph, feeds): y = x · C + rotate_half(x) · S, operands in drawn orders. `broken`: a form
    that is not a rotary ("halves" the caches' halves differ; "input" the caches are inputs;
    "other" rotate_half of another tensor)."""
    rng = np.random.default_rng(draw(seeds))
    bsz, heads, seq, half = (draw(st.integers(1, 3)) for _ in range(4))
    d = 2 * half
    cb = draw(st.sampled_from([1, bsz]))
    b = GraphBuilder("rope")
    x = b.input("x", (bsz, heads, seq, d))
    feeds = {"x": rng.standard_normal((bsz, heads, seq, d)).astype(np.float32)}
    if draw(st.booleans()):
        f = b.input("freqs", (cb, seq, half))
        feeds["freqs"] = rng.standard_normal((cb, seq, half)).astype(np.float32)
    else:
        f = b.weight("freqs", rng.standard_normal((cb, seq, half)).astype(np.float32))
    scale, cast = draw(st.booleans()), draw(st.booleans())
    if broken == "input":
        cos, sin = b.input("cos", (cb, 1, seq, d)), b.input("sin", (cb, 1, seq, d))
        feeds |= {k: rng.standard_normal((cb, 1, seq, d)).astype(np.float32) for k in ("cos", "sin")}
    elif broken == "halves":
        g2 = b.weight("freqs2", rng.standard_normal((cb, seq, half)).astype(np.float32))
        cos = b.unsqueeze(b.cos(b.concat(f, g2, axis=-1)), axes=(1,))
        sin = _cache(b, f, "sin", scale, cast)
    else:
        cos, sin = _cache(b, f, "cos", scale, cast), _cache(b, f, "sin", scale, cast)
    other = x
    if broken == "other":
        other = b.input("other", (bsz, heads, seq, d))
        feeds["other"] = rng.standard_normal((bsz, heads, seq, d)).astype(np.float32)
    rot = _rotate_half(b, other, d)
    p1 = b.mul(x, cos) if draw(st.booleans()) else b.mul(cos, x)
    p2 = b.mul(rot, sin) if draw(st.booleans()) else b.mul(sin, rot)
    y = b.add(p1, p2) if draw(st.booleans()) else b.add(p2, p1)
    return b.build(y), feeds


def _values(g: Graph, feeds) -> dict:
    every = Graph(g.nodes, g.input_types(), [o for n in g.nodes for o in n.outputs], g.weights, g.name)
    return {**feeds, **g.weights, **einsat.run(every, feeds)}


def _evaluator(data, values):
    """value(cid): the source's value of a named class, else one of the class's e-nodes computed
    from its children's values (the generator's new terms: the half caches)."""
    named = {cid: c.name for cid, c in data.classes.items() if c.name in values}
    memo = {}

    def value(cid, depth=0):
        if cid in memo:
            return memo[cid]
        if cid in named:
            return values[named[cid]]
        if depth > 6:
            return None
        for n in data.classes[cid].nodes:
            if n.op is None or n.op is Op.ROTARY:
                continue
            args = [value(k, depth + 1) for k in n.children]
            if all(a is not None for a in args):
                memo[cid] = opdef(n.op).numpy(args, n.attrs)[n.output]
                return memo[cid]
        return None

    return named, value


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_every_rotary_computes_the_class_it_was_unioned_into(data):
    g, feeds = _program(data.draw)
    got = saturate(g)
    found = rotaries(got)
    assert len(found) == 1
    named, value = _evaluator(got, _values(g, feeds))
    (cid, n) = found[0]
    assert cid in named and named[cid] == g.outputs[0]
    args = [value(k) for k in n.children]
    assert all(a is not None for a in args)
    out = opdef(Op.ROTARY).numpy(args, n.attrs)[0]
    np.testing.assert_allclose(out, _values(g, feeds)[g.outputs[0]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("broken", ["halves", "input", "other"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_no_rotary_where_the_chain_is_not_one(broken, data):
    g, _ = _program(data.draw, broken)
    assert not rotaries(saturate(g, iterations=2))


def test_extracted_under_the_default_cost_the_op_writes_as_rotary_embedding():
    draws = iter([7, 1, 2, 5, 8, 1, True, True, True, True, True, True])  # x [1, 2, 5, 16], a computed cache
    g, feeds = _program(lambda strategy: next(draws))
    result = extract(saturate(g), RooflineCost("h100"), method="greedy")
    kept = Counter(n.op for n in result.graph.nodes)
    assert kept[Op.ROTARY] == 1 and not kept[Op.NEG], kept
    want = einsat.run(g, feeds)[g.outputs[0]]
    np.testing.assert_allclose(einsat.run(result.graph, feeds)[result.graph.outputs[0]], want, rtol=1e-5, atol=1e-5)
    model = to_onnx(result.graph)
    onnx.checker.check_model(model, full_check=True)
    assert Counter(n.op_type for n in model.graph.node)["RotaryEmbedding"] == 1
    (theirs,) = ort_run(model, feeds)
    np.testing.assert_allclose(theirs, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", LLMS)  # each well under a second: all twelve in the fast suite
def test_every_rotation_of_the_llm_exports_is_recognized(name):
    g, _ = _llm(name)
    assert Counter(n.op for n in g.nodes)[Op.NEG] == 4  # rotate_half of q and k, 2 layers
    found = rotaries(saturate(g))
    assert len(found) == 4 and len({cid for cid, _ in found}) == 4


def test_every_rotation_of_the_static_four_layer_llama_is_recognized():
    from tests.ir.test_models import MODELS
    g = einsat.load_onnx(MODELS / "hf_llama4_prefill_legacy_static.onnx", fill_weights="random")
    assert Counter(n.op for n in g.nodes)[Op.NEG] == 8
    assert len({cid for cid, _ in rotaries(saturate(g))}) == 8


def test_scalar_products_beside_the_chain_are_no_rotation():
    """A product with a scalar factor (rank 0) in a rank-4 sum: read, not a rotation (the default
    schedule's e-graph of the Llama export holds such products)."""
    b = GraphBuilder("scalar")
    x = b.input("x", (1, 2, 3, 4))
    y = b.add(x, b.mul(b.weight("two", np.array(2.0, np.float32)), x))
    assert not rotaries(saturate(b.build(y)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_prefill_dynamo", "qwen2_decode_legacy"])
def test_optimized_for_the_default_cost_an_llm_writes_rotary_embedding_and_runs(name):
    """The whole pipeline (default schedule and cost, bounded by work): every rotation is kept as
    the op, the result is proved equal, and the written file holds RotaryEmbedding and matches the
    input on onnxruntime."""
    from tests.ir.test_hf_llm_models import feeds
    from tests.work_bounded import by_work
    g, _ = _llm(name)
    inputs = feeds(name)
    result = einsat.optimize(g, inputs, cost="h100", **by_work(iterations=2))
    assert result.report.verification.status == "proved"
    kept = Counter(n.op for n in result.graph.nodes)
    assert kept[Op.ROTARY] == 4 and not kept[Op.NEG], kept
    model = to_onnx(result.graph)
    onnx.checker.check_model(model)
    assert Counter(n.op_type for n in model.graph.node)["RotaryEmbedding"] == 4
    want = einsat.run(g, inputs)
    for name_, theirs in zip(g.outputs, ort_run(model, inputs)):
        np.testing.assert_allclose(theirs, want[name_], rtol=1e-4, atol=1e-5)
