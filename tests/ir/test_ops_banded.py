"""g2bmm and gbmm (EinNet's band matrix products) against naive references, and through ONNX."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einsat
from einsat import GraphBuilder
from einsat.errors import AttributeValueError, ShapeError
from einsat.ir.onnx.export import to_onnx


def g2bmm_loops(a, b, width, dilation):
    """The definition, one output element at a time (float64)."""
    z, m, k = a.shape
    out = np.zeros((z, m, 2 * width + 1))
    for s in range(z):
        for i in range(m):
            for j in range(2 * width + 1):
                r = i + dilation * (j - width)
                if 0 <= r < m:
                    out[s, i, j] = sum(float(a[s, i, c]) * float(b[s, r, c]) for c in range(k))
    return out


def gbmm_loops(p, v, dilation):
    z, m, band = p.shape
    width = (band - 1) // 2
    out = np.zeros(v.shape)
    for s in range(z):
        for i in range(m):
            for j in range(band):
                r = i + dilation * (j - width)
                if 0 <= r < m:
                    out[s, i] += float(p[s, i, j]) * v[s, r].astype(np.float64)
    return out


def g2bmm_by_offsets(a, b, width, dilation):
    """A second reference for large sizes: one vectorized slice product per band offset."""
    z, m, _ = a.shape
    out = np.zeros((z, m, 2 * width + 1))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for j in range(2 * width + 1):
        off = dilation * (j - width)
        lo, hi = max(0, -off), min(m, m - off)
        if lo < hi:
            out[:, lo:hi, j] = np.einsum("zmk,zmk->zm", a64[:, lo:hi], b64[:, lo + off:hi + off])
    return out


def band_graph(z, m, k, n, width, dilation):
    b = GraphBuilder("band")
    q, key, v = b.input("q", (z, m, k)), b.input("k", (z, m, k)), b.input("v", (z, m, n))
    p = b.g2bmm(q, key, width=width, dilation=dilation, name="scores")
    o = b.gbmm(p, v, dilation=dilation, name="mixed")
    return b.build(p, o)


def feeds_for(g, rng):
    return {n: rng.standard_normal(g.types[n].shape).astype(np.float32) for n in g.inputs}


dims = st.tuples(st.integers(1, 3), st.integers(1, 14), st.integers(1, 5), st.integers(1, 4),
                 st.integers(0, 4), st.integers(1, 4))


@given(dims, st.integers(0, 2**31 - 1))
def test_band_products_match_their_definition(d, seed):
    z, m, k, n, width, dilation = d
    g = band_graph(z, m, k, n, width, dilation)
    x = feeds_for(g, np.random.default_rng(seed))
    out = einsat.run(g, x)
    assert out["scores"].shape == (z, m, 2 * width + 1)
    np.testing.assert_allclose(out["scores"], g2bmm_loops(x["q"], x["k"], width, dilation),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["mixed"], gbmm_loops(out["scores"], x["v"], dilation),
                               rtol=1e-4, atol=1e-4)


def test_longformer_sized_band_matches_the_offset_reference():
    # Longformer's window pattern (dilation 4) on 2000 rows: the strided-view path at scale
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((4, 2000, 64)).astype(np.float32) for _ in range(2))
    got = einsat.ir.opdef(einsat.Op.G2BMM).numpy([a, b], {"width": 100, "dilation": 4})[0]
    np.testing.assert_allclose(got, g2bmm_by_offsets(a, b, 100, 4), rtol=1e-4, atol=1e-4)
    assert not got[:, :4 * 100, 0].any()  # i + 4·(0 − 100) < 0: nothing to multiply


@given(dims, st.integers(0, 2**31 - 1))
def test_g2bmm_is_linear_in_each_input(d, seed):
    z, m, k, _, width, dilation = d
    rng = np.random.default_rng(seed)
    a1, a2, b = (rng.standard_normal((z, m, k)) for _ in range(3))
    f = einsat.ir.opdef(einsat.Op.G2BMM).numpy
    attrs = {"width": width, "dilation": dilation}
    np.testing.assert_allclose(f([a1 + 2 * a2, b], attrs)[0],
                               f([a1, b], attrs)[0] + 2 * f([a2, b], attrs)[0], atol=1e-9)
    np.testing.assert_allclose(f([b, a1 + a2], attrs)[0],
                               f([b, a1], attrs)[0] + f([b, a2], attrs)[0], atol=1e-9)


@pytest.mark.parametrize("width,dilation", [(0, 1), (2, 1), (3, 4), (9, 2)])
def test_onnx_expansion_runs_on_onnxruntime_with_equal_outputs(width, dilation):
    g = band_graph(2, 17, 6, 3, width, dilation)
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    x = feeds_for(g, np.random.default_rng(width))
    want = einsat.run(g, x)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    for name, value in zip(g.outputs, got):
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-5)


def onnxruntime_outputs(g, x):
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    return model, dict(zip(g.outputs, got))


@settings(max_examples=30, deadline=None)
@given(st.tuples(st.integers(1, 2), st.integers(1, 90), st.integers(1, 4), st.integers(1, 3),
                 st.integers(0, 20), st.integers(1, 5)), st.integers(0, 2**31 - 1))
def test_the_chunked_onnx_expansion_matches_the_definition(d, seed):
    """Any rows, widths beyond the rows, dilations that do not divide them, several chunks."""
    z, m, k, n, width, dilation = d
    g = band_graph(z, m, k, n, width, dilation)
    x = feeds_for(g, np.random.default_rng(seed))
    _, got = onnxruntime_outputs(g, x)
    np.testing.assert_allclose(got["scores"], g2bmm_loops(x["q"], x["k"], width, dilation), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["mixed"], gbmm_loops(got["scores"], x["v"], dilation), rtol=1e-4, atol=1e-4)


def test_longformer_sized_band_runs_on_onnxruntime_in_little_memory():
    """The CPU benchmark's Longformer band (8 heads, 2000 rows, W 200, D 4): the old export
    gathered a [Z, M, 2W+1, K] band (1.6 GB); no value of this one is over twice the largest
    input or output, and onnxruntime's results match NumPy's."""
    g = band_graph(8, 2000, 64, 64, 200, 4)
    x = feeds_for(g, np.random.default_rng(0))
    model, got = onnxruntime_outputs(g, x)
    want = einsat.run(g, x)
    for name in g.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-3)
    inferred = onnx.shape_inference.infer_shapes(model).graph
    size = lambda v: int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim]))  # noqa: E731
    largest_io = max(size(v) for v in [*inferred.input, *inferred.output])
    assert max(size(v) for v in inferred.value_info) <= 2 * largest_io


def test_flops_count_a_multiply_add_as_two():
    g = band_graph(2, 10, 8, 5, 3, 2)
    scores, mixed = g.nodes
    assert scores.definition.flops(*g.node_types(scores), scores.attrs) == 2 * 2 * 10 * 7 * 8
    assert mixed.definition.flops(*g.node_types(mixed), mixed.attrs) == 2 * 2 * 10 * 5 * 7
    assert scores.definition.multilinear and mixed.definition.multilinear


def test_bad_shapes_and_attributes_name_the_node():
    b = GraphBuilder()
    q, k3 = b.input("q", (2, 10, 8)), b.input("k3", (2, 9, 8))
    with pytest.raises(ShapeError, match=r"scores.*same shape"):
        b.g2bmm(q, k3, width=2, name="scores")
    with pytest.raises(ShapeError, match="rank 3"):
        b.g2bmm(b.input("flat", (10, 8)), b.input("flat2", (10, 8)), width=1)
    with pytest.raises(AttributeValueError, match="width"):
        b.g2bmm(q, q, width=-1)
    with pytest.raises(AttributeValueError, match="width.*required"):
        b.g2bmm(q, q)
    with pytest.raises(ShapeError, match="odd"):
        b.gbmm(b.input("p", (2, 10, 4)), b.input("v", (2, 10, 3)))
    with pytest.raises(ShapeError, match=r"\[Z, M\]"):
        b.gbmm(b.input("p2", (2, 10, 5)), b.input("v2", (2, 11, 3)))
