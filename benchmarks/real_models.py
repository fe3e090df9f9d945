"""The real models of issue #15, filled with seeded random weights, at full or small shapes.

    model, graph, feeds = real_model("hf_distilbert", small=True)

`model` is the ONNX model with its weights filled (`fill_random_weights`: by role, as
frameworks initialise them), `graph` its einsat import with the dynamic dims fixed, `feeds`
inputs for both: images of standard normal pixels; token ids in the vocabulary with an
attention mask padded at the end. Names: the nine onnx-zoo "light" models (`zoo_<name>`,
shipped with the onnx package, 224x224) and the six transformers exports (`hf_<name>`,
`tests/data/models`). `small=True` shrinks what may shrink: sequences to 8 tokens, the
convolutional hf models' images to 64x64 (the zoo models and ViT have fixed 224x224 inputs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

ZOO_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
HF_DIR = Path(__file__).parent.parent / "tests" / "data" / "models"
ZOO = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]
TEXT = {"bert_base": (30522, ("input_ids", "attention_mask", "token_type_ids")),
        "distilbert": (30522, ("input_ids", "attention_mask")), "gpt2": (50257, ("input_ids", "attention_mask"))}
IMAGES = {"vit_b16": 224, "resnet50": 64, "mobilenet_v2": 64}  # the small image side
NAMES = [f"zoo_{n}" for n in ZOO] + [f"hf_{n}" for n in (*TEXT, *IMAGES)]
FAMILY = {**{f"zoo_{n}": "cnn (onnx zoo)" for n in ZOO}, **{f"hf_{n}": "text transformer" for n in TEXT},
          "hf_vit_b16": "vision transformer", "hf_resnet50": "cnn (transformers)",
          "hf_mobilenet_v2": "cnn (transformers)"}


def path(name: str) -> Path:
    if name.startswith("zoo_"):
        return ZOO_DIR / f"light_{name[4:]}.onnx"
    if name.startswith("hf_"):
        return HF_DIR / f"{name}.onnx"
    raise ValueError(f"unknown model {name!r}; one of {NAMES}")


def feeds(name: str, model: onnx.ModelProto, small: bool = False) -> dict[str, np.ndarray]:
    """Inputs for `name` (seeded): token ids, mask and types for text, one image otherwise."""
    rng = np.random.default_rng(1)
    key = name[3:]
    if key in TEXT:
        vocab, inputs = TEXT[key]
        seq = 8 if small else 128
        mask = np.ones((1, seq), np.int64)
        mask[0, seq - seq // 4:] = 0  # padding at the end
        types = np.zeros((1, seq), np.int64)
        types[0, seq // 2:] = 1
        values = {"input_ids": rng.integers(0, vocab, (1, seq)), "attention_mask": mask, "token_type_ids": types}
        return {k: values[k] for k in inputs}
    side = IMAGES[key] if small and key in IMAGES else 224
    weights = {t.name for t in model.graph.initializer}
    data = next(i.name for i in model.graph.input if i.name not in weights)
    return {data: rng.standard_normal((1, 3, side, side)).astype(np.float32)}


def real_model(name: str, small: bool = False, seed: int = 0):
    """(filled ONNX model, einsat graph, feeds) of `name` (see the module docstring)."""
    import einsat
    from einsat.ir.onnx.weights import fill_random_weights

    model = fill_random_weights(onnx.load(path(name)), seed=seed)
    inputs = feeds(name, model, small)
    shapes = {k: v.shape for k, v in inputs.items()} if name.startswith("hf_") else None
    return model, einsat.load_onnx(model, input_shapes=shapes), inputs
