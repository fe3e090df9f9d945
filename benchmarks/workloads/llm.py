"""The workloads people bring in 2026: a Llama-style decoder layer, Mirage's operators, an MoE layer.

- `llama_prefill`, `llama_decode`: one Llama-3-8B decoder layer (hidden 4096, 32 query heads and
  8 key/value heads of 128, SwiGLU MLP 14336, RMSNorm eps 1e-5, rotary embedding base 500000),
  written as `transformers`' `LlamaDecoderLayer` computes it: RMSNorm as x / sqrt(mean(x²) + eps)
  times its gain, the rotary embedding as x·cos + rotate_half(x)·sin (cos/sin for the positions
  are constants of the graph, as an export with static shapes folds them), grouped-query
  attention with `repeat_kv` (each key/value head unsqueezed, expanded to its 4 query heads and
  reshaped), scores scaled by 1/sqrt(128), a causal mask added, softmax, the output projection,
  the residual; then RMSNorm, down(silu(gate(x)) · up(x)), the residual. Prefill takes [1, 512,
  4096] and returns the hidden state and the layer's keys and values ([1, 8, 512, 128] each, the
  cache it writes); decode takes one token [1, 1, 4096] at position 2048 and the KV cache of the
  2,048 earlier tokens as inputs (`past_key`, `past_value`: [1, 8, 2048, 128]), concatenates the
  token's key and value to it, attends over the 2,049 and returns the hidden state and the new
  cache.
- `llama_stack`: a 32-layer stack of the prefill layer (without the cache outputs) and a final
  RMSNorm, at a smaller width (hidden 512, 8 query / 2 key-value heads of 64, MLP 1536, 128
  tokens) so that its weights (~350 MB) fit a small machine: the partitioner's case.
- Mirage's operator benchmarks (Wu et al., "Mirage: A Multi-Level Superoptimizer for Tensor
  Programs", OSDI'25, §7; the shapes are those of mirage-project/mirage `benchmark/*.py` at batch
  size 1, `--bs 1`):
  `mirage_gqa` (`benchmark/group_query_attention.py`): Q [2, 256, 64], K [2, 64, 4096],
  V [2, 4096, 64]; O = (exp(QK) / Σ exp(QK)) V, the softmax written out as Mirage writes it
  (no max subtraction, no scale);
  `mirage_qknorm_gqa` (`benchmark/qknorm_gqa.py`): the same with RMSNorm (no gain) over the
  last dim of Q and of V before the products (Mirage's script normalizes Q and V);
  `mirage_rmsnorm_linear` (`benchmark/rmsnorm.py`): X [2, 4096], RMSNorm (no gain), @ W [4096, 6144];
  `mirage_lora` (`benchmark/lora.py`): X [16, 256], W [256, 4096], A [256, 16], B [16, 4096];
  O = XW + (XA)B;
  `mirage_gated_mlp` (`benchmark/gated_mlp.py`): X [8, 4096], W1, W2 [4096, 4096];
  O = silu(XW1) · (XW2);
  `mirage_ntrans` (`benchmark/norm_transformer.py`): H, X, alpha [8, 4096];
  O = rms(X + alpha · (rms(H) + X)).
  Mirage passes its weights as inputs; here the matrices are weights of the graph (what an
  exported model holds, and what lets einsat fold them); the activations are inputs.
- `moe`: a mixture-of-experts layer, 8 SwiGLU experts, top-2 routing given as inputs
  (`expert_ids` [T, 2] int64, `expert_weights` [T, 2]): each token's gate over the experts is
  Σ_k onehot(ids[:, k]) · weights[:, k] (Equal against 0..7, Cast, Mul, ReduceSum), every expert
  is applied to every token (static shapes: an export without data-dependent sizes computes them
  densely) and the outputs summed by their gates. Defaults: 64 tokens, hidden 1024, FFN 3584
  (Mixtral's 4096:14336 ratio at a quarter of its width; ~350 MB of weights).

All weights are seeded (`layers.Net`); `TEST_SIZES` are the small dimensions the tests use,
every kind of op kept.
"""

from __future__ import annotations

import numpy as np

from benchmarks.workloads.layers import Net

MIRAGE = "Mirage (OSDI'25) §7, mirage-project/mirage benchmark/"


# -- pieces -------------------------------------------------------------------------------------
def rmsnorm(net: Net, x, eps: float = 1e-5, gain: bool = True):
    """x / sqrt(mean(x², last axis) + eps) (· gain): transformers' LlamaRMSNorm."""
    b = net.b
    ms = b.reduce_mean(b.mul(x, x), axes=(-1,), keepdims=1)
    y = b.div(x, b.sqrt(b.add(ms, b.const(eps))))
    if gain:
        h = x.shape[-1]
        y = b.mul(y, b.weight(None, (1 + 0.1 * net.rng.standard_normal(h)).astype(np.float32)))
    return y


