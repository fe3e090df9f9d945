"""The budget kept on a partitioned model (issue #39 item 4): `budget=10` ends the whole run,
pieces, rebind, stitch and the verification included, within 10 s + 10% + 1 s.

The one wall-clock assertion of the suite, and an upper bound the design guarantees (the planner
gives each phase a share of what is left and holds the verification's seconds back), not a
speed: a run that ended sooner passes whatever the machine.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import einsat
from einsat import Load

MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "hf_bert_base.onnx"
BUDGET = 10.0


@pytest.mark.slow
def test_a_partitioned_model_keeps_a_ten_second_budget():
    t = time.perf_counter()
    result = einsat.optimize(str(MODEL), budget=BUDGET,
                             load=Load(input_shapes={"input_ids": (1, 32), "attention_mask": (1, 32),
                                                     "token_type_ids": (1, 32)}, fill_weights="random"))
    wall = time.perf_counter() - t
    assert result.report.partition is not None, "hf_bert_base is partitioned at default settings"
    assert result.report.verified
    assert wall <= BUDGET * 1.1 + 1.0, f"{wall:.1f} s for a {BUDGET:g} s budget: {result.report.times}"
