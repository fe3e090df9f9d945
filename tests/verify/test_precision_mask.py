"""Verification inputs for an attention mask (#30: `einsat optimize bert_encoder.onnx --precision
bf16` was refused): an integer input read as 1 − mask, through casts and reshapes, is drawn in
{0, 1}. Drawn in [0, 5) like other integers, (1 − 4) · min_float overflowed to +inf, the scores'
softmax to NaN, and every output was NaN in fp32 already: nothing varied, nothing was proved."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import einsat
from einsat.ir.builder import GraphBuilder
from einsat.runtime import random_inputs
from einsat.runtime.inputs import INT_HIGH, mask_inputs

MODELS = Path(__file__).parent.parent / "data" / "models"


def masked_scores():
    b = GraphBuilder("masked")
    scores = b.input("scores", (1, 1, 8, 8))
    mask = b.input("attention_mask", (1, 8), np.int64)
    ids = b.input("input_ids", (1, 8), np.int64)
    m = b.cast(b.unsqueeze(b.unsqueeze(mask, axes=[1]), axes=[2]), dtype="float32")
    additive = b.mul(b.sub(b.const(1.0), m), b.const(float(np.finfo(np.float32).min)))
    probs = b.softmax(b.add(scores, additive), axis=-1)
    return b.build(probs, b.cast(ids, dtype="float32"), names=["probs", "ids"])


def test_an_input_read_as_one_minus_mask_is_drawn_in_0_1():
    g = masked_scores()
    assert mask_inputs(g) == {"attention_mask"}
    feeds = random_inputs(g, seed=0)
    assert set(np.unique(feeds["attention_mask"])) == {0, 1}
    assert feeds["input_ids"].max() < INT_HIGH and feeds["input_ids"].max() > 1  # other integers as before
    assert not np.isnan(einsat.run(g, feeds)["probs"]).any()


def test_bert_encoder_outputs_are_finite_on_the_verification_inputs():
    g = einsat.load_onnx(MODELS / "bert_encoder.onnx", fill_weights="random")
    assert mask_inputs(g) == {"attention_mask"}
    outs = einsat.run(g, random_inputs(g, seed=0))
    assert all(np.isfinite(v).all() for v in outs.values())
