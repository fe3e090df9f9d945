"""Export the peers benchmark's models (issue #37): eight transformers families, 4 layers, batch 1,
static shapes, by both of PyTorch's ONNX exporters, with their (random, seeded) weights.

`benchmarks/peers_bench.py` times these files through onnxruntime's transformers optimizer,
onnxslim and einsat. Each model is built from a config written here (random initialization,
nothing downloaded) and exported at batch 1 with every dim static:

- text: BERT, GPT-2 (hidden 768, 12 heads), Llama, Qwen2, Mistral (hidden 768, 12 query heads
  sharing 4 key/value heads: grouped-query attention; the base models, no LM head), T5's encoder
  (`T5EncoderModel`, d_model 512) at sequence 128, with an all-ones attention mask as an input
  (token types too for BERT);
- ViT-B/16 (hidden 768) on a 224x224 image (197 tokens);
- Whisper's encoder (d_model 512, 8 heads) on 80 mel bins x 256 frames (128 positions).

Exporters: `legacy` (the TorchScript exporter, `dynamo=False`, as the research table ran it) and
`dynamo` (`dynamo=True`, its default optimization on); a model the dynamo exporter fails on is
reported and the others go on. Files go to `.peers-cache/<model>_<exporter>.onnx` (ignored by
git: 50-200 MB each, weights included) with `manifest.json` (versions, what failed, each file's
inputs). Constant parameters (norm weights at 1, biases at 0) get a seeded perturbation
(`export_hf_llms.randomize`): a trained model has none, and the legacy exporter merges equal
initializers.

torch exists here only for Python 3.11: run this in `.export-venv` (tests/data/models/README.md),

    .export-venv/bin/python scripts/export_peers.py               # all, both exporters
    .export-venv/bin/python scripts/export_peers.py --only bert --exporters legacy
    .export-venv/bin/python scripts/export_peers.py --only bert gpt2 --dynamic   # dynamic axes (#40)
"""

from __future__ import annotations

import argparse
import io
import json
import traceback
import warnings
from pathlib import Path

import onnx
import torch
import transformers
from export_hf_llms import randomize
from export_torch_models import OPSET, ROOT

LAYERS, SEQ, IMAGE = 4, 128, 224
T = transformers
LLM = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=LAYERS, num_attention_heads=12,
           num_key_value_heads=4, vocab_size=32000, max_position_embeddings=512)


def _ids(vocab: int, extra: int = 1) -> tuple:
    return (torch.randint(0, vocab, (1, SEQ)), *(torch.ones(1, SEQ, dtype=torch.int64) for _ in range(extra)))


def _whisper():
    config = T.WhisperConfig(encoder_layers=LAYERS, decoder_layers=1, d_model=512, encoder_attention_heads=8,
                             decoder_attention_heads=8, encoder_ffn_dim=2048, num_mel_bins=80,
                             max_source_positions=SEQ)
    return T.WhisperModel(config).get_encoder()


