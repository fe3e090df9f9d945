"""cuDNN's fused attention: which attention calls its SDPA engines take (`plan_sdpa`, pure
Python), and, with the cuDNN frontend installed (`make test-gpu-static`), the frontend graph of
each plan einsat makes validates and lowers to an operation graph (no device needed)."""

from __future__ import annotations

import numpy as np
import pytest

from einsat.gpu.kernels.cudnn_sdpa import SdpaPlan, build_graph, plan_sdpa
from tests.gpu.conftest import missing_gpu_libs

try:
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover
    bfloat16 = None

F16 = np.float16


def dense(shape):
    return tuple(shape), tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))


def plan(q, k, v, mask=None, dtype=F16, causal=False, scale=0.125, out=None):
    out = out or (q[:-1] + (v[-1],))
    return plan_sdpa(dtype, dense(q), dense(k), dense(v), dense(mask) if mask else None, dense(out), scale, causal)


CASES = {  # name: (q, k, v, mask, causal): shapes the workloads' attentions have
    "bert_base": ((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), (1, 1, 128, 128), False),
    "gpt2_causal": ((1, 12, 128, 64), (1, 12, 128, 64), (1, 12, 128, 64), None, True),
    "bert_tensat": ((16, 64, 64), (16, 64, 64), (16, 64, 64), None, False),  # [heads, s, d]
    "gqa": ((2, 8, 32, 128), (2, 2, 48, 128), (2, 2, 48, 64), (2, 8, 32, 48), True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_workload_attentions_get_a_plan(name):
    q, k, v, mask, causal = CASES[name]
    p = plan(q, k, v, mask, causal=causal)
    assert isinstance(p, SdpaPlan), p
    assert len(p.q[0]) == 4 and p.q[0][-2:] == q[-2:] and p.causal == causal
    assert p.o[0][:2] == p.q[0][:2] and p.o[0][3] == v[-1]
    if len(q) == 3:  # [heads, s, d] is [1, heads, s, d]
        assert p.q[0] == (1,) + q and p.q[1][0] == 0


@pytest.mark.parametrize("args, reason", [
    (((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64)), None),
    (((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), None, np.float32), "fp16 and bf16, not float32"),
    (((1, 2, 8, 60), (1, 2, 8, 60), (1, 2, 8, 64)), "head dim 60 is no multiple of 8"),
    (((1, 2, 8, 512), (1, 2, 8, 512), (1, 2, 8, 64)), "head dim 512"),
    (((1, 3, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64)), "must be equal and divide"),
    (((2, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64)), "a broadcast batch runs the fallback"),
    (((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), (1, 1, 1, 8)), "a broadcast over queries"),
    (((2, 1, 2, 8, 64), (2, 1, 2, 8, 64), (2, 1, 2, 8, 64)), "rank 2 to 4"),
])
def test_what_cudnn_sdpa_takes_and_why_not(args, reason):
    p = plan(*args)
    if reason is None:
        assert isinstance(p, SdpaPlan)
    else:
        assert isinstance(p, str) and reason in p, p


def test_a_strided_head_dim_runs_the_fallback():
    q = ((1, 2, 8, 64), (1024, 8, 1, 16))  # d is the slowest axis: a transposed view
    p = plan_sdpa(F16, q, dense((1, 2, 8, 64)), dense((1, 2, 8, 64)), None, dense((1, 2, 8, 64)), 0.1, False)
    assert isinstance(p, str) and "contiguous" in p


@pytest.fixture(scope="module")
def cudnn_frontend(pytestconfig):
    try:
        import cudnn
    except Exception as e:  # ImportError, or the backend library failing to load
        missing_gpu_libs(pytestconfig, f"the cuDNN frontend (nvidia-cudnn-frontend) is not importable ({e})")
    return cudnn


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_frontend_graph_of_each_plan_validates(cudnn_frontend, name, dtype):
    if dtype == "bfloat16" and bfloat16 is None:
        pytest.skip("ml_dtypes is not installed")
    q, k, v, mask, causal = CASES[name]
    p = plan(q, k, v, mask, dtype=F16 if dtype == "float16" else bfloat16, causal=causal)
    assert isinstance(p, SdpaPlan) and p.dtype == dtype
    graph, tensors = build_graph(cudnn_frontend, p)
    assert set(tensors) == {"q", "k", "v", "o"} | ({"mask"} if mask else set())
    assert list(tensors["o"].get_dim()) == list(p.o[0])
