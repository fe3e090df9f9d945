"""Recurrent loops that write each step into a preallocated output (TensorSSA's NLP workloads).

`lstm` runs an LSTM over T steps as one structured loop: the gates are activated in place
through slices of the gate matrix, and `out[t] = h` writes step t of a buffer made before the
loop. `seq2seq` is a greedy GRU decoder: each step embeds the previous token (a gather), writes
its logits and its argmax token into preallocated buffers and feeds the token back.
"""

from __future__ import annotations

import numpy as np

from benchmarks.imperative.detection import sigmoid_
from einsat.frontend import loop


def lstm(x, h0, c0, w_ih, w_hh, b):
    """x [T, B, I], h0 / c0 [B, H], w_ih [I, 4H], w_hh [H, 4H], b [4H] -> out [T, B, H], h, c."""
    steps, hidden = x.shape[0], h0.shape[-1]
    out = np.zeros_like(x, shape=(steps, x.shape[1], hidden))

    def step(t, h, c):
        gates = x[t] @ w_ih + h @ w_hh + b
        sigmoid_(gates[:, :3 * hidden])
        np.tanh(gates[:, 3 * hidden:], out=gates[:, 3 * hidden:])
        i, f, o, g = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        c = f * c + i * g
        h = o * np.tanh(c)
        out[t] = h
        return h, c

    h, c = loop(steps, step, h0, c0)
    return out, h, c


def seq2seq(h0, emb, w_x, w_h, b, w_out, steps=6):
    """A greedy GRU decoder from start token 0: logits [T, B, V], tokens [T, B], final h [B, H]."""
    batch, hidden = h0.shape
    logits_out = np.zeros_like(h0, shape=(steps, batch, w_out.shape[1]))
    tokens = np.zeros_like(h0, shape=(steps, batch), dtype=np.int64)
    start = np.zeros_like(h0, shape=(batch,), dtype=np.int64)

    def step(t, h, tok):
        x = emb[tok]
        zr = x @ w_x[:, :2 * hidden] + h @ w_h[:, :2 * hidden] + b[:2 * hidden]
        sigmoid_(zr)
        z, r = zr[:, :hidden], zr[:, hidden:]
        n = np.tanh(x @ w_x[:, 2 * hidden:] + (r * h) @ w_h[:, 2 * hidden:] + b[2 * hidden:])
        h = (1 - z) * n + z * h
        logits = h @ w_out
        logits_out[t] = logits
        tok = np.argmax(logits, axis=-1)
        tokens[t] = tok
        return h, tok

    h, _ = loop(steps, step, h0, start)
    return logits_out, tokens, h


def lstm_inputs(rng):
    t, bsz, i, h = 5, 2, 6, 4
    f = np.float32
    return (rng.standard_normal((t, bsz, i)).astype(f), rng.standard_normal((bsz, h)).astype(f),
            rng.standard_normal((bsz, h)).astype(f), (rng.standard_normal((i, 4 * h)) * 0.3).astype(f),
            (rng.standard_normal((h, 4 * h)) * 0.3).astype(f), (rng.standard_normal(4 * h) * 0.1).astype(f))


def seq2seq_inputs(rng):
    bsz, h, v = 3, 8, 10
    f = np.float32
    return (rng.standard_normal((bsz, h)).astype(f), rng.standard_normal((v, h)).astype(f),
            (rng.standard_normal((h, 3 * h)) * 0.3).astype(f), (rng.standard_normal((h, 3 * h)) * 0.3).astype(f),
            (rng.standard_normal(3 * h) * 0.1).astype(f), rng.standard_normal((h, v)).astype(f), 6)
