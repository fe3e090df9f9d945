"""The 2026 workloads (`benchmarks.workloads.llm`) at small dimensions: each builds, runs on NumPy
as on onnxruntime, computes what it claims (against plain NumPy written here, or the identities a
decoder and a router must satisfy), optimizes with its verification proved and exports ONNX that
onnxruntime runs; the registry holds the published shapes. The full sizes run in
`benchmarks.llm_bench`."""

import numpy as np
import onnx
import pytest

import einsat
from benchmarks.workloads import LLM, WORKLOADS, build
from benchmarks.workloads.llm import LLAMA3_8B, TEST_SIZES, moe_example_inputs
from einsat.partition import Partitioning
from einsat.runtime import random_inputs
from tests.benchmarks.common import assert_close_scaled


def small(name):
    return build(name, **TEST_SIZES[name])


def feeds(name, g):
    return moe_example_inputs(g) if name == "moe" else random_inputs(g)


def test_registry_is_apart_from_the_harness_and_every_entry_has_a_test_size():
    assert set(TEST_SIZES) == set(LLM) and not set(LLM) & set(WORKLOADS)
    for name, w in LLM.items():
        assert w.description and w.source, name


@pytest.mark.parametrize("name", list(LLM))
def test_runs_on_numpy_and_onnxruntime_alike(name, tmp_path):
    g = small(name)
    x = feeds(name, g)
    want = einsat.run(g, x)
    for o in g.outputs:
        assert np.isfinite(want[o]).all() and np.abs(want[o]).max() > 0, f"{name}/{o}"
    einsat.save_onnx(g, tmp_path / "g.onnx")
    onnx.checker.check_model(str(tmp_path / "g.onnx"))
    got = einsat.run(g, x, backend="onnxruntime")
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"{name}/{o}")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "moe" else n for n in LLM])
def test_optimizes_with_verification_proved_and_its_onnx_runs(name, tmp_path):
    g = small(name)
    x = feeds(name, g)
    # the small stack (3 layers) is below the default partition threshold: cut it to exercise reuse
    extra = {"partition": Partitioning(above=100, executor="serial")} if name == "llama_stack" else {}
    # the budget only stops a run early (then the input comes back, "identical", not "proved"): it is
    # generous so that a loaded machine cannot decide the outcome; the search is bounded by its limits
    result = einsat.optimize(g, x if name == "moe" else None, cost="h100", verify="prove", budget=60, **extra)
    assert "proved" in str(result.report.verification)
    if name == "llama_stack":
        p = result.report.partition
        assert p is not None and p.cache_hits >= 1, "the repeated layer was not reused"
    einsat.save_onnx(result.graph, tmp_path / "opt.onnx")
    onnx.checker.check_model(str(tmp_path / "opt.onnx"))
    want = einsat.run(g, x)
    got = einsat.run(result.graph, x, backend="onnxruntime")
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"{name}/{o}")


