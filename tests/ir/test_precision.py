"""The precision conversion (`einsat.ir.precision`): what it casts, what it keeps in fp32, and the
NumPy reference's half semantics (fp32 arithmetic on half storage, ml_dtypes rounding)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import einsat
from einsat.errors import EinsatError
from einsat.ir.builder import GraphBuilder
from einsat.ir.precision import HALF_DTYPES, convert, to_half, unit_roundoff
from einsat.ir.registry import Op
from einsat.runtime import random_inputs

BF16 = np.dtype(ml_dtypes.bfloat16)


def block(seq: int = 16, d: int = 32) -> einsat.Graph:
    """A BERT-like block: projections, scaled scores, softmax, residual, layernorm, gelu."""
    b = GraphBuilder("block")
    x = b.input("x", (1, seq, d))
    q, k, v = (b.matmul(x, b.weight(n, (d, d), scale=d ** -0.5)) for n in ("wq", "wk", "wv"))
    s = b.mul(b.matmul(q, b.transpose(k, perm=[0, 2, 1])), b.const(d ** -0.5))
    h = b.add(x, b.matmul(b.softmax(s, axis=-1), v))
    n = b.layernorm(h, b.weight("g", (d,)), b.weight("beta", (d,)), axis=-1)
    return b.build(b.gelu(b.matmul(n, b.weight("w1", (d, d), scale=d ** -0.5))), names=["y"])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_convert_casts_weights_once_and_keeps_statistics_in_fp32(precision):
    g = block()
    h = convert(g, precision)
    half = HALF_DTYPES[precision]
    assert h.input_types() == g.input_types() and h.output_types() == g.output_types()
    # weights stored in half, rounded by ml_dtypes / NumPy
    assert h.weights["wq"].dtype == half
    assert np.array_equal(h.weights["wq"], g.weights["wq"].astype(half))
    # the products run on half operands; softmax and layernorm on fp32 ones, their results in half
    for node in h.nodes:
        ins = [h.types[i].dtype for i in node.inputs if i and h.types[i].dtype.kind in "fV"]
        if node.op in (Op.MATMUL, Op.GELU, Op.ADD):
            assert all(t == half for t in ins), node
        if node.op in (Op.SOFTMAX, Op.LAYERNORM):
            assert all(t == np.float32 for t in ins), node
    # the values keep their names, now in half
    assert h.types["y"].dtype == np.float32 and any(n.op is Op.CAST and n.outputs == ("y",) for n in h.nodes)
    softmax_out = next(n for n in g.nodes if n.op is Op.SOFTMAX).outputs[0]
    assert h.types[softmax_out].dtype == half


def test_half_io_makes_the_interface_half():
    h = convert(block(), "fp16", half_io=True)
    assert h.types["x"].dtype == np.float16 and h.types["y"].dtype == np.float16


def test_fp32_tf32_and_half_programs_are_left_as_they_are():
    g = block()
    assert convert(g, "fp32") is g and convert(g, "tf32") is g
    h = convert(g, "bf16", half_io=True)
    assert convert(h, "bf16", half_io=True) is h  # no fp32 value left
    with pytest.raises(EinsatError, match="unknown precision 'fp8'"):
        convert(g, "fp8")


def test_weights_beyond_the_half_range_are_clamped():
    w = np.array([-3.4028235e38, 1e6, 1.0, np.inf, np.nan], np.float32)
    f16 = to_half(w, np.float16)
    assert f16[0] == -65504 and f16[1] == 65504 and f16[2] == 1 and np.isinf(f16[3]) and np.isnan(f16[4])
    bf = to_half(w, BF16)
    assert np.isfinite(bf[0]) and bf[0] == -float(ml_dtypes.finfo(BF16).max)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_the_reference_computes_half_products_in_fp32_and_rounds_once(dtype):
    """A product over 4096 terms: the half program's result is the fp32 product of the half
    operands, rounded once (fp32 accumulation), not a sum rounded at every step."""
    b = GraphBuilder("dot")
    a, w = b.input("a", (1, 4096), dtype), b.input("w", (4096, 1), dtype)
    g = b.build(b.matmul(a, w), names=["y"])
    rng = np.random.default_rng(0)
    av = np.abs(rng.standard_normal((1, 4096))).astype(dtype)
    wv = np.abs(rng.standard_normal((4096, 1))).astype(dtype)
    expected = (av.astype(np.float64) @ wv.astype(np.float64)).astype(np.float32).astype(dtype)
    got = einsat.run(g, {"a": av, "w": wv})["y"]
    assert got.dtype == dtype and np.array_equal(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_every_float_op_of_a_block_runs_in_half_on_the_reference(dtype):
    """Ops NumPy does not know in bfloat16 (np.finfo, np.issubdtype) run: fp32 arithmetic on the
    half values, each result rounded to half, within u of the fp32 op on the same half inputs."""
    g = block()
    h = convert(g, "bf16" if dtype == BF16 else "fp16", half_io=True)
    x = random_inputs(g, 0)["x"].astype(dtype)
    out = einsat.run(h, {"x": x})["y"]
    assert out.dtype == dtype
    wide = einsat.run(g.replace(weights={k: v.astype(dtype).astype(np.float32) for k, v in h.weights.items()}),
                      {"x": x.astype(np.float32)})["y"]
    u = unit_roundoff(dtype)
    assert np.max(np.abs(out.astype(np.float64) - wide) / (np.abs(wide) + np.abs(wide).max())) < 16 * u


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_clip_and_relu6_take_half(dtype):
    """Clip (MobileNet's relu6) is a float op in bf16 too (NumPy files bfloat16 under kind 'V')."""
    b = GraphBuilder("relu6")
    g = b.build(b.clip(b.input("x", (2, 8), dtype), low=0.0, high=6.0), names=["y"])
    x = (np.arange(16, dtype=np.float32).reshape(2, 8) - 4).astype(dtype)
    y = einsat.run(g, {"x": x})["y"]
    assert y.dtype == dtype and np.array_equal(y.astype(np.float32), np.clip(x.astype(np.float32), 0, 6))


def test_lrn_takes_bf16():
    """LRN's type check asked for NumPy kind 'f', which ml_dtypes' bfloat16 is not: a bf16 LRN
    was refused at graph construction; it infers and runs as the fp32 op rounded once."""
    b = GraphBuilder("lrn")
    g = b.build(b.lrn(b.input("x", (1, 4, 3), BF16), size=3), names=["y"])
    x = np.random.default_rng(0).standard_normal((1, 4, 3)).astype(BF16)
    b32 = GraphBuilder("lrn32")
    g32 = b32.build(b32.lrn(b32.input("x", (1, 4, 3)), size=3), names=["y"])
    want = einsat.run(g32, {"x": x.astype(np.float32)})["y"].astype(BF16)
    got = einsat.run(g, {"x": x})["y"]
    assert g.types["y"].dtype == BF16 and np.array_equal(got.astype(np.float32), want.astype(np.float32))
