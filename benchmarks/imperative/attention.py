"""Attention with in-place causal masking and an in-place softmax."""

from __future__ import annotations

import numpy as np


def masked_attention(q, k, v):
    """q, k, v [B, T, D] -> softmax(q kᵀ / √D, causal) v, with the mask and softmax in place."""
    steps, depth = q.shape[1], q.shape[2]
    scores = q @ k.swapaxes(-1, -2)
    scores /= np.sqrt(depth)
    scores[:, np.triu(np.ones((steps, steps), dtype=bool), 1)] = -1e9
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores @ v


def attention_inputs(rng):
    return tuple(rng.standard_normal((2, 6, 8)).astype(np.float32) for _ in range(3))
