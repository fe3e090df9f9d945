"""cuBLASLt on the host emulation: GEMM algorithm choice, bias / ReLU epilogues, half GEMMs.

`LtHostDevice` is the host emulation of the device (`HostDevice`) with the CuPy device's GEMM
path: `gemm` goes through `cublaslt.run_gemm`, as `CupyDevice.gemm` does, over an emulated
cuBLASLt (`HostLt`) and cuBLAS (`HostCublas`) that read and write memory through the raw
pointers `run_gemm` computes, and compute from the libraries' definitions: D = epilogue(alpha ·
op(A) · op(B) + beta · C + bias), column-major, C and D of one layout, the bias over D's rows.
So the pointers, offsets, layouts, the epilogue's orientation and the algorithm bookkeeping
(candidates, screening, timing, the choice cached and recorded in the profile's format) are
checked without a GPU; timings are scripted.
"""

from __future__ import annotations

import ctypes
import shutil

import ml_dtypes
import numpy as np
import pytest

from einsat.cost.profile_db import ProfileDB
from einsat.gpu.backend_cupy import GpuBackend
from einsat.gpu.device import pointer
from einsat.gpu.interpreter import run
from einsat.gpu.kernels import cublas, cublaslt
from einsat.gpu.kernels.cublaslt import DEFAULT, Algo, GemmChooser, HeuristicResult
from einsat.ir.builder import GraphBuilder
from einsat.ir.signature import signature_of
from tests.gpu.cases import strategy
from tests.gpu.compare import assert_case
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice, KernelLibrary, check_gemm_arguments, library_for, poison

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

BF16 = np.dtype(ml_dtypes.bfloat16)
# the emulated heuristic's candidates: (workspace bytes) per index; the last needs more than there is
HEURISTIC_WORKSPACE = (0, 1 << 20, 64 << 20)


def at(ptr: int, dtype, shape, strides) -> np.ndarray:
    """A writable view of device (here: host) memory at `ptr`, element strides."""
    dtype = np.dtype(dtype)
    span = 1 + sum((d - 1) * s for d, s in zip(shape, strides)) if all(shape) else 0
    buf = (ctypes.c_char * max(span * dtype.itemsize, 1)).from_address(ptr)
    flat = np.frombuffer(buf, dtype=np.uint8).view(dtype)
    return np.lib.stride_tricks.as_strided(flat, tuple(shape), tuple(s * dtype.itemsize for s in strides))


def activation(y: np.ndarray, epilogue: int) -> np.ndarray:
    if epilogue & cublaslt.EPILOGUE_RELU:
        return np.maximum(y, 0.0)
    assert not epilogue & cublaslt.EPILOGUE_GELU, "no test asks for GELU"
    return y


