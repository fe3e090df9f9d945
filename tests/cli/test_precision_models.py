"""`einsat optimize model.onnx --precision bf16 | fp16` on the bundled ResNet-18, the BERT encoder
and every Hugging Face export in tests/data/models (#30's done-when).

For each model and precision the CLI optimizes the model (random weights, static shapes), and
the ONNX it writes must be valid at the opset its types need (`check_model(full_check=True)`:
every node's types against its schema at the model's opset; bf16 Conv needs 22), store its
weights in half, and run within the stated tolerance of the fp32 input on inputs the
verification never saw: in onnxruntime where its CPU kernels take the model (fp16), in
`onnx.reference` where they do not (bf16, or an fp16 op onnxruntime's CPU provider lacks).

The tolerance is the bound the run reports for each output (`--report`: κ·u·√depth,
docs/precision.md) times 2: the written model is run by another runtime, a second half
implementation (onnxruntime's fp16 kernels, the reference's), each within the bound of the
exact result. The bundled models run in the default suite; the big exports are marked slow.

The attention masks fed here are a right-padded batch's (0 or 1, the first token real), so that
every query sees a key. A fully masked row is the uniform average in the fp32 model because
s + min_float rounds to min_float whatever the score s; the fp16 model (its mask clamped to
-65504) reproduces that only through fp16's rounding of s - 65504, which onnxruntime's CPU
provider skips: it has no fp16 kernel for Add, runs it in fp32 (its InsertCastTransformer's
"precision free" casts) and the row follows the scores (the dynamo-exported Llama, Qwen2 and
Mistral prefills were 0.04 off in logits on such rows, within 7e-4 on onnx.reference).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import einsat
from einsat.cli import main
from einsat.ir.onnx.opset import types_opset
from einsat.runtime import random_inputs

DATA = Path(__file__).parent.parent / "data" / "models"
BUNDLED = {"resnet18": Path(einsat.__file__).parent / "data" / "resnet18.onnx",
           "bert_encoder": DATA / "bert_encoder.onnx"}
EXPORTS = sorted(p.stem for p in DATA.glob("hf_*.onnx"))
# the exports' symbolic dims, fixed small: 8 tokens, a past of 8 (the decode phases' mask is past + 1)
DIMS = {"batch": 1, "sequence": 8, "past_sequence": 8, "past_sequence + 1": 9, "total_sequence": 9}
HALF_TYPES = {"fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}


def input_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every input with a symbolic dim, fixed by DIMS."""
    model = onnx.load(path, load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    shapes = {}
    for i in model.graph.input:
        dims = i.type.tensor_type.shape.dim
        if i.name not in weights and any(d.dim_param for d in dims):
            shapes[i.name] = tuple(DIMS[d.dim_param] if d.dim_param else d.dim_value for d in dims)
    return shapes


def run_written(model: onnx.ModelProto, feeds: dict, precision: str) -> tuple[list[np.ndarray], str]:
    """The written model's outputs, and the runtime that gave them."""
    if precision == "fp16":
        try:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return session.run(None, feeds), "onnxruntime"
        except Exception as e:  # noqa: BLE001 - NOT_IMPLEMENTED: an fp16 op without a CPU kernel
            if "NOT_IMPLEMENTED" not in str(e) and "Could not find an implementation" not in str(e):
                raise
    return ReferenceEvaluator(model).run(None, feeds), "onnx.reference"


def optimize_and_check(tmp_path: Path, capsys, path: Path, precision: str, budget: int) -> str:
    shapes = input_shapes(path)
    out, report = tmp_path / f"{path.stem}_{precision}.onnx", tmp_path / "report.json"
    argv = ["optimize", str(path), "-o", str(out), "--precision", precision, "--fill-weights", "random",
            "--budget", str(budget), "--parallel", "1", "--report", str(report), "--quiet"]
    for name, shape in shapes.items():
        argv += ["--input-shape", f"{name}={','.join(map(str, shape))}"]
    assert main(argv) == 0, capsys.readouterr()
    assert f"precision: {precision} conversion within its bound" in capsys.readouterr().out
    bounds = {o["name"]: o["bound"] for o in json.loads(report.read_text())["precision"]["outputs"]}

    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)  # every node's types against its schema at this opset
    opset = model.opset_import[0].version
    assert opset >= types_opset(model)
    if precision == "bf16" and any(n.op_type == "Conv" for n in model.graph.node):
        assert opset >= 22  # bf16 Conv's schema
    assert HALF_TYPES[precision] in {t.data_type for t in model.graph.initializer}  # weights stored in half

    reference = einsat.load_onnx(path, fill_weights="random", input_shapes=shapes or None)  # the CLI's weights
    feeds = random_inputs(reference, seed=7)  # not the verification's draws
    if "attention_mask" in feeds:  # a right-padded batch's mask (module docstring)
        mask = (feeds["attention_mask"] > 0).astype(feeds["attention_mask"].dtype)
        mask[..., 0] = 1
        feeds["attention_mask"] = mask
    expected = einsat.run(reference, feeds)
    got, runtime = run_written(model, feeds, precision)
    names = [o.name for o in model.graph.output]
    assert set(names) == set(expected) == set(bounds)
    for name, g in zip(names, got):
        want = expected[name].astype(np.float64)
        assert np.isfinite(want).all(), f"{path.stem}: the fp32 model's {name} is not finite on these inputs"
        e = np.max(np.abs(g.astype(np.float64) - want) / (np.abs(want) + np.abs(want).max()))
        assert e <= 2 * bounds[name], \
            f"{path.stem} {precision} on {runtime}: {name} off by {e:.3g}, bound {bounds[name]:.3g}"
        assert e > 0, f"{path.stem} {precision}: {name} equals the fp32 result: nothing ran in half"
    return runtime


@pytest.mark.parametrize("name,precision", [pytest.param("resnet18", "fp16", marks=pytest.mark.slow),
                                            pytest.param("resnet18", "bf16", marks=pytest.mark.slow),
                                            ("bert_encoder", "fp16"),
                                            pytest.param("bert_encoder", "bf16", marks=pytest.mark.slow)])
def test_the_bundled_models_optimize_in_half_through_the_cli(tmp_path, capsys, name, precision):
    runtime = optimize_and_check(tmp_path, capsys, BUNDLED[name], precision, budget=6)
    assert runtime == ("onnxruntime" if precision == "fp16" else "onnx.reference")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("name", EXPORTS)
def test_the_hugging_face_exports_optimize_in_half_through_the_cli(tmp_path, capsys, name, precision):
    small = any(k in name for k in ("llama", "qwen2", "mistral"))  # the LLM exports: hidden 64, 2 layers
    optimize_and_check(tmp_path, capsys, DATA / f"{name}.onnx", precision, budget=10 if small else 30)
