"""Six models as people export them from Hugging Face transformers import, run and match onnxruntime.

BERT-base, DistilBERT, GPT-2, ViT-B/16, ResNet-50 and MobileNet-v2, built from their default
configs and exported once by PyTorch's exporter with batch and sequence dynamic
(`scripts/export_hf_models.py`, `tests/data/models/README.md`). They come without weights: the
tests fill them with seeded random values (`fill_random_weights`) and fix the dynamic dims with
`input_shapes`. Each model: `load_onnx` -> `run` equals onnxruntime's outputs on random inputs
(token ids in the vocabulary, a padded attention mask), within `test_models`'s fp32 tolerance,
and the `save_onnx` round trip passes the full ONNX checker and still equals onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import einsat
from einsat.ir import Op
from einsat.ir.onnx.weights import fill_random_weights
from tests.ir.test_models import MODELS, assert_fp32_close, image, ort_run

SEQ = 32  # the exports' example length is 128: another one checks the dims are really dynamic
TEXT = {"bert_base": ("input_ids", "attention_mask", "token_type_ids"),
        "distilbert": ("input_ids", "attention_mask"), "gpt2": ("input_ids", "attention_mask")}
VOCAB = {"bert_base": 30522, "distilbert": 30522, "gpt2": 50257}
IMAGES = ("vit_b16", "resnet50", "mobilenet_v2")
NAMES = [*TEXT, *IMAGES]
SLOW = {"bert_base", "gpt2", "vit_b16",  # 86M-124M parameters: seconds to fill, run and save
        "distilbert"}  # 66M: 17 s, the fast suite's longest test (make test within 6 minutes)

pytestmark = pytest.mark.filterwarnings("error::einsat.ir.onnx.importer.OpaqueFallbackWarning")


def feeds(name: str) -> dict[str, np.ndarray]:
    if name in IMAGES:
        return {"pixel_values": image()}
    rng = np.random.default_rng(3)
    values = {"input_ids": rng.integers(0, VOCAB[name], (1, SEQ)),
              "attention_mask": np.ones((1, SEQ), np.int64), "token_type_ids": np.zeros((1, SEQ), np.int64)}
    values["attention_mask"][0, SEQ - 20:] = 0  # padding at the end
    values["token_type_ids"][0, SEQ // 2:] = 1
    return {k: values[k] for k in TEXT[name]}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_model_matches_onnxruntime_and_round_trips(name, tmp_path):
    model = fill_random_weights(onnx.load(MODELS / f"hf_{name}.onnx"), seed=0)
    inputs = feeds(name)
    g = einsat.load_onnx(model, input_shapes={k: v.shape for k, v in inputs.items()})
    opaque = {n.attrs["op_type"] for n in g.nodes if n.op is Op.OPAQUE}
    assert not opaque, f"{name}: einsat keeps {sorted(opaque)} opaque"
    ours = einsat.run(g, inputs)
    expected = dict(zip(g.outputs, ort_run(model, inputs, list(g.outputs))))
    for out in g.outputs:
        assert_fp32_close(ours[out], expected[out], f"{name}: {out}")

    path = tmp_path / f"{name}.onnx"
    einsat.save_onnx(g, path)
    onnx.checker.check_model(str(path), full_check=True)
    for out, got in zip(g.outputs, ort_run(onnx.load(path), inputs, list(g.outputs))):
        assert_fp32_close(got, expected[out], f"{name} saved: {out}")