class HostLt:
    """cuBLASLt from its definition, over raw pointers; the heuristic offers len(HEURISTIC_WORKSPACE)
    algorithms (word 0 of the opaque struct numbers them from 1)."""

    workspace_bytes = 32 << 20

    def __init__(self, log: list, refuse=None):
        self.log = log
        self.refuse = refuse  # problems the heuristic offers nothing for (a predicate), e.g. batched epilogues
        self.asked = 0
        self.bias = {}

    def _check(self, status, what):
        if status != 0:
            raise AssertionError(f"{what}: status {status}")

    def set_bias(self, p, ptr):
        self.bias[p] = ptr

    def heuristics(self, p, count=cublaslt.HEURISTIC_CANDIDATES):
        self.asked += 1
        if p.epilogue & cublaslt.EPILOGUE_BIAS:
            assert self.bias.get(p), "the heuristic is asked before the bias pointer is set"
        if self.refuse is not None and self.refuse(p):
            return []
        out = []
        for i, ws in enumerate(HEURISTIC_WORKSPACE[:count]):
            r = HeuristicResult()
            r.algo.data[0] = i + 1
            r.workspaceSize = ws
            out.append(r)
        return out

    def matmul(self, p, algo, a_ptr, b_ptr, c_ptr, d_ptr, alpha, beta, ws_ptr, ws_bytes, stream, bias_ptr=0):
        k = algo.data[0]
        assert ws_bytes >= HEURISTIC_WORKSPACE[k - 1], "less workspace than the algorithm needs"
        for ptr, al in ((a_ptr, p.align[0]), (b_ptr, p.align[1]), (c_ptr, p.align[2]), (d_ptr, p.align[2])):
            assert ptr % al == 0, f"a pointer less aligned than the problem says ({ptr} % {al})"
        assert (p.a_rows, p.a_cols) == ((p.m, p.k) if p.trans_a == 0 else (p.k, p.m))
        assert (p.b_rows, p.b_cols) == ((p.k, p.n) if p.trans_b == 0 else (p.n, p.k))
        assert p.lda >= max(1, p.a_rows) and p.ldb >= max(1, p.b_rows) and p.ldc >= max(1, p.m)
        a = at(a_ptr, p.dtype, (p.batch, p.a_rows, p.a_cols), (p.stride_a, 1, p.lda))
        b = at(b_ptr, p.dtype, (p.batch, p.b_rows, p.b_cols), (p.stride_b, 1, p.ldb))
        c = at(c_ptr, p.dtype, (p.batch, p.m, p.n), (p.stride_c, 1, p.ldc))
        d = at(d_ptr, p.dtype, (p.batch, p.m, p.n), (p.stride_c, 1, p.ldc))
        opa = a.transpose(0, 2, 1) if p.trans_a else a
        opb = b.transpose(0, 2, 1) if p.trans_b else b
        acc = alpha * np.matmul(opa.astype(np.float64), opb.astype(np.float64))
        if beta:
            acc = acc + beta * c.astype(np.float64)
        if p.epilogue & cublaslt.EPILOGUE_BIAS:
            assert bias_ptr and bias_ptr % p.align[3] == 0, "a bias epilogue without an aligned bias"
            acc = acc + at(bias_ptr, p.dtype, (p.m,), (1,)).astype(np.float64)[None, :, None]
        d[...] = activation(acc, p.epilogue).astype(p.dtype)
        self.log.append(f"lt{k - 1}")
        return 0


class HostCublas:
    """cublasGemmStridedBatchedEx (the default candidate) over raw pointers."""

    def __init__(self, log: list):
        self.log = log

    def set_stream(self, ptr):
        pass

    def gemm(self, call, ptrs, c_ptr, dtype, alpha=1.0, beta=0.0, tf32=False):
        check_gemm_arguments(call)
        mats = []
        for op, rows, cols, off in ((call.first, call.m, call.k, 0), (call.second, call.k, call.n, 1)):
            if op.trans:
                rows, cols = cols, rows
            offset = call.offsets[0 if op.source == "a" else 1]
            stored = at(ptrs[op.source] + offset * np.dtype(dtype).itemsize, dtype, (call.batch, rows, cols),
                        (op.stride, 1, op.ld))
            mats.append(stored.transpose(0, 2, 1) if op.trans else stored)
        cv = at(c_ptr + call.offsets[2] * np.dtype(dtype).itemsize, dtype, (call.batch, call.m, call.n),
                (call.stride_c, 1, call.ldc))
        res = alpha * np.matmul(mats[0].astype(np.float64), mats[1].astype(np.float64))
        if beta:
            res = res + beta * cv.astype(np.float64)
        cv[...] = res.astype(dtype)
        self.log.append(DEFAULT)


def _poison(shape, dtype):
    if np.dtype(dtype) == BF16:
        return np.full(shape, np.nan, dtype=BF16)
    return poison(shape, dtype)


