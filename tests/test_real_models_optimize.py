"""`einsat.optimize` on real models, one per family, at small shapes (the full set, at full
shapes, is `benchmarks/models_bench.py`): the result is verified by a comparison that could
have failed ("proved"), within the memory bound, its ONNX export passes the full checker and
runs in onnxruntime with the input's outputs, and the same run with a planted wrong rewrite
(the extracted program's middle accumulating node 5% off, `einsat.testing.plant`) fails.
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import onnx
import pytest

import einsat
from benchmarks.real_models import FAMILY, real_model
from einsat.egraph.session import Limits
from einsat.errors import VerificationError
from einsat.testing.plant import perturb
from tests.ir.test_models import assert_fp32_close, ort_run

optimize_module = importlib.import_module("einsat.optimize")
BUDGET = 20.0  # seconds per run: the search stops early, the checks are the point here
FAMILIES = ["zoo_squeezenet", "hf_resnet50", "hf_distilbert", "hf_vit_b16"]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def examples(feeds: dict) -> dict | None:
    """Token ids must stay in the vocabulary: text models verify on the given inputs."""
    return feeds if any(np.issubdtype(v.dtype, np.integer) for v in feeds.values()) else None


def test_the_families_cover_every_kind_of_model():
    assert {FAMILY[n] for n in FAMILIES} == set(FAMILY.values())


@pytest.mark.parametrize("name", FAMILIES)
def test_optimize_proves_its_result_and_a_planted_wrong_rewrite_fails(name, tmp_path, monkeypatch):
    _, graph, feeds = real_model(name, small=True)
    result = einsat.optimize(graph, examples(feeds), budget=BUDGET)
    report = result.report
    assert report.proved, str(report.verification)
    assert report.memory["added_bytes"] < 4 * 2**30 and not report.memory["exceeded"]

    path = tmp_path / f"{name}.onnx"
    einsat.save_onnx(result.graph, path)
    onnx.checker.check_model(str(path), full_check=True)
    expected = einsat.run(graph, feeds)
    for out, got in zip(graph.outputs, ort_run(onnx.load(path), feeds, list(graph.outputs))):
        assert_fp32_close(got, expected[out], f"{name} optimized, in onnxruntime: {out}")

    extract = optimize_module._extract

    def planted(*args, **kwargs):
        x = extract(*args, **kwargs)
        return dataclasses.replace(x, graph=perturb(x.graph))

    monkeypatch.setattr(optimize_module, "_extract", planted)
    with pytest.raises(VerificationError, match="differs from"):
        einsat.optimize(graph, examples(feeds), limits=Limits(iterations=1), budget=BUDGET)