def linear(net: Net, x, out: int):
    """x @ W, no bias (Llama's projections)."""
    fan_in = x.shape[-1]
    return net.b.matmul(x, net.normal((fan_in, out), 1 / np.sqrt(fan_in)))


def silu(b, x):
    return b.mul(x, b.sigmoid(x))


def swiglu(net: Net, x, ffn: int):
    """down(silu(gate(x)) · up(x))."""
    b = net.b
    return linear(net, b.mul(silu(b, linear(net, x, ffn)), linear(net, x, ffn)), x.shape[-1])


def rope_tables(positions, dim: int, theta: float):
    """cos and sin [len(positions), dim] of the rotary embedding (transformers' layout: the
    frequencies repeated for the two halves)."""
    inv = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(np.asarray(positions, np.float64), inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotary(b, x, cos, sin):
    """x·cos + rotate_half(x)·sin, x [N, heads, S, d]; rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])."""
    d = x.shape[-1]
    first = b.slice(x, starts=(0,), ends=(d // 2,), axes=(-1,))
    second = b.slice(x, starts=(d // 2,), ends=(d,), axes=(-1,))
    rotated = b.concat(b.neg(second), first, axis=-1)
    return b.add(b.mul(x, cos), b.mul(rotated, sin))


def heads(b, x, n: int):
    """[N, S, n·d] → [N, n, S, d]."""
    batch, s, h = x.shape
    return b.transpose(b.reshape(x, shape=(batch, s, n, h // n)), perm=(0, 2, 1, 3))


def repeat_kv(b, x, groups: int):
    """[N, kv, T, d] → [N, kv·groups, T, d]: transformers' repeat_kv (unsqueeze, expand, reshape)."""
    if groups == 1:
        return x
    n, kv, t, d = x.shape
    e = b.expand(b.unsqueeze(x, axes=(2,)), shape=(n, kv, groups, t, d))
    return b.reshape(e, shape=(n, kv * groups, t, d))


def decoder_layer(net: Net, x, *, heads_q: int, heads_kv: int, ffn: int, positions, theta: float,
                  past=None, causal: bool = True, eps: float = 1e-5):
    """One Llama decoder layer on x [N, S, H]; `past`: (key, value) [N, kv, P, d] to extend.
    Returns (hidden, key, value), key/value the layer's cache [N, kv, P + S, d]."""
    b = net.b
    n, s, h = x.shape
    d = h // heads_q
    t = rmsnorm(net, x, eps)
    q = heads(b, linear(net, t, heads_q * d), heads_q)
    k = heads(b, linear(net, t, heads_kv * d), heads_kv)
    v = heads(b, linear(net, t, heads_kv * d), heads_kv)
    cos, sin = rope_tables(positions, d, theta)
    cos, sin = b.const(cos), b.const(sin)
    q, k = rotary(b, q, cos, sin), rotary(b, k, cos, sin)
    if past is not None:
        k = b.concat(past[0], k, axis=2)
        v = b.concat(past[1], v, axis=2)
    groups = heads_q // heads_kv
    scores = b.matmul(q, b.transpose(repeat_kv(b, k, groups), perm=(0, 1, 3, 2)))
    scores = b.mul(scores, b.const(1 / np.sqrt(d)))
    if causal and s > 1:
        total = k.shape[2]
        mask = np.triu(np.full((s, total), -1e9, np.float32), k=total - s + 1)
        scores = b.add(scores, b.const(mask))
    context = b.matmul(b.softmax(scores, axis=-1), repeat_kv(b, v, groups))
    attn = linear(net, b.reshape(b.transpose(context, perm=(0, 2, 1, 3)), shape=(n, s, heads_q * d)), h)
    x = b.add(x, attn)
    x = b.add(x, swiglu(net, rmsnorm(net, x, eps), ffn))
    return x, k, v


# -- the Llama workloads -----------------------------------------------------------------------
LLAMA3_8B = {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "theta": 500000.0}


def llama_prefill(batch: int = 1, seq: int = 512, hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                  ffn: int = 14336, theta: float = 500000.0):
    net = Net("llama_prefill")
    b = net.b
    x = b.input("x", (batch, seq, hidden))
    out, k, v = decoder_layer(net, x, heads_q=heads, heads_kv=kv_heads, ffn=ffn, positions=range(seq),
                              theta=theta)
    return b.build(out, k, v, names=["hidden", "present_key", "present_value"])


def llama_decode(batch: int = 1, past: int = 2048, hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                 ffn: int = 14336, theta: float = 500000.0):
    net = Net("llama_decode")
    b = net.b
    d = hidden // heads
    x = b.input("x", (batch, 1, hidden))
    pk = b.input("past_key", (batch, kv_heads, past, d))
    pv = b.input("past_value", (batch, kv_heads, past, d))
    out, k, v = decoder_layer(net, x, heads_q=heads, heads_kv=kv_heads, ffn=ffn, positions=[past],
                              theta=theta, past=(pk, pv))
    return b.build(out, k, v, names=["hidden", "present_key", "present_value"])


def llama_stack(batch: int = 1, seq: int = 128, layers: int = 32, hidden: int = 512, heads: int = 8,
                kv_heads: int = 2, ffn: int = 1536, theta: float = 500000.0):
    net = Net("llama_stack")
    b = net.b
    t = b.input("x", (batch, seq, hidden))
    for _ in range(layers):
        t, _, _ = decoder_layer(net, t, heads_q=heads, heads_kv=kv_heads, ffn=ffn, positions=range(seq),
                                theta=theta)
    return b.build(rmsnorm(net, t), names=["hidden"])


# -- Mirage's operators ------------------------------------------------------------------------
def _softmax_written_out(b, a, axis: int):
    e = b.exp(a)
    return b.div(e, b.reduce_sum(e, axes=(axis,), keepdims=1))


def mirage_gqa(batch: int = 1, queries: int = 256, keys: int = 4096, dim: int = 64, qknorm: bool = False):
    net = Net("mirage_qknorm_gqa" if qknorm else "mirage_gqa")
    b = net.b
    q = b.input("Q", (2 * batch, queries, dim))
    k = b.input("K", (2 * batch, dim, keys))
    v = b.input("V", (2 * batch, keys, dim))
    if qknorm:
        q, v = rmsnorm(net, q, gain=False), rmsnorm(net, v, gain=False)
    return b.build(b.matmul(_softmax_written_out(b, b.matmul(q, k), 2), v), names=["O"])


def mirage_qknorm_gqa(batch: int = 1, queries: int = 256, keys: int = 4096, dim: int = 64):
    return mirage_gqa(batch, queries, keys, dim, qknorm=True)


def mirage_rmsnorm_linear(batch: int = 1, hidden: int = 4096, out: int = 6144):
    net = Net("mirage_rmsnorm_linear")
    b = net.b
    x = b.input("X", (2 * batch, hidden))
    return b.build(linear(net, rmsnorm(net, x, gain=False), out), names=["O"])


def mirage_lora(batch: int = 1, rows: int = 16, hidden: int = 256, out: int = 4096, rank: int = 16):
    """`batch` is kept for the registry's uniformity: Mirage's LoRA case has 16 rows at every batch."""
    net = Net("mirage_lora")
    b = net.b
    x = b.input("X", (rows * batch, hidden))
    lora = linear(net, linear(net, x, rank), out)
    return b.build(b.add(linear(net, x, out), lora), names=["O"])


def mirage_gated_mlp(batch: int = 1, rows: int = 8, hidden: int = 4096, ffn: int = 4096):
    net = Net("mirage_gated_mlp")
    b = net.b
    x = b.input("X", (rows * batch, hidden))
    return b.build(b.mul(silu(b, linear(net, x, ffn)), linear(net, x, ffn)), names=["O"])


def mirage_ntrans(batch: int = 1, rows: int = 8, hidden: int = 4096):
    net = Net("mirage_ntrans")
    b = net.b
    h, x, alpha = (b.input(name, (rows * batch, hidden)) for name in ("H", "X", "alpha"))
    c = b.add(x, b.mul(alpha, b.add(rmsnorm(net, h, gain=False), x)))
    return b.build(rmsnorm(net, c, gain=False), names=["O"])


# -- mixture of experts ------------------------------------------------------------------------
def moe(batch: int = 1, tokens: int = 64, hidden: int = 1024, ffn: int = 3584, experts: int = 8, top: int = 2):
    net = Net("moe")
    b = net.b
    t = tokens * batch
    x = b.input("x", (t, hidden))
    ids = b.input("expert_ids", (t, top), np.int64)
    weights = b.input("expert_weights", (t, top))
    onehot = b.cast(b.equal(b.unsqueeze(ids, axes=(2,)), b.const(np.arange(experts), np.int64)), dtype="float32")
    gates = b.reduce_sum(b.mul(onehot, b.unsqueeze(weights, axes=(2,))), axes=(1,), keepdims=0)  # [T, E]
    out = None
    for e in range(experts):
        y = b.mul(b.slice(gates, starts=(e,), ends=(e + 1,), axes=(1,)), swiglu(net, x, ffn))
        out = y if out is None else b.add(out, y)
    return b.build(out, names=["out"])


def moe_example_inputs(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Routing as a router would give it: two distinct experts per token out of all 8, softmax weights."""
    rng = np.random.default_rng(seed)
    t, top = graph.types["expert_ids"].shape
    experts = next(graph.weights[n.inputs[1]].size for n in graph.nodes if n.op.value == "equal")
    ids = np.stack([rng.choice(experts, top, replace=False) for _ in range(t)]).astype(np.int64)
    logits = rng.standard_normal((t, top))
    w = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return {"x": rng.standard_normal(graph.types["x"].shape).astype(np.float32), "expert_ids": ids,
            "expert_weights": w.astype(np.float32)}


# -- the registry's entries and the tests' sizes ------------------------------------------------
def workloads(Workload) -> dict:
    llama = "Llama-3-8B (Meta, 2024) as transformers' LlamaDecoderLayer computes it"
    return {
        "llama_prefill": Workload(llama_prefill, {"batch": 1, "seq": 512, **LLAMA3_8B},
                                  "Llama-3-8B decoder layer, prefill [1, 512, 4096]: RMSNorm, RoPE, GQA 32/8 "
                                  "heads, SwiGLU 14336", llama),
        "llama_decode": Workload(llama_decode, {"batch": 1, "past": 2048, **LLAMA3_8B},
                                 "Llama-3-8B decoder layer, decode: 1 token against a 2,048-token KV cache "
                                 "(inputs)", llama),
        "llama_stack": Workload(llama_stack, {"batch": 1, "seq": 128, "layers": 32, "hidden": 512, "heads": 8,
                                              "kv_heads": 2, "ffn": 1536},
                                "32 Llama layers at hidden 512 (8/2 heads, SwiGLU 1536), 128 tokens, final "
                                "RMSNorm", llama),
        "mirage_gqa": Workload(mirage_gqa, {"batch": 1}, "GQA: Q [2,256,64], K [2,64,4096], V [2,4096,64]",
                               MIRAGE + "group_query_attention.py"),
        "mirage_qknorm_gqa": Workload(mirage_qknorm_gqa, {"batch": 1}, "RMSNorm(Q), RMSNorm(V) + GQA, shapes "
                                      "as mirage_gqa", MIRAGE + "qknorm_gqa.py"),
        "mirage_rmsnorm_linear": Workload(mirage_rmsnorm_linear, {"batch": 1},
                                          "RMSNorm [2,4096] + Linear [4096,6144]", MIRAGE + "rmsnorm.py"),
        "mirage_lora": Workload(mirage_lora, {"batch": 1}, "LoRA: X [16,256] @ W [256,4096] + (X@A [256,16])"
                                "@B [16,4096]", MIRAGE + "lora.py"),
        "mirage_gated_mlp": Workload(mirage_gated_mlp, {"batch": 1}, "gated MLP: silu(X@W1)·(X@W2), X [8,4096], "
                                     "W [4096,4096]", MIRAGE + "gated_mlp.py"),
        "mirage_ntrans": Workload(mirage_ntrans, {"batch": 1}, "nTrans: rms(X + alpha·(rms(H) + X)), [8,4096]",
                                  MIRAGE + "norm_transformer.py"),
        "moe": Workload(moe, {"batch": 1, "tokens": 64, "hidden": 1024, "ffn": 3584, "experts": 8, "top": 2},
                        "MoE layer: 8 SwiGLU experts (1024→3584), top-2 routing as inputs, 64 tokens",
                        "Mixtral-style (Jiang et al. 2024); Mirage §7's MoE"),
    }


SMALL_LLAMA = {"hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96}
TEST_SIZES = {
    "llama_prefill": {**SMALL_LLAMA, "seq": 16},
    "llama_decode": {**SMALL_LLAMA, "past": 16},
    "llama_stack": {**SMALL_LLAMA, "seq": 8, "layers": 3},
    "mirage_gqa": {"queries": 16, "keys": 64, "dim": 16},
    "mirage_qknorm_gqa": {"queries": 16, "keys": 64, "dim": 16},
    "mirage_rmsnorm_linear": {"hidden": 64, "out": 96},
    "mirage_lora": {"rows": 4, "hidden": 32, "out": 64, "rank": 4},
    "mirage_gated_mlp": {"rows": 4, "hidden": 64, "ffn": 64},
    "mirage_ntrans": {"rows": 4, "hidden": 64},
    "moe": {"tokens": 8, "hidden": 32, "ffn": 48},
}
