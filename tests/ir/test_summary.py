"""The graph summary: per-op counts, FLOPs and bytes, inputs, outputs, weights."""

from __future__ import annotations

import numpy as np

from einsat.ir import GraphBuilder
from einsat.ir.summary import op_table, si, summarize


def test_si_prefixes():
    assert [si(5), si(1500), si(2.5e6, "B"), si(3e9), si(7e12)] == ["5", "1.50 k", "2.50 MB", "3.00 G", "7.00 T"]


def test_op_table_sums_flops_and_bytes_per_op():
    b = GraphBuilder("mlp")
    x = b.input("x", (4, 8))
    w1, w2 = b.weight("w1", (8, 16)), b.weight("w2", (16, 2))
    y = b.matmul(b.relu(b.matmul(x, w1)), w2)
    g = b.build(y)
    rows = {r[0]: r[1:] for r in op_table(g)}
    # matmul: 2*4*8*16 + 2*4*16*2 FLOPs; bytes: inputs and outputs, 4 bytes each
    assert rows["matmul"] == (2, 2 * 4 * 8 * 16 + 2 * 4 * 16 * 2, 4 * (32 + 128 + 64 + 64 + 32 + 8))
    assert rows["relu"] == (1, 64, 4 * 128)
    text = summarize(g)
    assert "weights: 2 tensors, 160 values, 640 B" in text
    assert "opaque" not in text and text.splitlines()[0] == "graph 'mlp'"
    assert np.isclose(sum(r[2] for r in op_table(g)), g.flops())