# name -> (what it is, the model, example inputs, input names, output names)
MODELS = {
    "bert": ("BertModel, 4 layers, hidden 768, 12 heads",
             lambda: T.BertModel(T.BertConfig(num_hidden_layers=LAYERS)),
             lambda: _ids(30522, 2), ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state"]),
    "gpt2": ("GPT2Model, 4 layers, hidden 768, 12 heads, causal",
             lambda: T.GPT2Model(T.GPT2Config(n_layer=LAYERS, use_cache=False)),
             lambda: _ids(50257), ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "llama": ("LlamaModel, 4 layers, hidden 768, GQA 12/4, RMSNorm, rotary, SwiGLU",
              lambda: T.LlamaModel(T.LlamaConfig(**LLM, use_cache=False)),
              lambda: _ids(32000), ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "qwen2": ("Qwen2Model, 4 layers, hidden 768, GQA 12/4, q/k/v biases",
              lambda: T.Qwen2Model(T.Qwen2Config(**LLM, use_cache=False)),
              lambda: _ids(32000), ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "mistral": ("MistralModel, 4 layers, hidden 768, GQA 12/4, sliding window 4096",
                lambda: T.MistralModel(T.MistralConfig(**LLM, use_cache=False)),
                lambda: _ids(32000), ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "vit": ("ViTModel, 4 layers, hidden 768, 224x224 (197 tokens)",
            lambda: T.ViTModel(T.ViTConfig(num_hidden_layers=LAYERS), add_pooling_layer=False),
            lambda: (torch.randn(1, 3, IMAGE, IMAGE),), ["pixel_values"], ["last_hidden_state"]),
    "t5_encoder": ("T5EncoderModel, 4 layers, d_model 512, 8 heads, relative position bias",
                   lambda: T.T5EncoderModel(T.T5Config(num_layers=LAYERS, use_cache=False)),
                   lambda: _ids(32128), ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "whisper_encoder": ("WhisperEncoder, 4 layers, d_model 512, 8 heads, 80 mel bins x 256 frames",
                        _whisper, lambda: (torch.randn(1, 80, 2 * SEQ),), ["input_features"], ["last_hidden_state"]),
    # the speed benchmark's other model kinds (issue #39): convolutional, windowed attention, audio
    "wav2vec2": ("Wav2Vec2Model, 4 layers, hidden 768, 12 heads, 1 s of 16 kHz audio",
                 lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(num_hidden_layers=LAYERS)),
                 lambda: (torch.randn(1, 16000),), ["input_values"], ["last_hidden_state"]),
    "convnext": ("ConvNextModel, ConvNeXt-T (depths 3-3-9-3, widths 96-768), 224x224",
                 lambda: T.ConvNextModel(T.ConvNextConfig()),
                 lambda: (torch.randn(1, 3, IMAGE, IMAGE),), ["pixel_values"], ["last_hidden_state"]),
    "swin": ("SwinModel, Swin-T (depths 2-2-6-2, window 7), 224x224",
             lambda: T.SwinModel(T.SwinConfig()),
             lambda: (torch.randn(1, 3, IMAGE, IMAGE),), ["pixel_values"], ["last_hidden_state"]),
    "efficientnet": ("EfficientNetModel, B0 (width 1.0, depth 1.0), 224x224",
                     lambda: T.EfficientNetModel(T.EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0,
                                                                      hidden_dim=1280, image_size=IMAGE)),
                     lambda: (torch.randn(1, 3, IMAGE, IMAGE),), ["pixel_values"], ["last_hidden_state"]),
}
EXPORTERS = ("legacy", "dynamo")


class _Outputs(torch.nn.Module):
    """The model called with its inputs by name, its `ModelOutput` unpacked into a tuple."""

    def __init__(self, model, inputs, outputs):
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, *args):
        out = self.model(**dict(zip(self.inputs, args)), return_dict=True)
        return tuple(out[n] for n in self.outputs)


def axes(name: str, inputs: list[str], outputs: list[str]) -> dict[str, dict[int, str]]:
    """The dynamic axes of `--dynamic` (issue #40): batch for every model, and the token axis
    (`sequence`) of the text models' inputs and outputs; images and audio keep their sizes."""
    text = name in ("bert", "gpt2", "llama", "qwen2", "mistral", "t5_encoder")
    return {n: {0: "batch"} | ({1: "sequence"} if text else {}) for n in [*inputs, *outputs]}


def export(model, args, inputs, outputs, exporter: str,
           dynamic: dict[str, dict[int, str]] | None = None) -> onnx.ModelProto:
    buf = io.BytesIO()
    kw = {}
    if dynamic and exporter == "dynamo":  # torch.export's Dims, one per name, for each input's axes
        dims = {a: torch.export.Dim(a, min=1, max=512) for ax in dynamic.values() for a in ax.values()}
        kw["dynamic_shapes"] = (tuple({i: dims[a] for i, a in dynamic[n].items()} for n in inputs),)  # forward(*args)
    elif dynamic:
        kw["dynamic_axes"] = dynamic
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_Outputs(model, inputs, outputs).eval(), args, buf, input_names=inputs, output_names=outputs,
                          opset_version=OPSET, dynamo=exporter == "dynamo",
                          **({"external_data": False} if exporter == "dynamo" else {}), **kw)
    return onnx.load_from_string(buf.getvalue())


def check(exported: onnx.ModelProto, model, args, inputs, outputs) -> float:
    """The largest |onnxruntime - PyTorch| of the export on its example inputs (onnxruntime when
    this environment has it, else onnx.reference)."""
    with torch.no_grad():  # eval again: the legacy exporter restores the wrapper's mode, training, after it
        want = [t.numpy() for t in _Outputs(model, inputs, outputs).eval()(*args)]
    feeds = {n: a.numpy() for n, a in zip(inputs, args)}
    try:
        import onnxruntime
        got = onnxruntime.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"]) \
            .run(outputs, feeds)
    except ImportError:
        from onnx.reference import ReferenceEvaluator
        got = ReferenceEvaluator(exported).run(outputs, feeds)
    return max(float(abs(g - w).max()) for g, w in zip(got, want))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=ROOT / ".peers-cache", type=Path)
    parser.add_argument("--only", nargs="*", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--exporters", nargs="*", choices=EXPORTERS, default=list(EXPORTERS))
    parser.add_argument("--dynamic", action="store_true",
                        help="export with dynamic axes (batch; sequence for text models) to "
                             "<model>_<exporter>_dynamic.onnx (issue #40's benchmark); the example inputs are batch 2")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}, "failed": {}}
    manifest["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "onnx": onnx.__version__, "opset": OPSET}
    for name in args.only:
        what, build, example, inputs, outputs = MODELS[name]
        for exporter in args.exporters:
            torch.manual_seed(0)
            model = randomize(build()).eval()
            ex = example()
            if args.dynamic:  # batch 2: torch.export specializes a dim whose example size is 1
                ex = tuple(torch.cat([a, a]) for a in ex)
            path = args.out / f"{name}_{exporter}{'_dynamic' if args.dynamic else ''}.onnx"
            try:
                exported = export(model, ex, inputs, outputs, exporter,
                                  axes(name, inputs, outputs) if args.dynamic else None)
                err = check(exported, model, ex, inputs, outputs)
                if err > 1e-3:
                    raise ValueError(f"the export differs from PyTorch by {err:.3g}")
            except Exception as e:  # noqa: BLE001 - reported, and the others go on
                traceback.print_exc()
                manifest["failed"][path.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                manifest["files"].pop(path.name, None)
                continue
            onnx.save(exported, path)
            manifest["failed"].pop(path.name, None)
            manifest["files"][path.name] = {
                "model": name, "exporter": exporter, "what": what, "nodes": len(exported.graph.node),
                "inputs": {n: list(a.shape) for n, a in zip(inputs, ex)}, "max_abs_vs_torch": err}
            print(f"{path.name}: {what}; {path.stat().st_size / 2**20:.0f} MB, opset {OPSET}, "
                  f"{len(exported.graph.node)} nodes, |ONNX - PyTorch| {err:.2g}", flush=True)
            manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}")
    for f, why in manifest["failed"].items():
        print("FAILED", f, why)


if __name__ == "__main__":
    main()
