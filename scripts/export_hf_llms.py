"""Export small Hugging Face decoder LLMs (Llama, Qwen2, Mistral) to ONNX, prefill and decode, without weights.

The LLMs people bring to einsat come out of `transformers` as causal language models with a KV
cache: a prefill graph (the prompt in, logits and the cache out) and a decode step (one token and
the cache in, logits and the grown cache out). Each of Llama, Qwen2 and Mistral is built here from
a small config written in code (2 layers, hidden 64, 4 query heads sharing 2 key/value heads:
grouped-query attention, vocabulary 512; random initialization, nothing downloaded), and exported
by both of PyTorch's exporters at opset 18:

- dynamo: `torch.onnx.export(..., dynamo=True, optimize=False)`, batch and lengths dynamic;
- legacy: the TorchScript exporter (`dynamo=False`) with `dynamic_axes`.

Each phase is a module taking flat tensors (the cache as `past_key_values.<layer>.key/value`,
[batch, kv_heads, past, head_dim]) and returning flat tensors (`logits`, `present.<layer>.key/value`),
so neither exporter sees transformers' cache classes at the boundary: inside, the past tensors
fill a `DynamicCache` as `generate` would, and the positions come from the mask's CumSum as
`generate` computes them. Each export is checked against PyTorch (`check`: onnx.reference at
another length, left-padded) and written weight-stripped (`export_torch_models.strip_weights`)
to `tests/data/models/hf_<model>_<phase>_<exporter>.onnx`. An export that fails or differs is
reported at the end (the README table should then say why) and the others go on.

torch exists here only for Python 3.11: run this in `.export-venv` (tests/data/models/README.md),

    .export-venv/bin/python scripts/export_hf_llms.py            # writes tests/data/models/

`--only llama --phases decode --exporters dynamo` exports some of them; `--layers 4` builds 4 layers
instead of 2 and names the files `hf_<model>4_<phase>_<exporter>.onnx` (the partition's layer reuse
needs more than two copies of a layer: the last differs, it feeds the final norm).
"""

from __future__ import annotations

import argparse
import io
import traceback
import warnings
from pathlib import Path

import onnx
import torch
import transformers
from export_torch_models import OPSET, ROOT, strip_weights
from torch.export import Dim
from transformers import DynamicCache

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2, 64, 4, 2, 128, 512
SEQ = 16       # the prefill's example prompt length
PAST = 16      # the decode step's example cache length (it adds one token)
SMALL = dict(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
             num_key_value_heads=KV_HEADS, vocab_size=VOCAB, max_position_embeddings=256)

T = transformers
# name -> (what it is, the model built from its small config)
MODELS = {
    "llama": ("LlamaForCausalLM: RMSNorm, rotary, SwiGLU, GQA 4/2",
              lambda: T.LlamaForCausalLM(T.LlamaConfig(**SMALL))),
    "qwen2": ("Qwen2ForCausalLM: Llama's layout with q/k/v biases, tied embeddings",
              lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**SMALL, tie_word_embeddings=True))),
    "mistral": ("MistralForCausalLM: Llama's layout with a sliding-window mask (window 4096)",
                lambda: T.MistralForCausalLM(T.MistralConfig(**SMALL))),
}
PHASES = ("prefill", "decode")
EXPORTERS = ("dynamo", "legacy")


def randomize(model):
    """The model with no constant parameter: transformers initializes RMSNorm weights to ones and
    biases to zeros, and the legacy exporter merges equal initializers into one (five norms
    reading one weight). Trained models differ there: each constant parameter gets a seeded
    perturbation (norm weights around 1, biases around 0)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool(p.min() == p.max()):
                p.add_(0.1 * torch.randn_like(p))
    return model


def names(phase: str) -> tuple[list[str], list[str]]:
    """The phase's input and output names."""
    kv = [f"{p}.{i}.{t}" for p in ("past_key_values",) for i in range(LAYERS) for t in ("key", "value")]
    present = [f"present.{i}.{t}" for i in range(LAYERS) for t in ("key", "value")]
    inputs = ["input_ids", "attention_mask", *(kv if phase == "decode" else [])]
    return inputs, ["logits", *present]


