"""plan_gemm: any strided views map to cuBLAS column-major calls computing A @ B.

The calls are executed by an emulation of cuBLAS's definition (tests.gpu.host_device), not by
np.matmul, so a wrong transpose flag, leading dimension or batch stride shows; the emulation
also refuses the arguments cuBLAS refuses.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.gpu.kernels.cublas import OP_N, plan_gemm
from tests.gpu.host_device import HostDevice, KernelLibrary


def elems(a):
    return tuple(s // a.itemsize for s in a.strides)


@st.composite
def views(draw, shape):
    """A view with `shape` over a larger buffer: transposed, strided or padded rows."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    kind = draw(st.sampled_from(["contiguous", "transposed", "padded", "stepped", "batch-last"]))
    *batch, r, c = shape
    if kind == "transposed":
        return np.swapaxes(rng.standard_normal((*batch, c, r)).astype(np.float32), -1, -2)
    if kind == "padded":
        return rng.standard_normal((*batch, r, c + 3)).astype(np.float32)[..., :c]
    if kind == "stepped":
        return rng.standard_normal((*batch, 2 * r, c)).astype(np.float32)[..., ::2, :]
    if kind == "batch-last" and batch:
        return np.moveaxis(rng.standard_normal((r, c, *batch)).astype(np.float32), (0, 1), (-2, -1))
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def problems(draw):
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    a = draw(views(batch + (m, k)))
    b = draw(views(batch + (k, n)))
    if batch and draw(st.booleans()):  # a broadcast operand: batch stride 0
        b = np.broadcast_to(b[(0,) * len(batch)], batch + (k, n))
    c_t = draw(st.booleans())
    return a, b, c_t


@given(problems())
def test_planned_calls_compute_the_product(problem):
    a, b, c_transposed = problem
    shape = a.shape[:-1] + b.shape[-1:]
    c = np.full(shape[:-2] + shape[-2:][::-1], np.nan, np.float32).swapaxes(-1, -2) if c_transposed \
        else np.full(shape, np.nan, np.float32)
    plan = plan_gemm(a.shape, elems(a), b.shape, elems(b), c.shape, elems(c))
    if plan is None:  # only when a matrix has no unit-stride axis
        unit = [any(s == 1 for d, s in zip(x.shape[-2:], elems(x)[-2:]) if d > 1) or min(x.shape[-2:]) == 1
                for x in (a, b)]
        assert not all(unit)
        return
    dev = HostDevice(KernelLibrary())
    for call in plan:
        dev.gemm(call, a, b, c)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    # the emulation sums in float64 and rounds once: within one fp32 rounding of the product
    np.testing.assert_allclose(c, want, rtol=2.0**-23, atol=0)


def test_row_major_product_is_one_transposed_call():
    a = np.zeros((4, 3), np.float32)
    b = np.zeros((3, 5), np.float32)
    c = np.zeros((4, 5), np.float32)
    (call,) = plan_gemm(a.shape, elems(a), b.shape, elems(b), c.shape, elems(c))
    # C^T = B^T A^T: B comes first, nothing is transposed, ld = row lengths
    assert (call.m, call.n, call.k) == (5, 4, 3)
    assert call.first.source == "b" and call.first.trans == OP_N and call.first.ld == 5
    assert call.second.source == "a" and call.second.trans == OP_N and call.second.ld == 3
    assert call.ldc == 5 and call.batch == 1


def test_host_gemm_refuses_what_cublas_refuses():
    a, b, c = np.zeros((4, 3), np.float32), np.zeros((3, 5), np.float32), np.zeros((4, 5), np.float32)
    (call,) = plan_gemm(a.shape, elems(a), b.shape, elems(b), c.shape, elems(c))
    dev = HostDevice(KernelLibrary())
    dev.gemm(call, a, b, c)  # the planned call is valid
    short = dataclasses.replace(call, first=dataclasses.replace(call.first, ld=call.m - 1))
    with pytest.raises(AssertionError, match="leading dimension"):
        dev.gemm(short, a, b, c)
    with pytest.raises(AssertionError, match="ldc"):
        dev.gemm(dataclasses.replace(call, ldc=call.m - 1), a, b, c)
    with pytest.raises(AssertionError, match="overlap"):
        dev.gemm(dataclasses.replace(call, batch=2, stride_c=call.ldc), a, b, c)
