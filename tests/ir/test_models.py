"""Real models that no one here wrote import, run and match onnxruntime (CPU) in fp32.

- the ONNX model zoo's architectures shipped in the onnx package's backend test data
  (`onnx/backend/test/data/light`, opset 9, converted to 13 at import); their weights are
  `ConstantOfShape` placeholders, so both runtimes get the same seeded random weights;
- ResNet-18 and a BERT encoder exported by PyTorch's exporter (`scripts/export_torch_models.py`),
  committed without weights under `tests/data/models/` and filled the same way;
- the round trip: `load_onnx` then `save_onnx` passes the full ONNX checker and onnxruntime
  computes the same outputs on the saved model.

Tolerance. Two correct fp32 implementations differ by rounding, which grows with the length of
the sums and the depth of the network, in proportion to the scale of the values. So each output
is compared relative to its own scale, max|expected|: a difference of 1e-5 of it (about 80 ulp)
is allowed; on these models the measured worst is about 1e-6. Random weights make activations
large in deep nets and saturate the final softmax, so the logits feeding it are compared too,
and the probabilities within what the logits' allowed error can move them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import einsat
from einsat.ir import Op
from einsat.ir.onnx.weights import fill_random_weights

REL_TOL = 1e-5
ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = Path(__file__).parent.parent / "data" / "models"
ZOO_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]
SLOW = {"vgg19", "zfnet512", "bvlc_alexnet",  # 60M-140M parameters: seconds to fill and to load
        "densenet121",  # 668 nodes: seconds of NumPy and onnxruntime runs (make test-slow)
        "inception_v2"}  # 11 s; inception_v1 stays in the fast suite

ort.set_default_logger_severity(3)  # the zoo files carry unused initializers ORT warns about
# every node einsat has an op for imports as that op: no fallback to opaque on a real model
pytestmark = pytest.mark.filterwarnings("error::einsat.ir.onnx.importer.OpaqueFallbackWarning")


def assert_fp32_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    scale = float(np.max(np.abs(expected)))
    assert np.all(np.isfinite(expected)) and scale > 0, f"{what}: degenerate reference"
    err = float(np.max(np.abs(actual.astype(np.float64) - expected)))
    assert err <= REL_TOL * scale, f"{what}: max error {err:.3g} > {REL_TOL} x scale {scale:.3g}"


def logits_name(model: onnx.ModelProto) -> str | None:
    """The input of the Softmax computing the model's output, if it ends with one."""
    outputs = {o.name for o in model.graph.output}
    return next((n.input[0] for n in model.graph.node if n.op_type == "Softmax" and n.output[0] in outputs), None)


def ort_run(model: onnx.ModelProto, feeds: dict, names: list[str]) -> list[np.ndarray]:
    """onnxruntime's values of `names` (outputs or intermediates) on `model`."""
    outputs = model.graph.output
    n = len(outputs)
    outputs.extend(helper.make_empty_tensor_value_info(v) for v in names if v not in {o.name for o in outputs})
    try:
        data = model.SerializeToString()
    finally:
        del outputs[n:]
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(names, feeds)


def compare_with_ort(model: onnx.ModelProto, feeds: dict, logits: str | None = None) -> einsat.Graph:
    """Import `model` (weights already filled), run it on both runtimes and compare every output.
    With `logits` (the input of a final softmax), compare them too, and bound the error of the
    softmax output by what the logits' allowed error can do to it: |dp| <= 2 p max|dz|."""
    g = einsat.load_onnx(model)
    keep = (logits,) if logits and logits not in g.outputs else ()
    names = [*g.outputs, *keep]
    ours = einsat.run(g, feeds, keep=keep)
    refs = dict(zip(names, ort_run(model, feeds, names)))
    if keep:
        assert_fp32_close(ours[logits], refs[logits], f"{g.name}: {logits}")
        z_tol = REL_TOL * float(np.max(np.abs(refs[logits])))
    for name in g.outputs:
        if keep:  # a probability output of the softmax over the logits
            bound = 2 * z_tol * float(np.max(refs[name])) + 1e-7
            err = float(np.max(np.abs(ours[name] - refs[name])))
            assert err <= bound, f"{g.name}: {name}: max error {err:.3g} > {bound:.3g}"
        else:
            assert_fp32_close(ours[name], refs[name], f"{g.name}: {name}")
    return g


@lru_cache(maxsize=2)
def filled(path: Path) -> onnx.ModelProto:
    return fill_random_weights(onnx.load(path), seed=0)


def data_input(model: onnx.ModelProto) -> str:
    weights = {t.name for t in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in weights)


