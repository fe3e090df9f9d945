"""Small stacked programs for the partition tests: built with seeded weights, fast to optimize."""

from __future__ import annotations

import numpy as np

import einsat


def stacked(layers: int = 4, seq: int = 16, hidden: int = 64, heads: int = 4, softmax: bool = False):
    """TASO's BERT layers (Q/K/V matmuls over one input: the optimizer merges them by folding
    their weights into one concatenated weight), `layers` deep, each with its own weights."""
    from benchmarks.workloads.transformer import bert_tensat
    return bert_tensat(seq=seq, hidden=hidden, heads=heads, layers=layers, softmax=softmax)


def random_feeds(graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in graph.input_types().items()}


def assert_same_function(a, b, seed: int = 0, rtol: float = 1e-4):
    """`a` and `b` give the same outputs on random inputs (NumPy backend), to fp32 round-off."""
    feeds = random_feeds(a, seed)
    want, got = einsat.run(a, feeds), einsat.run(b, feeds)
    for out in a.outputs:
        assert np.isfinite(want[out]).all(), f"{out}: the reference overflows on these inputs"
        scale = float(np.abs(want[out]).max()) or 1.0
        np.testing.assert_allclose(got[out], want[out], rtol=rtol, atol=rtol * scale, err_msg=out)


def same_program(a, b) -> None:
    """The same nodes (ops, wiring, names, attributes) and bit-equal weights."""
    assert str(a) == str(b)
    assert a.weights.keys() == b.weights.keys()
    for k in a.weights:
        np.testing.assert_array_equal(a.weights[k], b.weights[k], err_msg=k)


def prenorm(layers: int = 3, seq: int = 8, hidden: int = 32, heads: int = 2, ffn: int = 64):
    """A GPT-2-like pre-norm stack: `t + attention(norm(t))`, `t + mlp(norm(t))` per layer, then
    a final norm that alone reads the last layer's residual sum (so no candidate boundary lies
    between the last layer and the final norm)."""
    from benchmarks.workloads.layers import Net
    from benchmarks.workloads.transformer import self_attention
    net = Net("prenorm")
    b = net.b
    t = b.input("x", (1, seq, hidden))
    for _ in range(layers):
        t = b.add(t, self_attention(net, net.layernorm(t), heads))
        t = b.add(t, net.linear(b.relu(net.linear(net.layernorm(t), ffn)), hidden))
    return net.build(net.layernorm(t))