class Step(torch.nn.Module):
    """One call of a causal LM on flat tensors: token ids, attention mask, the past cache's
    key/value pairs (none for prefill) -> logits, the present cache's key/value pairs. The
    position ids are computed from the mask as `generate` computes them (a CumSum), so a
    left-padded prompt is positioned from its first real token."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *past):
        # the positions `generate` gives a left-padded batch: the count of real tokens so far
        positions = attention_mask.long().cumsum(-1) - 1
        positions = positions.masked_fill(attention_mask == 0, 0)[:, -input_ids.shape[1]:]
        cache = None
        if past:
            cache = DynamicCache(config=self.model.config)
            for layer in range(len(past) // 2):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, return_dict=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def example(phase: str) -> tuple:
    """The phase's example inputs: batch 1, a prompt of SEQ tokens or one token after PAST."""
    if phase == "prefill":
        return torch.randint(0, VOCAB, (1, SEQ)), torch.ones(1, SEQ, dtype=torch.int64)
    past = [torch.randn(1, KV_HEADS, PAST, HIDDEN // HEADS) for _ in range(2 * LAYERS)]
    return torch.randint(0, VOCAB, (1, 1)), torch.ones(1, PAST + 1, dtype=torch.int64), *past


def dynamo_shapes(phase: str) -> tuple:
    """torch.export's dynamic dims: batch and sequence (prefill), batch and past length (decode;
    the mask spans past + 1; the past tensors are `forward`'s *past, one tuple)."""
    batch = Dim("batch", min=1, max=64)
    if phase == "prefill":
        seq = Dim("sequence", min=2, max=256)
        return {0: batch, 1: seq}, {0: batch, 1: seq}
    past = Dim("past_sequence", min=2, max=255)
    return ({0: batch}, {0: batch, 1: past + 1}, tuple({0: batch, 2: past} for _ in range(2 * LAYERS)))


def legacy_axes(phase: str) -> dict:
    """The TorchScript exporter's dynamic axes, by input/output name."""
    inputs, outputs = names(phase)
    length = "sequence" if phase == "prefill" else "total_sequence"
    tokens = {0: "batch"} | ({1: "sequence"} if phase == "prefill" else {})
    axes = {"input_ids": tokens, "attention_mask": {0: "batch", 1: length}, "logits": tokens}
    axes |= {n: {0: "batch", 2: "past_sequence"} for n in inputs if n.startswith("past")}
    axes |= {n: {0: "batch", 2: length} for n in outputs if n.startswith("present")}
    return axes


def export(model, phase: str, exporter: str, static: bool = False) -> onnx.ModelProto:
    inputs, outputs = names(phase)
    args = example(phase)
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(Step(model), args, buf, input_names=inputs, output_names=outputs,
                              opset_version=OPSET, dynamo=True, external_data=False, optimize=False,
                              dynamic_shapes=None if static else dynamo_shapes(phase))
        else:
            torch.onnx.export(Step(model), args, buf, input_names=inputs, output_names=outputs,
                              opset_version=OPSET, dynamo=False, dynamic_axes=None if static else legacy_axes(phase))
    return onnx.load_from_string(buf.getvalue())


def example_at(phase: str, length: int, pad: int) -> tuple:
    """Inputs at another length than the export's: `length` prompt tokens (prefill) or past
    tokens (decode), the first `pad` of them padding."""
    g = torch.Generator().manual_seed(1)
    if phase == "prefill":
        ids, mask = torch.randint(0, VOCAB, (1, length), generator=g), torch.ones(1, length, dtype=torch.int64)
        past = []
    else:
        ids, mask = torch.randint(0, VOCAB, (1, 1), generator=g), torch.ones(1, length + 1, dtype=torch.int64)
        past = [torch.randn(1, KV_HEADS, length, HIDDEN // HEADS, generator=g) for _ in range(2 * LAYERS)]
    mask[0, :pad] = 0
    return ids, mask, *past


def check(exported: onnx.ModelProto, model, phase: str, static: bool = False) -> float:
    """The largest |ONNX - PyTorch| (onnx.reference's evaluation of the export, before stripping)
    over the outputs' real (unpadded) positions, at a length other than the example's (a static export: at
    its own length) and with
    left padding: a length the exporter fixed, or a mask it traced as a constant, shows here.
    A padded position attends to nothing: its values are unspecified (PyTorch's fused attention
    and the exporters' decomposition of it differ there), and no real position reads them."""
    from onnx.reference import ReferenceEvaluator

    pad = 3
    args = example_at(phase, SEQ if static and phase == "prefill" else PAST if static else 11, pad)
    with torch.no_grad():
        want = [t.numpy() for t in Step(model)(*args)]
    inputs, outputs = names(phase)
    got = ReferenceEvaluator(exported).run(outputs, {n: a.numpy() for n, a in zip(inputs, args)})
    if any(g.shape != w.shape for g, w in zip(got, want)):
        raise ValueError(f"shapes differ from PyTorch's: {[g.shape for g in got]} vs {[w.shape for w in want]}")
    real = [(slice(None), slice(pad if phase == "prefill" else 0, None))]  # logits [batch, seq, vocab]
    real += [(slice(None), slice(None), slice(pad, None))] * (len(got) - 1)  # caches [batch, kv, seq, dim]
    return max(float(abs(g[r] - w[r]).max()) for g, w, r in zip(got, want, real))


def main() -> None:
    global LAYERS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=ROOT / "tests" / "data" / "models", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--phases", nargs="*", choices=PHASES, default=list(PHASES))
    parser.add_argument("--exporters", nargs="*", choices=EXPORTERS, default=list(EXPORTERS))
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--static", action="store_true",
                        help="no dynamic dims (files named ..._static.onnx): batch 1, the example lengths")
    args = parser.parse_args()
    suffix = "" if args.layers == LAYERS else str(args.layers)
    LAYERS = SMALL["num_hidden_layers"] = args.layers
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only:
        what, build = MODELS[name]
        for exporter in args.exporters:
            for phase in args.phases:
                torch.manual_seed(0)
                model = randomize(build()).eval()
                path = args.out / f"hf_{name}{suffix}_{phase}_{exporter}{'_static' if args.static else ''}.onnx"
                try:
                    exported = export(model, phase, exporter, static=args.static)
                    err = check(exported, model, phase, static=args.static)
                    if err > 1e-4:
                        raise ValueError(f"the export differs from PyTorch by {err:.3g} (left-padded)")
                    exported = strip_weights(exported)
                except Exception as e:  # noqa: BLE001 - reported, and the others go on
                    traceback.print_exc()
                    failed.append(f"{path.name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                    continue
                onnx.save(exported, path)
                ops = sorted({n.op_type for n in exported.graph.node})
                print(f"{path.name}: {what}; {path.stat().st_size / 1024:.0f} KB, opset {OPSET}, "
                      f"{len(exported.graph.node)} nodes, |ONNX - PyTorch| {err:.2g}: {ops}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}")
    for line in failed:
        print("FAILED", line)


if __name__ == "__main__":
    main()