def image(shape=(1, 3, 224, 224)) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def bert_feeds(seq: int = 128, vocab: int = 30522) -> dict:
    rng = np.random.default_rng(2)
    mask = np.ones((1, seq), np.int64)
    mask[0, seq - 28:] = 0  # padding at the end, masked out of the attention
    types = np.zeros((1, seq), np.int64)
    types[0, seq // 2:] = 1
    return {"input_ids": rng.integers(0, vocab, (1, seq)), "attention_mask": mask, "token_type_ids": types}


# -- the model zoo -----------------------------------------------------------------------

@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in ZOO_MODELS])
def test_zoo_model_matches_onnxruntime(name):
    model = fill_random_weights(onnx.load(ZOO / f"light_{name}.onnx"), seed=0)
    g = compare_with_ort(model, {data_input(model): image()}, logits=logits_name(model))
    opaque = {n.attrs["op_type"] for n in g.nodes if n.op is Op.OPAQUE}
    assert not opaque, f"einsat keeps {sorted(opaque)} opaque"


def test_zoo_batchnorm_stays_an_op_and_sum_becomes_adds():
    g = einsat.load_onnx(ZOO / "light_resnet50.onnx", fill_weights="random")
    counts = g.op_counts()
    assert counts["batchnorm"] == 53 and counts["conv"] == 53
    assert counts["add"] == 16  # the 16 two-input Sums of the residual connections


# -- models exported from PyTorch ------------------------------------------------------------

def test_torch_resnet18_matches_onnxruntime():
    model = filled(MODELS / "resnet18.onnx")
    g = compare_with_ort(model, {"input": image()})
    counts = g.op_counts()
    assert counts["conv"] == 20 and counts["batchnorm"] == 20
    # the exporter's shape arithmetic (Shape, CastLike, Expand of the zero conv biases) is folded
    assert not any(n.op in (Op.OPAQUE, Op.EXPAND) for n in g.nodes), counts


def test_torch_bert_encoder_matches_onnxruntime():
    model = filled(MODELS / "bert_encoder.onnx")
    g = compare_with_ort(model, bert_feeds())
    counts = g.op_counts()
    assert counts["layernorm"] == 5 and counts["softmax"] == 2 and counts["erf"] == 2
    assert Op.OPAQUE not in {n.op for n in g.nodes}, counts
    # the position ids are an int64 initializer kept by the stripping: gathered rows, folded
    ids = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "position_ids"))
    assert ids.dtype == np.int64 and np.array_equal(ids[0], np.arange(ids.shape[1]))


def test_bert_mask_changes_the_output():
    """The attention mask is live: masking more positions changes the unmasked outputs."""
    g = einsat.load_onnx(filled(MODELS / "bert_encoder.onnx"))
    feeds = bert_feeds()
    a = einsat.run(g, feeds)["last_hidden_state"]
    feeds["attention_mask"] = feeds["attention_mask"].copy()
    feeds["attention_mask"][0, 50:] = 0
    b = einsat.run(g, feeds)["last_hidden_state"]
    assert not np.allclose(a[0, :50], b[0, :50])


# -- round trip -------------------------------------------------------------------------------

ROUND_TRIP = [("zoo", "squeezenet"), ("zoo", "inception_v1"), ("zoo", "shufflenet"),
              ("zoo", "densenet121"), ("torch", "resnet18"), ("torch", "bert_encoder")]


@pytest.mark.parametrize("source,name", [pytest.param(s, n, marks=pytest.mark.slow) if n in SLOW else (s, n)
                                         for s, n in ROUND_TRIP])
def test_round_trip_passes_checker_and_matches_onnxruntime(source, name, tmp_path):
    if source == "zoo":
        model = fill_random_weights(onnx.load(ZOO / f"light_{name}.onnx"), seed=0)
        feeds = {data_input(model): image()}
    else:
        model = filled(MODELS / f"{name}.onnx")
        feeds = image() if name == "resnet18" else bert_feeds()
        feeds = {"input": feeds} if name == "resnet18" else feeds
    g = einsat.load_onnx(model)
    path = tmp_path / f"{name}.onnx"
    einsat.save_onnx(g, path)
    onnx.checker.check_model(str(path), full_check=True)
    saved = onnx.load(path)
    expected = ort_run(model, feeds, list(g.outputs))
    for out, ref, got in zip(g.outputs, expected, ort_run(saved, feeds, list(g.outputs))):
        assert_fp32_close(got, ref, f"{name} saved: {out}")
    again = einsat.load_onnx(path)
    # the same ops read back, but for views the written file no longer needs (`ir.onnx.tidy`:
    # a transpose of a transpose is one, a reshape to a value's own shape none)
    views = {"transpose", "reshape", "identity", "expand"}
    read, wrote = again.op_counts(), g.op_counts()
    assert {k: v for k, v in read.items() if k not in views} == {k: v for k, v in wrote.items() if k not in views}
    assert all(read.get(k, 0) <= wrote.get(k, 0) for k in views)