# -- what the workloads compute ------------------------------------------------------------------
def rms(a):
    return a / np.sqrt((a.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5)


def test_mirage_attention_and_norms_against_numpy():
    g = small("mirage_qknorm_gqa")
    x = random_inputs(g)
    q, k, v = (x[n].astype(np.float64) for n in ("Q", "K", "V"))
    a = np.exp(rms(q) @ k)
    assert_close_scaled(einsat.run(g, x)["O"], (a / a.sum(-1, keepdims=True)) @ rms(v))
    g = small("mirage_gqa")
    a = np.exp(q @ k)
    assert_close_scaled(einsat.run(g, x)["O"], (a / a.sum(-1, keepdims=True)) @ v)
    g = small("mirage_ntrans")
    x = random_inputs(g)
    h, y, alpha = (x[n].astype(np.float64) for n in ("H", "X", "alpha"))
    assert_close_scaled(einsat.run(g, x)["O"], rms(y + alpha * (rms(h) + y)))


def test_decode_against_the_cache_is_the_last_row_of_prefill():
    """Same seed, same weights: prefill of P+1 tokens, then decode of token P against the first P
    keys and values, give the same hidden state and cache (RoPE positions, causal mask, GQA)."""
    past = TEST_SIZES["llama_decode"]["past"]
    dims = {k: v for k, v in TEST_SIZES["llama_decode"].items() if k != "past"}
    pre = build("llama_prefill", **dims, seq=past + 1)
    dec = build("llama_decode", **dims, past=past)
    x = random_inputs(pre)["x"]
    full = einsat.run(pre, {"x": x})
    step = einsat.run(dec, {"x": x[:, past:], "past_key": full["present_key"][:, :, :past],
                            "past_value": full["present_value"][:, :, :past]})
    assert_close_scaled(step["hidden"], full["hidden"][:, past:], what="hidden")
    assert_close_scaled(step["present_key"], full["present_key"], what="key")
    assert_close_scaled(step["present_value"], full["present_value"], what="value")
    # and causality: prefill's row t does not read later tokens
    later = x.copy()
    later[:, -1] += 1
    assert_close_scaled(einsat.run(pre, {"x": later})["hidden"][:, :past], full["hidden"][:, :past])


def test_llama_uses_grouped_query_heads_and_the_8b_dimensions():
    g = small("llama_decode")
    d = 64 // 4
    assert g.types["past_key"].shape == (1, 2, 16, d)
    widths = sorted(
        g.types[n.inputs[1]].shape for n in g.nodes if n.op is einsat.Op.MATMUL and n.inputs[1] in g.weights
    )
    assert widths == sorted([(64, 64), (64, 2 * d), (64, 2 * d), (64, 64), (64, 96), (64, 96), (96, 64)])
    assert LLAMA3_8B == {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "theta": 500000.0}
    assert LLM["llama_prefill"].defaults["seq"] == 512 and LLM["llama_decode"].defaults["past"] == 2048
    assert LLM["llama_stack"].defaults["layers"] == 32


def test_moe_routes_by_its_inputs():
    """Each token's output is Σ_k w_k · expert_{id_k}(x): linear in the weights, symmetric in the
    slots, and two slots naming one expert are that expert at the summed weight."""
    g = small("moe")
    x = moe_example_inputs(g)
    ids, w = x["expert_ids"], x["expert_weights"]

    def out(i, v):
        return einsat.run(g, {**x, "expert_ids": i, "expert_weights": v.astype(np.float32)})["out"]

    base = out(ids, w)
    zero = np.zeros_like(w[:, :1])
    assert_close_scaled(out(ids, np.hstack([w[:, :1], zero])) + out(ids, np.hstack([zero, w[:, 1:]])), base)
    assert_close_scaled(out(ids[:, ::-1].copy(), w[:, ::-1].copy()), base)
    same = np.repeat(ids[:, :1], 2, axis=1)
    assert_close_scaled(out(same, w), out(ids, np.hstack([w.sum(1, keepdims=True), zero])))
    assert not np.allclose(out(np.roll(ids, 1, axis=1), w), base)  # the routing matters


@pytest.mark.parametrize("name,inputs", [
    ("mirage_gqa", {"Q": (2, 256, 64), "K": (2, 64, 4096), "V": (2, 4096, 64)}),
    ("mirage_qknorm_gqa", {"Q": (2, 256, 64), "K": (2, 64, 4096), "V": (2, 4096, 64)}),
    ("mirage_ntrans", {"H": (8, 4096), "X": (8, 4096), "alpha": (8, 4096)}),
    ("mirage_lora", {"X": (16, 256)}),
])
def test_mirage_cases_have_the_published_shapes(name, inputs):
    g = build(name)
    assert {k: t.shape for k, t in g.input_types().items()} == inputs
    if name == "mirage_lora":
        assert sorted(a.shape for a in g.weights.values()) == [(16, 4096), (256, 16), (256, 4096)]


def test_mirage_linear_cases_have_the_published_weights():
    # built at the published sizes without drawing their 100+ MB of weights
    import inspect

    from benchmarks.workloads import llm
    assert {k: p.default for k, p in inspect.signature(llm.mirage_rmsnorm_linear).parameters.items()} == \
        {"batch": 1, "hidden": 4096, "out": 6144}
    assert {k: p.default for k, p in inspect.signature(llm.mirage_gated_mlp).parameters.items()} == \
        {"batch": 1, "rows": 8, "hidden": 4096, "ffn": 4096}
    g = build("mirage_rmsnorm_linear", hidden=64, out=96)
    assert g.types["X"].shape == (2, 64)
