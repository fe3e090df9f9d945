"""Attention workloads: BERT as PET runs it, TASO/Tensat's BERT, EinNet's Longformer block.

- `bert`: PET's BERT-base encoder on [N, 512, 768]: 12 layers of multi-head self-attention
  (12 heads, scaled dot products, softmax) and a GELU feed-forward (3072), each sub-layer with a
  residual add and layer normalization.
- `bert_tensat`: TASO's `examples/bert.py` as Tensat uses it: input [64, 1024], 8 layers of
  16-head attention: Q/K/V matmuls, reshape and transpose to heads, scores, (softmax), context,
  back to [64, 1024], a final linear layer. TASO drops the softmax (it had none) and, by a slip,
  feeds the input rather than the context to the final linear; here the context feeds it, and
  `softmax=False` reproduces TASO's op mix.
- `longformer`: EinNet's `getLongformer`: Q/K/V projections of [N, seq, 512] to 8 heads of 64,
  sliding-window attention with a dilated band (`g2bmm`, window W = 1000 each side, dilation 4),
  softmax over the band, `gbmm` with V, then two ReLU linear layers and a residual add.
"""

from __future__ import annotations

import numpy as np

from benchmarks.workloads.layers import Net
from einsat import Graph


def split_heads(b, x, heads: int):
    """[N, S, H] → [N, heads, S, H/heads]."""
    n, s, h = x.shape
    return b.transpose(b.reshape(x, shape=(n, s, heads, h // heads)), perm=(0, 2, 1, 3))


def merge_heads(b, x):
    """[N, heads, S, d] → [N, S, heads·d]."""
    n, heads, s, d = x.shape
    return b.reshape(b.transpose(x, perm=(0, 2, 1, 3)), shape=(n, s, heads * d))


def self_attention(net: Net, x, heads: int):
    b = net.b
    h = x.shape[-1]
    q, k, v = (split_heads(b, net.linear(x, h), heads) for _ in range(3))
    scores = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    scores = b.mul(scores, b.const(1 / np.sqrt(h // heads)))
    context = b.matmul(b.softmax(scores, axis=-1), v)
    return net.linear(merge_heads(b, context), h)


def bert(batch: int = 1, seq: int = 512, hidden: int = 768, heads: int = 12, layers: int = 12,
         ffn: int = 3072) -> Graph:
    net = Net("bert")
    b = net.b
    t = b.input("x", (batch, seq, hidden))
    for _ in range(layers):
        t = net.layernorm(b.add(t, self_attention(net, t, heads)))
        f = net.linear(b.gelu(net.linear(t, ffn)), hidden)
        t = net.layernorm(b.add(t, f))
    return net.build(t)


def bert_tensat(seq: int = 64, hidden: int = 1024, heads: int = 16, layers: int = 8,
                softmax: bool = True, batch: int = 1) -> Graph:
    """TASO's graph has no batch dim; `batch` > 1 stacks sequences along the rows."""
    net = Net("bert_tensat")
    b = net.b
    rows, d = batch * seq, hidden // heads
    t = b.input("x", (rows, hidden))
    for _ in range(layers):
        q, k, v = (b.transpose(b.reshape(net.linear(t, hidden, bias=False), shape=(rows, heads, d)),
                               perm=(1, 0, 2)) for _ in range(3))
        logits = b.matmul(q, b.transpose(k, perm=(0, 2, 1)))
        if softmax:
            logits = b.softmax(b.mul(logits, b.const(1 / np.sqrt(d))), axis=-1)
        out = b.reshape(b.transpose(b.matmul(logits, v), perm=(1, 0, 2)), shape=(rows, hidden))
        t = net.linear(out, hidden, bias=False)
    return net.build(t)


def longformer(batch: int = 1, seq: int = 10000, hidden: int = 512, heads: int = 8, width: int = 1000,
               dilation: int = 4) -> Graph:
    net = Net("longformer")
    b = net.b
    x = b.input("x", (batch, seq, hidden))
    d = hidden // heads

    def project():  # [N, S, H] → [N·heads, S, d]
        y = split_heads(b, net.linear(x, hidden, bias=False), heads)
        return b.reshape(y, shape=(batch * heads, seq, d))

    q, k, v = project(), project(), project()
    probs = b.softmax(b.g2bmm(q, k, width=width, dilation=dilation), axis=-1)
    attn = b.gbmm(probs, v, dilation=dilation)
    t = merge_heads(b, b.reshape(attn, shape=(batch, heads, seq, d)))
    t = net.linear(net.linear(t, hidden, act="relu"), hidden, act="relu")
    return net.build(b.add(t, x))
