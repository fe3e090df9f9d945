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
