"""Every bundled model in tests/data/models optimizes as README says (#41): `einsat optimize model.onnx -o
out.onnx --fill-weights random --input-shape ...` (the dims the exporter left symbolic fixed, as
tests/data/models/README.md names them), with small limits (one rewrite step), exits 0 with its
result proved and written, and the written file runs on onnxruntime with the input's outputs.

hf_vit_b16 was refused as inconclusive: its first partition piece passes its layers 8 attention
biases expanded from a 0-valued scalar weight, which never vary (`OutputReport.of_weights`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import einsat
from einsat.cli import main
from einsat.runtime import random_inputs
from tests.ir.test_models import assert_fp32_close, ort_run

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
PIXELS = {"pixel_values": (1, 3, 224, 224)}
TEXT = {"input_ids": (1, 32), "attention_mask": (1, 32)}
PROMPT = {"input_ids": (1, 12), "attention_mask": (1, 12)}
STEP = {"input_ids": (1, 1), "attention_mask": (1, 10),
        **{f"past_key_values.{i}.{t}": (1, 2, 9, 16) for i in (0, 1) for t in ("key", "value")}}
SHAPES = {  # the symbolic dims of each file fixed (the static ones need none)
    "resnet18": {}, "bert_encoder": {}, "hf_llama4_prefill_legacy_static": {},
    "hf_bert_base": {**TEXT, "token_type_ids": (1, 32)}, "hf_distilbert": TEXT, "hf_gpt2": TEXT,
    "hf_vit_b16": PIXELS, "hf_resnet50": PIXELS, "hf_mobilenet_v2": PIXELS,
    **{f"hf_{m}_{phase}_{x}": PROMPT if phase == "prefill" else STEP
       for m in ("llama", "qwen2", "mistral") for phase in ("prefill", "decode") for x in ("dynamo", "legacy")},
}

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def test_every_bundled_model_is_listed():
    assert {p.stem for p in MODELS.glob("*.onnx")} == set(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_bundled_model_optimizes_as_the_readme_says(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, out, report = MODELS / f"{name}.onnx", tmp_path / f"{name}.opt.onnx", tmp_path / "report.json"
    shapes = [a for k, v in SHAPES[name].items() for a in ("--input-shape", f"{k}={','.join(map(str, v))}")]
    assert main(["optimize", str(path), "-o", str(out), "--fill-weights", "random", *shapes, "--iterations", "1",
                 "--report", str(report), "-q"]) == 0
    data = json.loads(report.read_text())
    assert data["proved"], data["verification"]
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    graph = einsat.load_onnx(path, fill_weights="random", seed=0, input_shapes=SHAPES[name] or None)
    feeds = random_inputs(graph, seed=1)
    expected = einsat.run(graph, feeds)
    for o, got in zip(graph.outputs, ort_run(written, feeds, list(graph.outputs))):
        if np.issubdtype(expected[o].dtype, np.floating):
            assert_fp32_close(got, expected[o], f"{name}, optimized, on onnxruntime: {o}")
        else:
            np.testing.assert_array_equal(got, expected[o])
