"""The recognition generators on the bundled exports (tests/data/models/README.md): every
RMSNorm of the Llama, Qwen2 and Mistral exports (dynamo: Pow, ReduceMean, Add, Sqrt, Reciprocal,
Mul; legacy: the same inside Cast(x, float32) pairs, the Reciprocal as Div(1, ..)), every GELU of
BERT, DistilBERT and ViT (erf) and of GPT-2 (NewGELU, tanh), each put into its chain's e-class;
and, where the committed H100 profile prefers the op, extracted. No bundled export writes a
layernorm chain (the dynamo exporter writes LayerNormalization): `test_recognize.py` has its forms.
"""

from collections import Counter

import pytest

import einsat
from einsat.egraph import Limits, Schedule, Session
from einsat.ir.registry import Op
from einsat.rewrites.algebra.gelu import gelu_generator
from einsat.rewrites.algebra.norms import layernorm_generator, rmsnorm_generator
from tests.ir.test_hf_llm_models import feeds
from tests.ir.test_models import MODELS
from tests.work_bounded import by_work, ended_by_work

LLMS = [f"{m}_{phase}_{exporter}" for m in ("llama", "qwen2", "mistral") for phase in ("prefill", "decode")
        for exporter in ("dynamo", "legacy")]


def _llm(name):
    inputs = feeds(name)
    g = einsat.load_onnx(MODELS / f"hf_{name}.onnx", fill_weights="random",
                         input_shapes={k: v.shape for k, v in inputs.items()})
    return g, inputs


def recognized(g) -> Counter:
    """The classes holding each recognized op after one round of the generators alone."""
    s = Session(Limits(iterations=1, nodes=200_000, time_s=600))
    s.add_graph(g)
    s.run(Schedule((rmsnorm_generator(), layernorm_generator(), gelu_generator())))
    data = s.export()
    out = Counter()
    for cls in data.classes.values():
        for n in cls.nodes:
            if n.op in (Op.RMSNORM, Op.LAYERNORM, Op.GELU):
                out[(n.op, n.attrs.get("approximate"))] += 1
    return out


# one dynamo and one legacy export in the fast suite (the two RMSNorm forms), the other ten in make test-slow
FAST_LLMS = ("llama_prefill_dynamo", "qwen2_decode_legacy")


@pytest.mark.parametrize("name", [n if n in FAST_LLMS else pytest.param(n, marks=pytest.mark.slow) for n in LLMS])
def test_every_rmsnorm_of_the_llm_exports_is_recognized(name):
    g, _ = _llm(name)
    ops = Counter(n.op for n in g.nodes)
    assert Op.RMSNORM not in ops and ops[Op.REDUCE_MEAN] == 5  # 2 layers x 2 norms, and the final one
    assert recognized(g) == {(Op.RMSNORM, None): 5}


@pytest.mark.slow
@pytest.mark.parametrize("name, shapes, approximate, count", [
    ("hf_bert_base", {"input_ids": (1, 128), "attention_mask": (1, 128), "token_type_ids": (1, 128)}, "none", 12),
    ("hf_distilbert", {"input_ids": (1, 128), "attention_mask": (1, 128)}, "none", 6),
    ("hf_vit_b16", {"pixel_values": (1, 3, 224, 224)}, "none", 12),
    ("hf_gpt2", {"input_ids": (1, 128), "attention_mask": (1, 128)}, "tanh", 12),
])
def test_every_gelu_of_the_encoder_exports_is_recognized(name, shapes, approximate, count):
    g = einsat.load_onnx(MODELS / f"{name}.onnx", fill_weights="random", input_shapes=shapes)
    ops = Counter(n.op for n in g.nodes)
    assert Op.GELU not in ops and ops[Op.ERF if approximate == "none" else Op.TANH] >= count
    found = recognized(g)
    assert found[(Op.GELU, approximate)] == count and (Op.RMSNORM, None) not in found


def test_the_bert_encoder_s_gelus_are_recognized():
    g = einsat.load_onnx(MODELS / "bert_encoder.onnx", fill_weights="random")
    assert recognized(g)[(Op.GELU, "none")] == Counter(n.op for n in g.nodes)[Op.ERF] == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_prefill_dynamo", "llama_prefill_legacy"])
def test_the_h100_cost_extracts_the_final_rmsnorm(name):
    """The norms before the attention and the MLP fuse with their residual sums (`eop_multi`, one
    kernel writing both), which the profile prefers; the final norm, read by the LM head alone, is
    extracted as the op."""
    g, inputs = _llm(name)
    result = einsat.optimize(g, inputs, cost="h100", **by_work(iterations=1))
    ended_by_work(result.report)
    assert Op.RMSNORM in [n.op for n in result.graph.nodes]
    assert result.report.verification.status == "proved"
