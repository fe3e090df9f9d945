"""rotary: NumPy semantics (HF's q · cos + rotate_half(q) · sin with cos = cos(concat(f, f)); the
interleaved pairs), its export as ONNX RotaryEmbedding (opset 23) and as the minimal chain (older
caps, or cos not of x's batch), both run on onnxruntime against NumPy, its import, and bad input."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import einsat
from einsat.errors import ShapeError
from einsat.ir import GraphBuilder
from einsat.ir.onnx.export import to_onnx
from einsat.testing.strategies import seeds
from tests.ir.onnx_check import ort_run

VIEWS = {"Reshape", "Expand", "Transpose", "Identity", "Squeeze", "Flatten"}


def _case(seed, b, h, s, half, extra, cb, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, h, s, 2 * half + extra)).astype(dtype)
    cos, sin = (rng.standard_normal((cb, s, half)).astype(dtype) for _ in range(2))
    return x, cos, sin


def _graph(x, cos, sin, interleaved=0):
    b = GraphBuilder("rot")
    ins = [b.input(n, a.shape, a.dtype) for n, a in (("x", x), ("cos", cos), ("sin", sin))]
    return b.build(b.rotary(*ins, interleaved=interleaved))


def _run(g, x, cos, sin):
    return einsat.run(g, {"x": x, "cos": cos, "sin": sin})[g.outputs[0]]


def _rotate_half(v):
    h = v.shape[-1] // 2
    return np.concatenate([-v[..., h:], v[..., :h]], axis=-1)


@settings(max_examples=20, deadline=None)
@given(seeds, st.integers(1, 2), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(0, 3))
def test_rotate_half_is_hf_s_formula_with_the_duplicated_cache(seed, b, h, s, half, extra):
    x, cos, sin = _case(seed, b, h, s, half, extra, b, np.float64)
    r = 2 * half
    cos_full = np.concatenate([cos, cos], -1)[:, None]
    sin_full = np.concatenate([sin, sin], -1)[:, None]
    want = x.copy()
    want[..., :r] = x[..., :r] * cos_full + _rotate_half(x[..., :r]) * sin_full
    np.testing.assert_allclose(_run(_graph(x, cos, sin), x, cos, sin), want, rtol=1e-12, atol=1e-12)


def test_interleaved_rotates_even_odd_pairs():
    x, cos, sin = _case(1, 1, 2, 3, 2, 2, 1, np.float64)
    got = _run(_graph(x, cos, sin, 1), x, cos, sin)
    c, s = cos[:, None], sin[:, None]
    for k in range(2):
        np.testing.assert_allclose(got[..., 2 * k], x[..., 2 * k] * c[..., k] - x[..., 2 * k + 1] * s[..., k])
        np.testing.assert_allclose(got[..., 2 * k + 1], x[..., 2 * k + 1] * c[..., k] + x[..., 2 * k] * s[..., k])
    np.testing.assert_array_equal(got[..., 4:], x[..., 4:])  # the dims from R on pass through


@pytest.mark.parametrize("cap", [23, 18])
@pytest.mark.parametrize("interleaved", [0, 1])
@settings(max_examples=6, deadline=None)
@given(seed=seeds, b=st.integers(1, 2), h=st.integers(1, 3), s=st.integers(1, 4), half=st.integers(1, 4),
       extra=st.sampled_from([0, 0, 2]), batch_cache=st.booleans())
def test_export_runs_on_onnxruntime_and_matches_numpy(cap, interleaved, seed, b, h, s, half, extra, batch_cache):
    x, cos, sin = _case(seed, b, h, s, half, extra, b if batch_cache else 1)
    g = _graph(x, cos, sin, interleaved)
    model = to_onnx(g, opset=cap)
    onnx.checker.check_model(model, full_check=True)
    types = [n.op_type for n in model.graph.node]
    declared = next(o.version for o in model.opset_import if o.domain == "")
    assert declared <= cap
    if cap >= 23 and (batch_cache or b == 1):
        assert types == ["RotaryEmbedding"] and declared == 23
        attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
        assert attrs.get("rotary_embedding_dim", 0) == (2 * half if extra else 0)
    else:
        assert "RotaryEmbedding" not in types
        # the minimal chain: interleaved pairs flatten back with one Reshape, nothing else is a view
        assert types.count("Reshape") == interleaved and not (set(types) & (VIEWS - {"Reshape"})), types
    (theirs,) = ort_run(model, {"x": x, "cos": cos, "sin": sin})
    np.testing.assert_allclose(theirs, _run(g, x, cos, sin), rtol=1e-5, atol=1e-5)


def _rotary_model(x_shape, cache_shape, **attrs):
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
           helper.make_tensor_value_info("cos", TensorProto.FLOAT, cache_shape),
           helper.make_tensor_value_info("sin", TensorProto.FLOAT, cache_shape)]
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], **attrs)
    g = helper.make_graph([node], "rot", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize("attrs, cache", [({}, 8), ({"interleaved": 1}, 8), ({"rotary_embedding_dim": 8}, 4)])
def test_import_of_rotary_embedding_matches_onnxruntime(attrs, cache):
    model = _rotary_model([2, 3, 5, 16], [2, 5, cache], **attrs)
    x, cos, sin = _case(4, 2, 3, 5, cache, 16 - 2 * cache, 2)
    g = einsat.load_onnx(model)
    assert [n.op.value for n in g.nodes] == ["rotary"]
    assert g.nodes[0].attrs["interleaved"] == attrs.get("interleaved", 0)
    (theirs,) = ort_run(model, {"x": x, "cos": cos, "sin": sin})
    np.testing.assert_allclose(_run(g, x, cos, sin), theirs, rtol=1e-5, atol=1e-5)


def test_a_cache_and_rotary_dim_that_disagree_are_not_imported_as_rotary():
    g = einsat.load_onnx(_rotary_model([2, 3, 5, 16], [2, 5, 8], rotary_embedding_dim=8))
    assert [n.op.value for n in g.nodes] == ["opaque"]


@pytest.mark.parametrize("x, cache, why", [
    ((2, 5, 16), (2, 5, 8), "rank 4"),
    ((2, 3, 5, 16), (2, 4, 8), "does not match"),
    ((2, 3, 5, 16), (3, 5, 8), "does not match"),
    ((2, 3, 5, 16), (2, 5, 9), "exceed the head dim"),
])
def test_bad_shapes_are_refused_clearly(x, cache, why):
    b = GraphBuilder("bad")
    xi, c, s = b.input("x", x), b.input("cos", cache), b.input("sin", cache)
    with pytest.raises(ShapeError, match=why):
        b.rotary(xi, c, s)
