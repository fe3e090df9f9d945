"""einsat's cuBLASLt binding against the real library (no device needed).

- Every function `cublaslt.SIGNATURES` binds has, in the wheel's `cublasLt.h`, the argument and
  return types einsat declares; every hard-coded enum value is the header's; the two structs
  einsat lays out in ctypes (cublasLtMatmulAlgo_t, cublasLtMatmulHeuristicResult_t) have the
  header's size and field offsets. (A C++ program compiled against the headers prints them, as
  tests/gpu/test_abi.py does for cuDNN and cuBLAS.)
- `libcublasLt.so` exports every bound function, and accepts the descriptors einsat builds for
  drawn GEMM problems (strided, transposed, batched, broadcast, every dtype, every epilogue):
  the matmul descriptor, layouts and preference are made by the real library without a handle,
  and read back with its Get functions they hold what einsat set. A descriptor attribute set
  with the wrong size is refused (status 7), so a wrong ctypes width fails here.
"""

from __future__ import annotations

import ctypes
import os

import ml_dtypes
import numpy as np
import pytest

from einsat.gpu.kernels import cublas, cublaslt, libload
from tests.gpu.test_abi import ctype_kind, headers, run_signature_program, signature_program  # noqa: F401 - headers is a fixture

CONSTANTS = {
    "DESC_COMPUTE_TYPE": "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE", "DESC_SCALE_TYPE": "CUBLASLT_MATMUL_DESC_SCALE_TYPE",
    "DESC_TRANSA": "CUBLASLT_MATMUL_DESC_TRANSA", "DESC_TRANSB": "CUBLASLT_MATMUL_DESC_TRANSB",
    "DESC_EPILOGUE": "CUBLASLT_MATMUL_DESC_EPILOGUE", "DESC_BIAS_POINTER": "CUBLASLT_MATMUL_DESC_BIAS_POINTER",
    "DESC_BIAS_BATCH_STRIDE": "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE",
    "LAYOUT_BATCH_COUNT": "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT",
    "LAYOUT_STRIDED_BATCH_OFFSET": "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET",
    "PREF_MAX_WORKSPACE_BYTES": "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES",
    "PREF_MIN_ALIGNMENT_A": "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES",
    "PREF_MIN_ALIGNMENT_B": "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES",
    "PREF_MIN_ALIGNMENT_C": "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES",
    "PREF_MIN_ALIGNMENT_D": "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES",
    "EPILOGUE_DEFAULT": "CUBLASLT_EPILOGUE_DEFAULT", "EPILOGUE_RELU": "CUBLASLT_EPILOGUE_RELU",
    "EPILOGUE_BIAS": "CUBLASLT_EPILOGUE_BIAS", "EPILOGUE_RELU_BIAS": "CUBLASLT_EPILOGUE_RELU_BIAS",
    "EPILOGUE_GELU": "CUBLASLT_EPILOGUE_GELU", "EPILOGUE_GELU_BIAS": "CUBLASLT_EPILOGUE_GELU_BIAS",
    "STATUS_SUCCESS": "CUBLAS_STATUS_SUCCESS",
}
# upper-case ints that are einsat's own choices
OWN = {"HEURISTIC_CANDIDATES", "MAX_ALIGNMENT", "WORKSPACE_BYTES", "SCREEN_FACTOR"}
# struct layouts: name -> C++ expression
LAYOUT = {"algo_size": "sizeof(cublasLtMatmulAlgo_t)", "result_size": "sizeof(cublasLtMatmulHeuristicResult_t)",
          "result_algo": "offsetof(cublasLtMatmulHeuristicResult_t, algo)",
          "result_workspace": "offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize)",
          "result_state": "offsetof(cublasLtMatmulHeuristicResult_t, state)",
          "result_waves": "offsetof(cublasLtMatmulHeuristicResult_t, wavesCount)"}

PROGRAM = signature_program("cublasLt.h")


@pytest.fixture(scope="module")
def lt_lib(pytestconfig):
    from einsat.errors import ExecutionError
    from tests.gpu.conftest import missing_gpu_libs
    try:
        return cublaslt.CublasLt(with_handle=False)
    except ExecutionError as e:
        missing_gpu_libs(pytestconfig, f"libcublasLt does not load ({e})")


@pytest.fixture(scope="module")
def declared(pytestconfig, lt_lib, headers, tmp_path_factory):  # noqa: F811
    """test_abi's include folders (the cuBLAS wheel's, the runtime's, CuPy's CCCL)."""
    from tests.gpu.conftest import missing_gpu_libs
    if not any(os.path.exists(os.path.join(d, "cublasLt.h")) for d in headers):
        missing_gpu_libs(pytestconfig, f"the cuBLAS wheel's cublasLt.h is not found in {headers}")
    lines = [f'    Sig<decltype(&{fn})>::print("{fn}");' for fn in cublaslt.SIGNATURES]
    exprs = {**{k: v for k, v in CONSTANTS.items()}, **LAYOUT}
    lines += [f'    std::printf("value {name} %lld\\n", (long long)({expr}));' for name, expr in exprs.items()]
    return run_signature_program(PROGRAM, lines, headers, tmp_path_factory.mktemp("abi_lt"))


def test_bound_signatures_match_the_header(declared):
    fns, _ = declared
    for fn, (args, res) in cublaslt.SIGNATURES.items():
        ours = [ctype_kind(res)] + [ctype_kind(a) for a in args]
        theirs = ["i32" if k == "e32" else k for k in fns[fn]]  # 32-bit enums pass as C ints
        # cuBLAS's status/enums are 32-bit: einsat's c_int; the header's uint64/int64 and size_t match by width
        assert ours == theirs, f"{fn}: einsat binds {ours}, the header declares {fns[fn]}"


