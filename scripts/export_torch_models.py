"""Export ResNet-18 and a small BERT encoder from PyTorch to ONNX, without their weights.

The test suite compares einsat with onnxruntime on models that no one here wrote by hand in
ONNX: these two come out of PyTorch's own exporter. Their weights are stripped (each floating
weight becomes a graph input, listed in the metadata entry `einsat.stripped_weights`), so the
files stay small; the tests fill them with seeded random values
(`einsat.ir.onnx.weights.fill_random_weights`). Integer initializers (position ids) are kept.

torch exists here only for Python 3.11, einsat needs 3.12: run this in the side environment
`make torch-venv` creates, with the exporter's own dependencies added,

    make torch-venv && .torch-venv/bin/pip install -c benchmarks/torch-constraints.txt onnx onnxscript
    .torch-venv/bin/python scripts/export_torch_models.py            # writes tests/data/models/

ResNet-18 is also the model `einsat demo` runs: a copy goes to einsat/data/resnet18.onnx.

The models are defined here by hand (no torchvision): torchvision's ResNet-18 layout, and a
BERT encoder with BERT's embeddings, LayerNorm, erf-GELU, softmax attention and padding mask.
"""

from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path

import onnx
import torch
from onnx import helper
from torch import nn

STRIPPED_KEY = "einsat.stripped_weights"  # as in einsat/ir/onnx/weights.py
OPSET = 18


# -- ResNet-18 (torchvision's layout) ------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + identity)


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths, layers, cin = (64, 128, 256, 512), [], 64
        for k, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if k == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- a small BERT encoder ------------------------------------------------------------------

class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, ffn)
        self.gelu = nn.GELU()
        self.output = nn.Linear(ffn, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask_bias):
        q, k, v = (self.split_heads(f(x)) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + mask_bias
        context = torch.softmax(scores, dim=-1) @ v
        b, _, s, _ = context.shape
        context = context.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        x = self.attn_norm(x + self.attn_out(context))
        return self.out_norm(x + self.output(self.gelu(self.intermediate(x))))


class BertEncoder(nn.Module):
    def __init__(self, vocab=30522, hidden=256, heads=4, ffn=1024, layers=2, max_pos=512, types=2):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(types, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0), persistent=False)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask, token_type_ids):
        seq = input_ids.shape[1]
        x = self.word(input_ids) + self.position(self.position_ids[:, :seq]) + self.token_type(token_type_ids)
        x = self.norm(x)
        mask = attention_mask[:, None, None, :].to(x.dtype)
        mask_bias = (1.0 - mask) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


# -- export and strip ------------------------------------------------------------------------

def export(model: nn.Module, args: tuple, input_names, output_names, dynamic_shapes=None) -> onnx.ModelProto:
    """The model exported at `OPSET`; `dynamic_shapes` (torch.export's, one entry per argument)
    keeps those dims symbolic."""
    model.eval()
    buf = io.BytesIO()
    with torch.no_grad():
        try:
            torch.onnx.export(model, args, buf, input_names=input_names, output_names=output_names,
                              opset_version=OPSET, dynamo=True, external_data=False, optimize=False,
                              dynamic_shapes=dynamic_shapes)
        except Exception as e:  # the TorchScript exporter, when the dynamo one is unavailable
            if dynamic_shapes is not None:
                raise  # the TorchScript exporter would fix the dynamic dims silently
            print(f"dynamo export failed ({type(e).__name__}: {e}); using the TorchScript exporter")
            buf = io.BytesIO()
            torch.onnx.export(model, args, buf, input_names=input_names, output_names=output_names,
                              opset_version=OPSET, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def strip_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each floating-point initializer of more than one element becomes a typed graph input,
    named in the metadata; integer ones and scalars (epsilons, mask constants) stay. The
    exporter's per-node metadata (source stack traces) goes too."""
    g = model.graph
    stripped, kept = [], []
    for init in g.initializer:
        is_float = init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                      onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
        size = math.prod(init.dims)
        (stripped if is_float and size > 1 else kept).append(init)
    listed = {i.name for i in g.input}
    g.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                   for i in stripped if i.name not in listed)
    inits = [onnx.TensorProto() for _ in kept]
    for new, old in zip(inits, kept):  # copies: deleting the field below releases the originals
        new.CopyFrom(old)
    del g.initializer[:]
    g.initializer.extend(inits)
    for node in g.node:  # the exporter's per-node stack traces: most of the file, no meaning here
        node.ClearField("metadata_props")
        node.ClearField("doc_string")
    for vi in (*g.value_info, *g.input, *g.output):
        vi.ClearField("metadata_props")
    entry = model.metadata_props.add()
    entry.key, entry.value = STRIPPED_KEY, json.dumps([i.name for i in stripped])
    onnx.checker.check_model(model, full_check=True)
    return model


ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=ROOT / "tests" / "data" / "models", type=Path)
    parser.add_argument("--demo", default=ROOT / "einsat" / "data" / "resnet18.onnx", type=Path,
                        help="where the demo's copy of ResNet-18 goes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    resnet = export(ResNet18(), (torch.randn(1, 3, 224, 224),), ["input"], ["logits"])
    seq = 128
    ids = torch.randint(0, 30522, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    types = torch.zeros(1, seq, dtype=torch.int64)
    bert = export(BertEncoder(), (ids, mask, types), ["input_ids", "attention_mask", "token_type_ids"],
                  ["last_hidden_state", "pooled"])
    for name, model in (("resnet18", resnet), ("bert_encoder", bert)):
        model = strip_weights(model)
        path = args.out / f"{name}.onnx"
        onnx.save(model, path)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{path}: {path.stat().st_size / 1024:.0f} KB, opset {OPSET}, {len(model.graph.node)} nodes: {ops}")
        if name == "resnet18":
            args.demo.parent.mkdir(parents=True, exist_ok=True)
            onnx.save(model, args.demo)


if __name__ == "__main__":
    main()
