"""Export six Hugging Face transformers models to ONNX, built from their configs, without weights.

The models people bring to einsat come out of `transformers`: BERT-base, DistilBERT, GPT-2 (with
its causal mask), ViT-B/16, ResNet-50 and MobileNet-v2. Each is built from its library's default
config with random initialization (no hub download: nothing here can fetch weights, and the
weights are stripped anyway), exported once by PyTorch's exporter at opset 18 (its own: asked for
17, its version conversion fails on ResNet's ReduceMean and MobileNet's Pad and leaves them at 18)
with batch and sequence length dynamic, and written weight-stripped to `tests/data/models/hf_<name>.onnx`
(`export_torch_models.strip_weights`). The tests fix the dynamic dims with `input_shapes` and fill
the weights with seeded random values; `tests/data/models/README.md` lists what each file is.

torch exists here only for Python 3.11, einsat needs 3.12: run this in a side environment made
from the local torch wheel, with the versions of `scripts/export-constraints.txt`,

    python3.11 -m venv .export-venv
    .export-venv/bin/pip install -c scripts/export-constraints.txt /opt/wheels/torch-2.13.0+cpu-*.whl \\
        transformers onnx onnxscript
    .export-venv/bin/python scripts/export_hf_models.py             # writes tests/data/models/

`--only bert_base gpt2` exports some of them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
import torch
import transformers
from export_torch_models import OPSET, ROOT, export, strip_weights
from torch.export import Dim

SEQ = 128        # the token inputs' example length (dynamic in the export)
IMAGE = 224      # the image models' resolution (static: the configs fix it)


def _text(model_cls, config_cls, names, vocab: int, **config):
    """A text model taking `names` (token ids first, then masks/types) of shape [batch, seq]."""
    def build():
        model = model_cls(config_cls(**config))
        ids = torch.randint(0, vocab, (1, SEQ))
        args = (ids, *(torch.ones(1, SEQ, dtype=torch.int64) for _ in names[1:]))
        batch, seq = Dim("batch", max=64), Dim("sequence", max=512)
        return model, args, names, {"args": tuple({0: batch, 1: seq} for _ in names)}
    return build


def _image(model_cls, config_cls, **config):
    """An image model taking `pixel_values` [batch, 3, 224, 224]."""
    def build():
        model = model_cls(config_cls(**config))
        return (model, (torch.randn(1, 3, IMAGE, IMAGE),), ["pixel_values"],
                {"args": ({0: Dim("batch", max=64)},)})
    return build


T = transformers
# name -> (what it is, a builder of (model, example args, input names, dynamic shapes), output names)
MODELS = {
    "bert_base": ("BertModel(BertConfig()): BERT-base, 12 layers, hidden 768",
                  _text(T.BertModel, T.BertConfig, ["input_ids", "attention_mask", "token_type_ids"], 30522),
                  ["last_hidden_state", "pooler_output"]),
    "distilbert": ("DistilBertModel(DistilBertConfig()): 6 layers, hidden 768",
                   _text(T.DistilBertModel, T.DistilBertConfig, ["input_ids", "attention_mask"], 30522),
                   ["last_hidden_state"]),
    "gpt2": ("GPT2Model(GPT2Config()): GPT-2 small, 12 layers, causal self-attention",
             _text(T.GPT2Model, T.GPT2Config, ["input_ids", "attention_mask"], 50257, use_cache=False),
             ["last_hidden_state"]),
    "vit_b16": ("ViTModel(ViTConfig()): ViT-B/16 at 224x224, 12 layers, hidden 768",
                _image(T.ViTModel, T.ViTConfig),
                ["last_hidden_state", "pooler_output"]),
    "resnet50": ("ResNetForImageClassification(ResNetConfig(num_labels=1000)): ResNet-50",
                 _image(T.ResNetForImageClassification, T.ResNetConfig, num_labels=1000),
                 ["logits"]),
    "mobilenet_v2": ("MobileNetV2ForImageClassification(MobileNetV2Config(num_labels=1000)): 1.0x, 224",
                     _image(T.MobileNetV2ForImageClassification, T.MobileNetV2Config, num_labels=1000),
                     ["logits"]),
}


class _Outputs(torch.nn.Module):
    """The model called with its inputs by name, its `ModelOutput` unpacked into a tuple."""

    def __init__(self, model, inputs, outputs):
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, *args):
        out = self.model(**dict(zip(self.inputs, args)), return_dict=True)
        return tuple(out[n] for n in self.outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=ROOT / "tests" / "data" / "models", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), default=sorted(MODELS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        torch.manual_seed(0)
        what, build, outputs = MODELS[name]
        model, example, inputs, dynamic = build()
        model.eval()
        exported = export(_Outputs(model, inputs, outputs), example, inputs, outputs, dynamic_shapes=dynamic)
        exported = strip_weights(exported)
        path = args.out / f"hf_{name}.onnx"
        onnx.save(exported, path)
        ops = sorted({n.op_type for n in exported.graph.node})
        print(f"{path.name}: {what}; {path.stat().st_size / 1024:.0f} KB, opset {OPSET}, "
              f"{len(exported.graph.node)} nodes: {ops}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}")


if __name__ == "__main__":
    main()