class LtHostDevice(HostDevice):
    """The host emulation with `CupyDevice`'s GEMM path (`cublaslt.run_gemm`) and scripted times
    (ms per candidate name; a candidate missing from `times` takes 1.0)."""

    gemm_epilogues = True

    def __init__(self, library, times=None, tf32=False, refuse=None):
        super().__init__(library)
        self.allocator = _poison
        self.tf32 = tf32
        self.log: list[str] = []
        self.cublaslt = HostLt(self.log, refuse)
        self.cublas = HostCublas(self.log)
        self._ws = np.zeros(HostLt.workspace_bytes // 8, np.float64)
        self.cublaslt_workspace = pointer(self._ws)
        self.stream_ptr = 0
        self.gemm_chooser = GemmChooser()
        self.times = dict(times or {})
        self.timed = 0

    def gemm(self, call, a, b, c, alpha=1.0, beta=0.0, epilogue=None):
        self.gemm_calls += 1
        self.launches += 1
        check_gemm_arguments(call)
        if not self.dry:
            cublaslt.run_gemm(self, call, a, b, c, alpha, beta, epilogue, timer="scripted")

    def time_ms(self, fn):
        self.timed += 1
        fn()
        return self.times.get(self.log[-1], 1.0)

    screen_ms = time_ms


def _run(dev, graph, feeds):
    return run(graph, feeds, backend=GpuBackend(dev, name="host-lt"))


# -- epilogues --------------------------------------------------------------------------------

CASES = 40


@pytest.fixture(scope="module")
def fused_cases():
    cases = collect(strategy("fused_matmul"), CASES)
    return cases, library_for([(c.graph, c.inputs) for c in cases])


def _kernels(dev) -> int:
    return dev.launches - dev.gemm_calls


def test_fused_matmul_runs_its_epilogue_in_the_gemm(fused_cases):
    """Every drawn fused_matmul (bias, residual, activation, a transposed input) matches NumPy on the
    cuBLASLt path; where an epilogue computes it (none / relu, a [n] bias, a full residual) no
    element-wise kernel runs after the GEMM, where none does (sigmoid, tanh) the kernel runs."""
    cases, library = fused_cases
    fused = kept = 0
    for case in cases:
        lt, plain = LtHostDevice(library), HostDevice(library)
        got = _run(lt, case.graph, case.inputs)
        _run(plain, case.graph, case.inputs)
        assert_case(case, got)
        node = case.graph.nodes[-1]
        extra = any(node.inputs[2:]) or node.attrs["activation"] != "none"
        if node.attrs["activation"] in ("none", "relu"):
            assert _kernels(lt) == _kernels(plain) - extra, case
            assert all(name != DEFAULT for name in lt.log) or not extra, case
            fused += extra
        else:
            assert _kernels(lt) == _kernels(plain), case
            kept += 1
    assert fused >= 5 and kept >= 5, (fused, kept)  # the draw covers both paths


def _fused_graph(a_shape, b_shape, act, bias=True, residual=True, dtype=np.float32):
    g = GraphBuilder("fm")
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal(a_shape).astype(dtype), "b": rng.standard_normal(b_shape).astype(dtype)}
    a = g.input("a", a_shape, dtype)
    out_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + (a_shape[-2], b_shape[-1])
    args = [a, g.input("b", b_shape, dtype)]
    args.append(g.input("bias", (b_shape[-1],), dtype) if bias else None)
    if bias:
        feeds["bias"] = rng.standard_normal(b_shape[-1]).astype(dtype)
    if residual:
        args.append(g.input("res", out_shape, dtype))
        feeds["res"] = rng.standard_normal(out_shape).astype(dtype)
    return g.build(g.fused_matmul(*args, activation=act)), feeds


