"""matmul, batchmatmul, gemm: NumPy semantics against onnxruntime, shapes, FLOPs."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.registry import opdef
from einsat.testing.strategies import arrays, seeds

dim = st.integers(1, 5)


@st.composite
def matmul_shapes(draw):
    """NumPy matmul operands: rank 1..4 each, broadcasting batch dims (1 against n)."""
    m, k, n = draw(dim), draw(dim), draw(dim)
    batch = tuple(draw(st.lists(dim, max_size=2)))
    a = tuple(1 if draw(st.booleans()) else d for d in batch) + (m, k)
    b = tuple(1 if draw(st.booleans()) else d for d in batch)[draw(st.integers(0, len(batch))):] + (k, n)
    if draw(st.booleans()):
        a = (k,)
    elif draw(st.booleans()):
        b = (k,)
    return a, b


@given(matmul_shapes(), seeds)
def test_matmul_matches_onnxruntime(shapes, seed):
    from tests.ir.onnx_check import check_op
    check_op(Op.MATMUL, arrays(seed, *shapes))


@given(dim, dim, dim, dim, seeds)
def test_batchmatmul_matches_onnxruntime(bsz, m, k, n, seed):
    from tests.ir.onnx_check import check_op
    g = check_op(Op.BATCHMATMUL, arrays(seed, (bsz, m, k), (bsz, k, n)))
    assert g.types[g.outputs[0]].shape == (bsz, m, n)


@st.composite
def gemm_cases(draw):
    m, k, n = draw(dim), draw(dim), draw(dim)
    attrs = {"trans_a": draw(st.integers(0, 1)), "trans_b": draw(st.integers(0, 1)),
             "alpha": draw(st.sampled_from([1.0, 0.5, -2.0])), "beta": draw(st.sampled_from([1.0, 0.0, 3.0]))}
    a = (k, m) if attrs["trans_a"] else (m, k)
    b = (n, k) if attrs["trans_b"] else (k, n)
    c = draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), ()]))
    return a, b, c, attrs


@given(gemm_cases(), seeds)
def test_gemm_matches_onnxruntime(case, seed):
    from tests.ir.onnx_check import check_op
    a, b, c, attrs = case
    arrs = arrays(seed, a, b, c if c is not None else ())
    check_op(Op.GEMM, [arrs[0], arrs[1], arrs[2] if c is not None else None], attrs)


def test_flops_formulas():
    t = TensorType
    # matmul [2, 3, 4] @ [4, 5]: 2·3·5 outputs of 4 multiply-adds
    assert opdef(Op.MATMUL).flops([t((2, 3, 4)), t((4, 5))], [t((2, 3, 5))], {}) == 2 * 2 * 3 * 5 * 4
    assert opdef(Op.BATCHMATMUL).flops([t((2, 3, 4)), t((2, 4, 5))], [t((2, 3, 5))], {}) == 2 * 2 * 3 * 5 * 4
    gemm = opdef(Op.GEMM)
    plain = {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0}
    assert gemm.flops([t((3, 4)), t((4, 5))], [t((3, 5))], plain) == 2 * 3 * 4 * 5
    assert gemm.flops([t((3, 4)), t((4, 5)), t((5,))], [t((3, 5))], plain) == 2 * 3 * 4 * 5 + 15
    scaled = dict(plain, alpha=2.0, beta=0.5, trans_a=1)
    assert gemm.flops([t((4, 3)), t((4, 5)), t((5,))], [t((3, 5))], scaled) == 2 * 3 * 4 * 5 + 15 + 2 * 15


def test_shape_errors_name_the_shapes():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"batch dims differ: 2 and 3"):
        b.batchmatmul(x, b.input("y", (3, 4, 5)))
    with pytest.raises(ShapeError, match=r"\[B, M, K\]"):
        b.batchmatmul(x, b.input("v", (4, 5)))
    a = b.input("a", (3, 4))
    with pytest.raises(ShapeError, match=r"contracted dims differ: 4 .* 5"):
        b.gemm(a, b.input("bb", (5, 6)))
    with pytest.raises(ShapeError, match=r"does not broadcast to \[3, 6\]"):
        b.gemm(a, b.input("b2", (4, 6)), b.input("c", (4, 6)))
    with pytest.raises(AttributeValueError, match="trans_a"):
        b.gemm(a, b.input("b3", (4, 6)), trans_a=2)


@pytest.mark.parametrize("op", [Op.MATMUL, Op.BATCHMATMUL])
def test_matmul_computes_in_the_operands_dtype(op):
    """NumPy multiplies bfloat16 arrays into float32; the op's value has its inferred dtype."""
    import ml_dtypes
    import numpy as np

    a = np.arange(24).reshape(2, 3, 4).astype(ml_dtypes.bfloat16)
    b = np.ones((2, 4, 2), ml_dtypes.bfloat16)
    (out,) = opdef(op).numpy([a, b], {})
    assert out.dtype == ml_dtypes.bfloat16
    assert np.array_equal(out.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32))
