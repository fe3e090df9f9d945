"""#29's workloads under `cost="h100"`: bert_tensat, BERT-base and GPT-2 (the transformers
exports at sequence 16, partitioned as `einsat.optimize` does) keep their softmax, layernorm and
GELU chains as fused eops (eop_multi where a norm also writes the residual sum that the next
residual add reads). The default schedule without the attention rewrites, as
`benchmarks/fusion_bench.py` runs it: the SDPA op would take each whole attention chain.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import einsat
from benchmarks.fusion_bench import chain_kind
from einsat.cost.models import cost_model
from einsat.ir import Op
from tests.rewrites.derive.test_fusion_chains import _without_attention
from tests.work_bounded import BY_WORK, ended_by_work

MODELS = Path(__file__).resolve().parents[2] / "data" / "models"
LEFT_ALONE = (Op.SOFTMAX, Op.LAYERNORM, Op.ERF, Op.TANH)


def _fused(graph) -> Counter:
    """Fused eops kept, by what they compute (`fusion_bench.chain_kind`), eop_multi as 'kind+'."""
    out = Counter()
    for n in graph.nodes:
        if n.op is Op.EOP:
            out[chain_kind(n.attrs["expr"])] += 1
        elif n.op is Op.EOP_MULTI:
            out[chain_kind(n.attrs["exprs"]) + "+"] += 1
    return out


def _optimize(g):
    # the search and the ILP end by work, their clocks far off: under load the default 8 s stopped one
    # piece of BERT-base before its layernorm was fused (#27 item 5)
    result = einsat.optimize(g, cost="h100", rules=_without_attention(), **BY_WORK)
    ended_by_work(result.report)
    model = cost_model("h100")
    assert model.graph_cost(result.graph) < model.graph_cost(g)
    return result.graph, Counter(n.op for n in result.graph.nodes)


def test_bert_tensat_keeps_a_fused_softmax_per_layer():
    from benchmarks.workloads.transformer import bert_tensat
    graph, ops = _optimize(bert_tensat(layers=2))
    assert _fused(graph)["softmax"] == 2 and not any(ops[op] for op in LEFT_ALONE)


@pytest.mark.slow
def test_bert_base_keeps_every_softmax_layernorm_and_gelu_chain_fused():
    g = einsat.load_onnx(MODELS / "hf_bert_base.onnx", fill_weights="random",
                         input_shapes={k: (1, 16) for k in ("input_ids", "attention_mask", "token_type_ids")})
    before = Counter(n.op for n in g.nodes)
    graph, ops = _optimize(g)
    kinds = _fused(graph)
    assert kinds["softmax"] == before[Op.SOFTMAX] == 12
    assert kinds["norm"] + kinds["norm+"] == before[Op.LAYERNORM] == 25
    assert kinds["gelu"] == before[Op.ERF] == 12
    assert not any(ops[op] for op in LEFT_ALONE)


@pytest.mark.slow
def test_gpt2_keeps_its_softmax_and_gelu_chains_and_the_in_piece_layernorms_fused():
    """Each layer's second layernorm reads the residual sum the next residual add reads too: one
    eop_multi writes the norm and the sum. The first layernorm of each layer reads the value the
    partition cuts at (the previous piece's residual sum): no chain crosses a piece."""
    g = einsat.load_onnx(MODELS / "hf_gpt2.onnx", fill_weights="random",
                         input_shapes={k: (1, 16) for k in ("input_ids", "attention_mask")})
    before = Counter(n.op for n in g.nodes)
    graph, ops = _optimize(g)
    kinds = _fused(graph)
    assert kinds["softmax"] == before[Op.SOFTMAX] == 12
    # each tanh GELU a fused eop or, recognized (`algebra.gelu`), the gelu op
    assert kinds["gelu"] + ops[Op.GELU] == before[Op.TANH] == 12
    assert kinds["norm+"] >= 12
    assert kinds["norm+"] + kinds["norm"] + ops[Op.LAYERNORM] == before[Op.LAYERNORM] == 25
    assert not ops[Op.SOFTMAX] and not ops[Op.TANH]


@pytest.mark.slow
def test_a_gpt2_layer_keeps_its_softmax_layernorm_and_gelu_chains_fused():
    """One GPT-2 layer whole (pre-norm, causal softmax, tanh GELU), as the partition's piece
    would be with the layer's input norm inside: its two norms and the next layer's are each an
    eop_multi writing the residual sum it normalizes."""
    g = gpt2_layer()
    graph, ops = _optimize(g)
    kinds = _fused(graph)
    assert kinds["softmax"] == 1 and kinds["gelu"] == 1 and kinds["norm+"] == 3, kinds
    assert not any(ops[op] for op in LEFT_ALONE)


def gpt2_layer(seq: int = 16, hidden: int = 64, heads: int = 2):
    """x0 = emb + pos; h = x0 + attn(ln1(x0)); out = h + mlp(ln2(h)), then the next layer's
    norm ln1'(out) and its residual: GPT-2's order (a pre-norm block whose sums each feed a norm
    and a residual add)."""
    import numpy as np

    from einsat.ir import GraphBuilder
    rng = np.random.default_rng(0)
    b = GraphBuilder("gpt2_layer")
    d = hidden // heads

    def w(*shape):
        return b.weight(None, (0.1 * rng.standard_normal(shape)).astype(np.float32))

    def ln(x):
        return b.layernorm(x, w(hidden), w(hidden), axis=2, epsilon=1e-5)

    def linear(x, n):
        return b.add(b.matmul(x, w(x.shape[-1], n)), w(n))

    def heads_of(x):
        return b.transpose(b.reshape(x, shape=(1, seq, heads, d)), perm=(0, 2, 1, 3))

    x0 = b.add(b.input("emb", (1, seq, hidden)), b.input("pos", (1, seq, hidden)))
    a = ln(x0)
    q, k, v = (heads_of(linear(a, hidden)) for _ in range(3))
    scores = b.mul(b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2))), b.const(1 / np.sqrt(d)))
    mask = np.triu(np.full((seq, seq), -1e4, np.float32), 1)
    p = b.softmax(b.add(scores, b.weight("causal", mask)), axis=3)
    ctx = b.reshape(b.transpose(b.matmul(p, v), perm=(0, 2, 1, 3)), shape=(1, seq, hidden))
    h = b.add(x0, linear(ctx, hidden))
    f = linear(ln(h), 4 * hidden)
    inner = b.mul(b.add(f, b.mul(b.pow(f, b.const(3.0)), b.const(0.044715))), b.const(np.sqrt(2 / np.pi)))
    gelu = b.mul(b.mul(f, b.const(0.5)), b.add(b.tanh(inner), b.const(1.0)))
    out = b.add(h, linear(gelu, hidden))
    return b.build(b.matmul(ln(out), w(hidden, hidden)), out)