@pytest.mark.parametrize("act", ["none", "relu"])
def test_epilogue_over_several_calls_and_broadcast_batches(act):
    """A [2, 3, m, k] operand whose batch dims do not merge (transposed in memory) and a weight
    broadcast over the batch: several cuBLASLt calls, each with the bias and its slice of the
    residual."""
    g = GraphBuilder("fm4")
    x = g.input("x", (3, 2, 6, 5), np.float32)
    x = g.transpose(x, perm=(1, 0, 2, 3))
    w, bias, res = g.input("w", (5, 7), np.float32), g.input("bias", (7,), np.float32), \
        g.input("res", (2, 3, 6, 7), np.float32)
    graph = g.build(g.fused_matmul(x, w, bias, res, activation=act))
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((3, 2, 6, 5)).astype(np.float32),
             "w": rng.standard_normal((5, 7)).astype(np.float32),
             "bias": rng.standard_normal(7).astype(np.float32),
             "res": rng.standard_normal((2, 3, 6, 7)).astype(np.float32)}
    dev = LtHostDevice(library_for([(graph, feeds)]))
    got = _run(dev, graph, feeds)[graph.outputs[0]]
    want = run(graph, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dev.gemm_calls >= 1 and _kernels(dev) == 0


def test_gemm_with_a_bias_vector_adds_it_in_the_gemm():
    """Drawn gemm cases (transposes, alpha, beta, c of any broadcastable shape) match NumPy on the
    cuBLASLt path; with beta 1 and c a vector over the last axis the copy of c into the output is
    gone (one kernel fewer than the plain device runs), otherwise the same kernels run."""
    cases = collect(strategy("gemm"), 60)
    library = library_for([(c.graph, c.inputs) for c in cases])
    biased = 0
    for case in cases:
        lt, plain = LtHostDevice(library), HostDevice(library)
        assert_case(case, _run(lt, case.graph, case.inputs))
        _run(plain, case.graph, case.inputs)
        node = case.graph.nodes[-1]
        c = case.graph.types[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        vector = c is not None and c.shape[-1:] == case.graph.types[node.outputs[0]].shape[-1:] and \
            all(d == 1 for d in c.shape[:-1]) and len(c.shape) >= 1
        if vector and node.attrs["beta"] == 1.0:
            assert _kernels(lt) == _kernels(plain) - 1, case
            biased += 1
        else:
            assert _kernels(lt) == _kernels(plain), case
    rng = np.random.default_rng(9)  # the draw rarely has beta 1 with a vector c: these always do
    for c_shape, ta, tb, alpha in (((7,), 0, 0, 1.0), ((1, 7), 1, 0, 0.5), ((7,), 1, 1, -2.0), ((1,), 0, 1, 1.0)):
        g = GraphBuilder("gb")
        n = 7 if c_shape != (1,) else 1
        a_shape, b_shape = ((4, 5) if not ta else (5, 4)), ((5, n) if not tb else (n, 5))
        feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
                 "b": rng.standard_normal(b_shape).astype(np.float32),
                 "c": rng.standard_normal(c_shape).astype(np.float32)}
        graph = g.build(g.gemm(g.input("a", a_shape, np.float32), g.input("b", b_shape, np.float32),
                               g.input("c", c_shape, np.float32), alpha=alpha, beta=1.0, trans_a=ta, trans_b=tb))
        lt = LtHostDevice(library_for([(graph, feeds)], library))
        got = _run(lt, graph, feeds)[graph.outputs[0]]
        np.testing.assert_allclose(got, run(graph, feeds)[graph.outputs[0]], rtol=1e-5, atol=1e-5)
        assert _kernels(lt) == 0 and any("|bias|" in k for k in lt.gemm_chooser.choices), (c_shape, ta, tb)
        biased += 1
    assert biased >= 4


def test_an_epilogue_no_algorithm_runs_falls_back_to_the_gemm_and_the_kernel():
    """cuBLASLt offering nothing for a batched epilogue problem: the fused_matmul runs its GEMMs
    without the epilogue and then its kernel, right; the refusal is remembered (asked once)."""
    g = GraphBuilder("fb")
    x = g.transpose(g.input("x", (2, 5, 6), np.float32), perm=(0, 2, 1))  # rows not contiguous: no fold
    graph = g.build(g.fused_matmul(x, g.input("w", (5, 7), np.float32), g.input("bias", (7,), np.float32),
                                   activation="relu"))
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((2, 5, 6)).astype(np.float32),
             "w": rng.standard_normal((5, 7)).astype(np.float32), "bias": rng.standard_normal(7).astype(np.float32)}
    library = library_for([(graph, feeds)])
    dev = LtHostDevice(library, refuse=lambda p: p.batch > 1 and p.epilogue != cublaslt.EPILOGUE_DEFAULT)
    want = run(graph, feeds)[graph.outputs[0]]
    for _ in range(2):
        got = _run(dev, graph, feeds)[graph.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plain = HostDevice(library)
    _run(plain, graph, feeds)
    assert _kernels(dev) == 2 * _kernels(plain) and dev.gemm_chooser.unsupported
    # each problem (its key includes the operands' alignment, which host buffers vary) asked once
    chooser = dev.gemm_chooser
    assert dev.cublaslt.asked == len(chooser.unsupported) + len(chooser.choices)


def test_a_weight_broadcast_over_the_batch_folds_into_the_rows():
    """[b, M, K] @ [K, N]: one GEMM over b·M rows, computing the product (cuBLAS's definition)."""
    def plan(a, b, c):
        el = lambda x: tuple(s // x.itemsize for s in x.strides)  # noqa: E731
        return cublas.plan_gemm(a.shape, el(a), b.shape, el(b), c.shape, el(c))
    rng = np.random.default_rng(7)
    for a in (rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 1, 5)), rng.standard_normal((2, 3, 4, 5)),
              rng.standard_normal((3, 5, 4)).transpose(0, 2, 1), rng.standard_normal((2, 3, 4, 5))[:, 1:]):
        a = a.astype(np.float32)
        w = rng.standard_normal((5, 6)).astype(np.float32)
        bb = np.broadcast_to(w, a.shape[:-2] + (5, 6))
        c = np.empty(a.shape[:-1] + (6,), np.float32)
        calls = plan(a, bb, c)
        folded = a.strides[-3] == a.shape[-2] * a.strides[-2] or a.shape[-2] == 1
        assert (len(calls) == 1 and calls[0].batch == 1) == folded, (a.shape, a.strides, calls)
        dev = HostDevice(KernelLibrary())
        for call in calls:
            dev.gemm(call, a, bb, c)
        np.testing.assert_allclose(c, a @ w, rtol=1e-5, atol=1e-5)