def test_hard_coded_values_and_struct_layouts_match_the_header(declared):
    _, values = declared
    wrong = {n: (getattr(cublaslt, n), values[n]) for n in CONSTANTS if getattr(cublaslt, n) != values[n]}
    assert not wrong, f"einsat's value vs the header's: {wrong}"
    R = cublaslt.HeuristicResult
    ours = {"algo_size": ctypes.sizeof(cublaslt.Algo), "result_size": ctypes.sizeof(R), "result_algo": R.algo.offset,
            "result_workspace": R.workspaceSize.offset, "result_state": R.state.offset,
            "result_waves": R.wavesCount.offset}
    assert ours == {k: values[k] for k in LAYOUT}


def test_every_hard_coded_int_is_checked():
    names = {a for a, v in vars(cublaslt).items() if a.isupper() and type(v) is int}
    assert names == set(CONSTANTS) | OWN, f"unchecked: {sorted(names - set(CONSTANTS) - OWN)}"


def test_library_exports_every_bound_function(lt_lib):
    lib = libload.load("cublasLt")
    assert [fn for fn in cublaslt.SIGNATURES if not hasattr(lib, fn)] == []


def _get(lt, getter, desc, attr, ctype):
    v, written = ctype(), ctypes.c_size_t()
    lt._check(getter(desc, attr, ctypes.byref(v), ctypes.sizeof(v), ctypes.byref(written)), "get")
    assert written.value == ctypes.sizeof(v)
    return v.value


def _problems():
    """Planned calls of drawn matmuls (row-major, transposed, sliced, batched, broadcast)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(60):
        m, k, n = (int(x) for x in rng.integers(1, 40, 3))
        batch = tuple(int(x) for x in rng.integers(1, 4, int(rng.integers(0, 3))))
        a = np.empty(batch + (m, k), np.float32)
        if rng.random() < 0.4:
            a = np.empty(batch + (k, m), np.float32).swapaxes(-1, -2)
        b = np.empty((k, n), np.float32)
        if rng.random() < 0.5:
            b = np.empty(batch + (n, k), np.float32).swapaxes(-1, -2)
        bb = np.broadcast_to(b, batch + (k, n))
        c = np.empty(batch + (m, n), np.float32)
        el = lambda x: tuple(s // 4 for s in x.strides)  # noqa: E731
        plan = cublas.plan_gemm(a.shape, el(a), bb.shape, el(bb), c.shape, el(c))
        if plan:
            out += plan
    return out


DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def test_the_library_accepts_einsat_descriptors(lt_lib):
    lib = lt_lib.lib
    calls = _problems()
    assert len(calls) > 40
    epilogues = list(cublaslt.EPILOGUE_NAMES)
    for i, call in enumerate(calls):
        dtype = DTYPES[i % len(DTYPES)]
        epi = epilogues[i % len(epilogues)]
        p = cublaslt.problem(call, dtype, tf32=bool(i % 2), epilogue=epi, align=(256, 16, 4 << (i % 6), 256))
        d = lt_lib.descriptors(p)
        g = lib.cublasLtMatmulDescGetAttribute
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_TRANSA, ctypes.c_int32) == p.trans_a
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_TRANSB, ctypes.c_int32) == p.trans_b
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_EPILOGUE, ctypes.c_uint32) == p.epilogue
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_COMPUTE_TYPE, ctypes.c_int32) == p.compute
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_SCALE_TYPE, ctypes.c_int32) == cublaslt.TYPES[p.dtype][2]
        lg = lib.cublasLtMatrixLayoutGetAttribute
        for lay, (rows, cols, ld, stride) in ((d.a, (p.a_rows, p.a_cols, p.lda, p.stride_a)),
                                              (d.b, (p.b_rows, p.b_cols, p.ldb, p.stride_b)),
                                              (d.c, (p.m, p.n, p.ldc, p.stride_c))):
            assert _get(lt_lib, lg, lay, 2, ctypes.c_uint64) == rows  # CUBLASLT_MATRIX_LAYOUT_ROWS
            assert _get(lt_lib, lg, lay, 3, ctypes.c_uint64) == cols
            assert _get(lt_lib, lg, lay, 4, ctypes.c_int64) == ld
            assert _get(lt_lib, lg, lay, 0, ctypes.c_uint32) == cublaslt.TYPES[p.dtype][0]
            assert _get(lt_lib, lg, lay, cublaslt.LAYOUT_BATCH_COUNT, ctypes.c_int32) == p.batch
            if p.batch > 1:
                assert _get(lt_lib, lg, lay, cublaslt.LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64) == stride
        lt_lib.set_bias(p, 0x7F0000000100)
        assert _get(lt_lib, g, d.matmul, cublaslt.DESC_BIAS_POINTER, ctypes.c_uint64) == 0x7F0000000100


def test_a_wrongly_sized_attribute_is_refused(lt_lib):
    """The check above can fail: the library verifies each attribute's size."""
    (call,) = cublas.plan_gemm((4, 3), (3, 1), (3, 5), (5, 1), (4, 5), (5, 1))
    d = lt_lib.descriptors(cublaslt.problem(call, np.float32))
    wide = ctypes.c_uint64(cublaslt.EPILOGUE_BIAS)
    assert lt_lib.lib.cublasLtMatmulDescSetAttribute(d.matmul, cublaslt.DESC_EPILOGUE, ctypes.byref(wide), 8) == 7
