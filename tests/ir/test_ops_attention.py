"""attention: softmax(q kᵀ · scale + mask) v against a loop written out here, onnxruntime on its
export (the chain), shapes, costs and the errors bad inputs get."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einsat
from einsat import GraphBuilder, Op
from einsat.errors import AttributeValueError, ShapeError
from einsat.ir.registry import REGISTRY
from einsat.ir.types import TensorType
from tests.ir.onnx_check import check_op


def reference(q, k, v, mask, scale, causal):
    """One (batch, query) row at a time, in float64, with math.exp."""
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    sq, sk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    out = np.zeros(batch + (sq, dv))
    full = None if mask is None else np.broadcast_to(mask, batch + (sq, sk))
    for idx in np.ndindex(*batch):
        qb = np.broadcast_to(q, batch + q.shape[-2:])[idx]
        kb = np.broadcast_to(k, batch + k.shape[-2:])[idx]
        vb = np.broadcast_to(v, batch + v.shape[-2:])[idx]
        for i in range(sq):
            scores = []
            for j in range(sk):
                s = sum(float(qb[i, t]) * float(kb[j, t]) for t in range(q.shape[-1])) * scale
                if full is not None:
                    s += float(full[idx][i, j])
                if causal and j > i:
                    s = -math.inf
                scores.append(s)
            top = max(scores)
            w = [math.exp(s - top) for s in scores]
            total = sum(w)
            for t in range(dv):
                out[idx][i, t] = sum(w[j] / total * float(vb[j, t]) for j in range(sk))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2), st.sampled_from([(1, 1), (3, 3), (4, 1)]), st.integers(1, 5), st.integers(1, 5),
       st.integers(1, 4), st.integers(1, 4), st.booleans(), st.booleans(), st.integers(0, 2 ** 16))
def test_attention_matches_the_written_out_loop(n, heads, sq, sk, d, dv, masked, causal, seed):
    rng = np.random.default_rng(seed)
    hq, hkv = heads
    q = rng.standard_normal((n, hq, sq, d))
    k = rng.standard_normal((n, hkv, sk, d))
    v = rng.standard_normal((n, hkv, sk, dv))
    mask = np.where(rng.random((n, 1, 1, sk)) < 0.3, -1e9, 0.0) if masked else None
    scale = 1 / math.sqrt(d)
    b = GraphBuilder("att")
    ins = [b.input(x, a.shape, np.float64) for x, a in zip("qkv", (q, k, v))]
    m = b.input("mask", mask.shape, np.float64) if masked else None
    g = b.build(b.attention(*ins, m, causal=int(causal)))
    assert g.nodes[0].attrs["scale"] == pytest.approx(scale, rel=1e-6)  # 1/sqrt(D) by default
    feeds = {"q": q, "k": k, "v": v, **({"mask": mask} if masked else {})}
    got = einsat.run(g, feeds)[g.outputs[0]]
    want = reference(q, k, v, mask, g.nodes[0].attrs["scale"], causal)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    assert g.types[g.outputs[0]].shape == (n, hq, sq, dv)


def test_a_fully_masked_row_is_nan_as_the_chain_makes_it():
    q = np.ones((1, 2, 3), np.float32)
    mask = np.array([[0.0, 0.0], [-np.inf, -np.inf]], np.float32)
    (out,) = REGISTRY[Op.ATTENTION].numpy([q, q, q, mask], {"scale": 1.0, "causal": 0})
    assert np.isfinite(out[0, 0]).all() and np.isnan(out[0, 1]).all()


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_onnx_export_runs_on_onnxruntime(masked, causal, rng):
    """Unmasked: ONNX Attention with one K/V head; this mask broadcasts over the queries, which
    onnxruntime's Attention does not take: the chain (and under cap 17 the chain, `check_op`)."""
    q = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    k = rng.standard_normal((2, 1, 6, 4)).astype(np.float32)  # one K/V head for three query heads
    v = rng.standard_normal((2, 1, 6, 3)).astype(np.float32)
    mask = np.where(rng.random((2, 1, 1, 6)) < 0.3, -1e4, 0).astype(np.float32)
    check_op(Op.ATTENTION, [q, k, v, mask if masked else None], {"scale": 0.3, "causal": causal})


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_costs_count_both_gemms_and_the_scores_only_where_no_engine_fuses(dtype):
    d = REGISTRY[Op.ATTENTION]
    q, k, v = TensorType((2, 12, 128, 64), dtype), TensorType((2, 12, 256, 64), dtype), \
        TensorType((2, 12, 256, 32), dtype)
    out = TensorType((2, 12, 128, 32), dtype)
    mask = TensorType((2, 1, 1, 256), dtype)
    attrs = {"scale": 0.125, "causal": 0}
    scores = 2 * 12 * 128 * 256
    size = np.dtype(dtype).itemsize
    assert d.flops([q, k, v], [out], attrs) == scores * (2 * 64 + 2 * 32 + 6)
    io = size * 2 * 12 * (128 * 64 + 256 * 64 + 256 * 32 + 128 * 32)
    fused = dtype == np.float16  # cuDNN's SDPA keeps the scores on chip; fp32 runs unfused
    assert d.bytes([q, k, v], [out], attrs) == io + (0 if fused else 4 * scores * size)
    assert d.bytes([q, k, v, mask], [out], attrs) == io + size * 2 * 256 + (0 if fused else 6 * scores * size)


def test_bad_attention_inputs_are_named():
    b = GraphBuilder("bad")
    q, k = b.input("q", (2, 4, 8)), b.input("k", (2, 5, 8))
    with pytest.raises(ShapeError, match="key count"):
        b.attention(q, k, b.input("v", (2, 6, 3)))
    with pytest.raises(ShapeError, match="head dim"):
        b.attention(q, b.input("k2", (2, 5, 7)), b.input("v2", (2, 5, 3)))
    with pytest.raises(ShapeError, match="mask"):
        b.attention(q, k, b.input("v3", (2, 5, 3)), b.input("m", (2, 4, 4)))
    with pytest.raises(AttributeValueError, match="causal"):
        b.attention(q, k, b.input("v4", (2, 5, 3)), causal=2)


def test_attention_takes_bfloat16_as_a_float(rng):
    """bfloat16 is a float (ml_dtypes; NumPy files it under kind 'V'): the op infers on it and the
    reference computes in fp32 from the half operands and rounds once, as the half programs do."""
    bf16 = np.dtype("bfloat16")
    q, k, v = (rng.standard_normal(s).astype(np.float32).astype(bf16) for s in ((2, 5, 8), (2, 7, 8), (2, 7, 4)))
    b = GraphBuilder("bf16_attention")
    out = b.attention(*(b.input(n, a.shape, dtype=a.dtype) for n, a in zip("qkv", (q, k, v))))
    g = b.build(out)
    assert g.types[g.outputs[0]] == TensorType((2, 5, 4), bf16)
    (got,) = einsat.run(g, dict(zip("qkv", (q, k, v)))).values()
    want = reference(*(a.astype(np.float64) for a in (q, k, v)), None, 1 / math.sqrt(8), False)
    assert got.dtype == bf16
    # one rounding to bfloat16 (8 significand bits) of a value computed exactly from the same operands
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2**-8, atol=2**-8 * np.abs(want).max())