# -- choosing the algorithm ----------------------------------------------------------------------

def _matmul_graph(m=6, k=5, n=7, dtype=np.float32):
    g = GraphBuilder("mm")
    out = g.matmul(g.input("a", (m, k), dtype), g.input("b", (k, n), dtype))
    rng = np.random.default_rng(1)
    feeds = {"a": rng.standard_normal((m, k)).astype(dtype), "b": rng.standard_normal((k, n)).astype(dtype)}
    return g.build(out), feeds


def test_the_fastest_candidate_is_chosen_once_and_recorded():
    graph, feeds = _matmul_graph()
    dev = LtHostDevice(KernelLibrary(), times={DEFAULT: 1.0, "lt0": 0.9, "lt1": 0.4})
    got = _run(dev, graph, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(got, feeds["a"] @ feeds["b"], rtol=1e-5, atol=1e-5)
    (rec,) = dev.gemm_chooser.records
    assert rec["algo"] == "lt1" and rec["workspace_bytes"] == HEURISTIC_WORKSPACE[1]
    assert Algo.from_hex(rec["config"]).data[0] == 2
    assert set(rec["candidates_ms"]) == {DEFAULT, "lt0", "lt1", "lt2"}
    assert "workspace" in rec["candidates_ms"]["lt2"]  # 64 MiB is over cuBLASLt's 32 MiB
    assert rec["candidates_ms"]["lt1"] == 0.4 and rec["timer"] == "scripted"
    assert dev.log[-1] == "lt1"  # the run itself used the choice
    timed = dev.timed
    _run(dev, graph, feeds)
    assert dev.timed == timed and dev.log[-1] == "lt1" and len(dev.gemm_chooser.records) == 1


def test_default_wins_when_it_is_fastest_and_slow_candidates_are_screened_out():
    graph, feeds = _matmul_graph()
    dev = LtHostDevice(KernelLibrary(), times={DEFAULT: 0.1, "lt0": 0.2, "lt1": 0.5})
    _run(dev, graph, feeds)
    (rec,) = dev.gemm_chooser.records
    assert rec["algo"] == DEFAULT and dev.log[-1] == DEFAULT
    assert str(rec["candidates_ms"]["lt1"]).startswith("screened out")
    assert rec["candidates_ms"]["lt0"] == 0.2


def test_epilogue_problems_have_no_default_candidate():
    graph, feeds = _fused_graph((4, 3), (3, 5), "relu")
    dev = LtHostDevice(library_for([(graph, feeds)]), times={DEFAULT: 0.01})
    got = _run(dev, graph, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(got, run(graph, feeds)[graph.outputs[0]], rtol=1e-5, atol=1e-5)
    (rec,) = dev.gemm_chooser.records
    assert DEFAULT not in rec["candidates_ms"] and "relu_bias" in rec["key"] and "c!=d" in rec["key"]


def test_timing_a_gemm_that_reads_its_output_leaves_the_result_right():
    """gemm with beta: the output holds beta·c before the GEMM; timing the candidates runs the GEMM
    many times, and the result is still alpha·a·b + beta·c."""
    g = GraphBuilder("gemm")
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal((5, 4)).astype(np.float32), "b": rng.standard_normal((4, 3)).astype(np.float32),
             "c": rng.standard_normal((5, 3)).astype(np.float32)}
    out = g.gemm(g.input("a", (5, 4), np.float32), g.input("b", (4, 3), np.float32), g.input("c", (5, 3), np.float32),
                 alpha=0.5, beta=2.0)
    graph = g.build(out)
    dev = LtHostDevice(library_for([(graph, feeds)]))
    got = _run(dev, graph, feeds)[graph.outputs[0]]
    assert dev.timed >= 3
    np.testing.assert_allclose(got, 0.5 * feeds["a"] @ feeds["b"] + 2.0 * feeds["c"], rtol=1e-5, atol=1e-5)


def test_the_choice_is_recorded_in_the_profile_and_a_new_device_times_its_own(tmp_path):
    """A choice recorded in a profile entry (as the profiler writes it) reads back as written;
    a new device does not take it from there: it times its candidates itself."""
    graph, feeds = _matmul_graph()
    first = LtHostDevice(KernelLibrary(), times={DEFAULT: 1.0, "lt0": 0.3, "lt1": 0.6})
    want = _run(first, graph, feeds)[graph.outputs[0]]
    node = graph.nodes[0]
    sig = signature_of(node.op, node.attrs, graph.node_types(node)[0])
    db = ProfileDB(device={"kind": "h100"})
    db.add(sig, us=1.0, warm_us=1.0, gemm=first.gemm_chooser.records)
    db.save(tmp_path / "p.json")
    (rec,) = ProfileDB.load(tmp_path / "p.json").entries[sig.key]["gemm"]
    assert rec["algo"] == "lt0" and rec["candidates_ms"]["lt0"] == 0.3

    second = LtHostDevice(KernelLibrary(), times={DEFAULT: 0.1, "lt0": 0.3, "lt1": 0.6})
    got = _run(second, graph, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert second.timed > 0 and second.gemm_chooser.records[0]["algo"] == DEFAULT


def test_problem_keys_separate_what_changes_the_algorithm():
    graph, feeds = _matmul_graph()
    (call,) = cublas.plan_gemm((6, 5), (5, 1), (5, 7), (7, 1), (6, 7), (7, 1))
    base = cublaslt.problem(call, np.float32)
    keys = {base.key, cublaslt.problem(call, np.float32, tf32=True).key, cublaslt.problem(call, BF16).key,
            cublaslt.problem(call, np.float32, epilogue=cublaslt.EPILOGUE_BIAS).key,
            cublaslt.problem(call, np.float32, align=(16, 256, 256, 256)).key,
            cublaslt.problem(call, np.float32, separate_c=True).key}
    assert len(keys) == 6


# -- precisions -------------------------------------------------------------------------------------

def test_compute_types_per_precision():
    (call,) = cublas.plan_gemm((6, 5), (5, 1), (5, 7), (7, 1), (6, 7), (7, 1))
    assert cublaslt.problem(call, np.float32).compute == cublas.COMPUTE_32F
    assert cublaslt.problem(call, np.float32, tf32=True).compute == cublas.COMPUTE_32F_FAST_TF32
    for half in (BF16, np.float16):  # half storage accumulates in fp32 (TF32 does not apply)
        p = cublaslt.problem(call, half, tf32=True)
        assert p.compute == cublas.COMPUTE_32F and cublaslt.TYPES[p.dtype][2] == cublas.CUDA_R_32F
    assert cublaslt.TYPES["bfloat16"][0] == cublas.CUDA_R_16BF and cublaslt.TYPES["float16"][0] == cublas.CUDA_R_16F
    assert cublas.supported(BF16) and cublaslt.supported(BF16)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lt", [True, False], ids=["cublaslt", "cublas"])
def test_half_gemm_matches_the_ml_dtypes_reference(dtype, lt):
    """bf16 / fp16 storage, fp32 accumulation, the output rounded once: against ml_dtypes' NumPy
    reference (inputs widened to fp32, the product in fp32, rounded to the storage type). The
    emulation accumulates in fp64, so the two differ by the fp32 sum's error (γ_K·Σ|a||b|) and
    at most one rounding step of the storage type."""
    m, k, n = 9, 33, 10
    g = GraphBuilder("half")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    graph = g.build(g.matmul(g.input("a", a.shape, dtype), g.input("b", b.shape, dtype)))
    dev = LtHostDevice(KernelLibrary()) if lt else HostDevice(KernelLibrary())
    dev.allocator = _poison
    got = _run(dev, graph, {"a": a, "b": b})[graph.outputs[0]]
    assert got.dtype == dtype
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    mag = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    ulp = np.abs(np.spacing(np.abs(ref.astype(np.float32)).astype(dtype)).astype(np.float64)) \
        if dtype != BF16 else np.abs(ref.astype(np.float64)) * 2.0**-7 + 2.0**-133
    allowed = 2 * k * 2.0**-24 * mag + ulp
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert (err <= allowed).all(), float(np.max(err - allowed))
    assert (got != ref).sum() <= got.size // 10  # mostly the very same rounding



def test_profile_entries_carry_gemm_choices_and_older_gemm_entries_are_stale():
    """The profiler's entry takes the GEMM choices made while it was timed; an entry of a float GEMM
    without them (timed when cuBLAS's default was the only algorithm), or with choices timed
    otherwise than the device times them now, is measured again."""
    from types import SimpleNamespace

    from einsat.gpu.device import CHOICE_TIMER
    from einsat.gpu.profiler import Profiler, stale
    prof = Profiler.__new__(Profiler)
    recs = [{"key": "lt|x", "algo": "lt0", "timer": CHOICE_TIMER}]
    prof.dev = SimpleNamespace(conv_choices=[], gemm_choices=[{"key": "old"}] + recs)
    assert prof._choices(0, 1) == {"gemm": recs}
    f32 = {"op": "matmul", "inputs": [{"shape": [2, 3], "dtype": "float32"}, {"shape": [3, 4], "dtype": "float32"}]}
    i32 = {"op": "matmul", "inputs": [{"shape": [2, 3], "dtype": "int32"}, {"shape": [3, 4], "dtype": "int32"}]}
    assert stale({"signature": f32, "kernels": 1, "us": 1.0})
    assert not stale({"signature": f32, "kernels": 1, "us": 1.0, "gemm": recs})
    assert stale({"signature": f32, "kernels": 1, "us": 1.0, "gemm": [dict(recs[0], timer="one call at a time")]})
    assert not stale({"signature": i32, "kernels": 1, "us": 1.0})
    assert not stale({"signature": {"op": "relu", "inputs": [{"shape": [2], "dtype": "float32"}]}, "kernels": 1})


def test_an_unsupported_epilogue_problem_is_asked_once_and_nothing_runs():
    a = np.random.default_rng(8).standard_normal((2, 6, 5)).astype(np.float32).transpose(0, 2, 1)  # [2, 5, 6]
    w = np.broadcast_to(np.ones((6, 3), np.float32), (2, 6, 3))
    c = np.full((2, 5, 3), 7.0, np.float32)
    bias = np.arange(3, dtype=np.float32)
    (call,) = cublas.plan_gemm(a.shape, tuple(s // 4 for s in a.strides), w.shape, tuple(s // 4 for s in w.strides),
                               c.shape, tuple(s // 4 for s in c.strides))
    dev = LtHostDevice(KernelLibrary(), refuse=lambda p: p.epilogue != cublaslt.EPILOGUE_DEFAULT)
    for _ in range(2):
        with pytest.raises(cublaslt.EpilogueUnsupported, match="relu_bias"):
            cublaslt.run_gemm(dev, call, a, w, c, epilogue=cublaslt.GemmEpilogue("relu", bias))
    assert dev.cublaslt.asked == 1 and dev.log == [] and (c == 7.0).all()
