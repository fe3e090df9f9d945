"""Batched GEMMs through `cublasGemmStridedBatchedEx`, on any strided views.

`plan_gemm` maps a row-major batched product C[b] = A[b] @ B[b] over arbitrary strided views
(transposed, sliced, batch in any axis, broadcast batch with stride 0) to cuBLAS's
column-major calls, EinNet-style: a row-major C is computed as the column-major Cᵀ = Bᵀ·Aᵀ, a
column-major C directly. A matrix enters cuBLAS without a copy when one of its two axes has
unit stride; `plan_gemm` returns None otherwise (the caller copies that operand). Batch dims
that do not flatten to one stride per operand become several calls.

`Cublas` is a ctypes binding with its own handle (CuPy's cuBLAS wrappers refuse to run during
CUDA-graph capture), its own preallocated workspace, and TF32 selectable per call. Storage in
fp32, fp64, fp16 or bf16 (ml_dtypes' bfloat16): half storage accumulates in fp32
(CUBLAS_COMPUTE_32F); `tf32=True` makes an fp32 GEMM CUBLAS_COMPUTE_32F_FAST_TF32. This call is
cuBLAS's default candidate beside cuBLASLt's (`kernels/cublaslt.py`), which chooses between them.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import coalesce

INT_MAX = 2**31 - 1
OP_N, OP_T = 0, 1


@dataclass(frozen=True)
class Operand2D:
    """How one matrix enters cuBLAS: which input it is, transposed or not, its ld."""

    source: str   # "a" or "b": which einsat operand is passed here
    trans: int    # OP_N or OP_T
    ld: int
    stride: int   # batch stride (elements)


@dataclass(frozen=True)
class GemmCall:
    """One `cublasGemmStridedBatchedEx` call; offsets are in elements from each base pointer."""

    m: int
    n: int
    k: int
    first: Operand2D
    second: Operand2D
    ldc: int
    stride_c: int
    batch: int
    offsets: tuple[int, int, int]  # a, b, c


def _as_operand(rows: int, cols: int, s_rows: int, s_cols: int) -> tuple[int, int] | None:
    """(trans, ld) so that op(stored) is the logical rows x cols matrix, or None.

    Column-major "N": element (r, c) at r + c*ld, needs unit row stride and ld >= rows.
    "T": the stored matrix is cols x rows column-major, needs unit column stride, ld >= cols.
    A size-1 axis has any stride, so it never blocks a layout.
    """
    if rows == 1 or s_rows == 1:
        ld = s_cols if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1) and ld <= INT_MAX:
            return OP_N, ld
    if cols == 1 or s_cols == 1:
        ld = s_rows if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1) and ld <= INT_MAX:
            return OP_T, ld
    return None


def fold_rows(a_shape, a_strides, b_shape, b_strides, c_shape, c_strides) -> tuple[tuple, ...]:
    """The same product with the innermost batch dims folded into M where B is broadcast over
    them (stride 0) and A's and C's rows run on across them (batch stride = M × row stride):
    [b, M, K] @ [K, N] (activations times a weight) is one [b·M, K] @ [K, N] GEMM, not a batch
    of b GEMMs over one B (one call, larger tiles; and cuBLASLt's epilogues need no batch)."""
    a_shape, a_strides, b_shape, b_strides = list(a_shape), list(a_strides), list(b_shape), list(b_strides)
    c_shape, c_strides = list(c_shape), list(c_strides)
    while len(a_shape) > 2 and (b_strides[-3] == 0 or b_shape[-3] == 1):
        d, m = a_shape[-3], a_shape[-2]
        if d != 1:
            if m == 1:  # a single row: its stride is free, the batch stride becomes it
                if a_strides[-3] == 0 or c_strides[-3] == 0:
                    break
                a_strides[-2], c_strides[-2] = a_strides[-3], c_strides[-3]
            elif a_strides[-3] != m * a_strides[-2] or c_strides[-3] != m * c_strides[-2]:
                break
        a_shape[-3:-1] = [d * m]
        a_strides[-3:-1] = [a_strides[-2]]
        c_shape[-3:-1] = [d * m]
        c_strides[-3:-1] = [c_strides[-2]]
        del b_shape[-3], b_strides[-3]
    return tuple(a_shape), tuple(a_strides), tuple(b_shape), tuple(b_strides), tuple(c_shape), tuple(c_strides)


def plan_gemm(a_shape: Sequence[int], a_strides: Sequence[int], b_shape: Sequence[int], b_strides: Sequence[int],
              c_shape: Sequence[int], c_strides: Sequence[int]) -> list[GemmCall] | None:
    """cuBLAS calls computing C = A @ B, or None when an operand needs a copy first.

    A is [*batch, M, K], B [*batch, K, N], C [*batch, M, N]; all three share the batch dims
    (broadcast operands carry stride 0 there). Strides are in elements. Batch dims over which
    B is broadcast fold into M where the layouts allow (`fold_rows`).
    """
    if len(a_shape) == len(b_shape) == len(c_shape) and tuple(a_shape[:-2]) == tuple(b_shape[:-2]) \
            == tuple(c_shape[:-2]):
        a_shape, a_strides, b_shape, b_strides, c_shape, c_strides = fold_rows(
            a_shape, a_strides, b_shape, b_strides, c_shape, c_strides)
    *batch, m, k = a_shape
    n = b_shape[-1]
    if tuple(b_shape[-2:]) != (k, n) or tuple(c_shape[-2:]) != (m, n) or \
            not (len(a_shape) == len(b_shape) == len(c_shape)) or tuple(b_shape[:-2]) != tuple(batch) or \
            tuple(c_shape[:-2]) != tuple(batch):
        raise ExecutionError(f"gemm plan: shapes {list(a_shape)} @ {list(b_shape)} -> {list(c_shape)} do not fit")
    if max(m, n, k) > INT_MAX:
        return None
    sam, sak = a_strides[-2:]
    sbk, sbn = b_strides[-2:]
    scm, scn = c_strides[-2:]
    # row-major C: C^T (n x m) = B^T (n x k) . A^T (k x m)
    c_op = _as_operand(n, m, scn, scm)
    first, second = _as_operand(n, k, sbn, sbk), _as_operand(k, m, sak, sam)
    if c_op is not None and c_op[0] == OP_N and first and second:
        dims, srcs, ldc = (n, m, k), ("b", "a"), c_op[1]
    else:
        c_op = _as_operand(m, n, scm, scn)
        first, second = _as_operand(m, k, sam, sak), _as_operand(k, n, sbk, sbn)
        if not (c_op is not None and c_op[0] == OP_N and first and second):
            return None
        dims, srcs, ldc = (m, n, k), ("a", "b"), c_op[1]
    bshape, (sa, sb, sc) = coalesce(batch, [a_strides[:-2], b_strides[:-2], c_strides[:-2]])
    if any(s < 0 for s in (*sa, *sb, *sc)):
        return None
    count = bshape[-1] if bshape else 1
    last = [(s[-1] if s else 0) for s in (sa, sb, sc)]
    if count > INT_MAX:
        return None
    by_src = {"a": last[0], "b": last[1]}
    calls = []
    for outer in np.ndindex(*bshape[:-1]) if len(bshape) > 1 else [()]:
        off = tuple(int(sum(i * s for i, s in zip(outer, st[:-1]))) for st in (sa, sb, sc))
        calls.append(GemmCall(
            *dims,
            Operand2D(srcs[0], first[0], first[1], by_src[srcs[0]]),
            Operand2D(srcs[1], second[0], second[1], by_src[srcs[1]]),
            ldc, last[2], count, off))
    return calls


# -- the ctypes binding (GPU machine only) ------------------------------------------------

CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_16BF = 0, 1, 2, 14
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70
GEMM_DEFAULT = -1
WORKSPACE_BYTES = 32 << 20

_vp, _ci, _ll, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t

# Every cuBLAS function einsat calls: (argument types, return type), checked against the
# wheel's cublas_api.h by tests/gpu/test_abi.py.
SIGNATURES = {
    "cublasCreate_v2": ([ctypes.POINTER(_vp)], _ci), "cublasSetStream_v2": ([_vp, _vp], _ci),
    "cublasSetWorkspace_v2": ([_vp, _vp, _sz], _ci), "cublasSetMathMode": ([_vp, _ci], _ci),
    "cublasGetVersion_v2": ([_vp, ctypes.POINTER(_ci)], _ci),
    "cublasGemmStridedBatchedEx": ([_vp, _ci, _ci, _ci, _ci, _ci, _vp, _vp, _ci, _ci, _ll, _vp, _ci, _ci, _ll,
                                    _vp, _vp, _ci, _ci, _ll, _ci, _ci, _ci], _ci),
}

# storage type -> (cudaDataType of A, B, C; compute type; alpha/beta's ctype): half storage
# accumulates in fp32 (CUBLAS_COMPUTE_32F) with fp32 alpha and beta, and rounds once on the store
_TYPES = {"float32": (CUDA_R_32F, COMPUTE_32F, ctypes.c_float),
          "float16": (CUDA_R_16F, COMPUTE_32F, ctypes.c_float),
          "bfloat16": (CUDA_R_16BF, COMPUTE_32F, ctypes.c_float),
          "float64": (CUDA_R_64F, COMPUTE_64F, ctypes.c_double)}


def supported(dtype) -> bool:
    return np.dtype(dtype).name in _TYPES


class Cublas:
    """A cuBLAS handle of our own (ctypes on libcublas), usable inside CUDA-graph capture."""

    def __init__(self, workspace_ptr: int, workspace_bytes: int):
        from einsat.gpu.kernels.libload import bind, load
        self.lib = lib = bind(load("cublas"), SIGNATURES)
        vp = ctypes.c_void_p
        self.handle = vp()
        self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self._workspace = (workspace_ptr, workspace_bytes)
        self._check(lib.cublasSetWorkspace_v2(self.handle, vp(workspace_ptr), workspace_bytes), "cublasSetWorkspace")
        self._check(lib.cublasSetMathMode(self.handle, 0), "cublasSetMathMode")
        self._stream = None

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise ExecutionError(f"{what} failed with cuBLAS status {status}")

    def version(self) -> int:
        v = ctypes.c_int()
        self._check(self.lib.cublasGetVersion_v2(self.handle, ctypes.byref(v)), "cublasGetVersion")
        return v.value

    def set_stream(self, stream_ptr: int) -> None:
        """Bind the handle to a stream. cublasSetStream resets the workspace to cuBLAS's own pool,
        so ours is set again (no allocation may happen while a CUDA graph is captured)."""
        if stream_ptr != self._stream:
            self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_ptr)), "cublasSetStream")
            ptr, size = self._workspace
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(ptr), size), "cublasSetWorkspace")
            self._stream = stream_ptr

    def gemm(self, call: GemmCall, ptrs: dict[str, int], c_ptr: int, dtype, alpha: float = 1.0,
             beta: float = 0.0, tf32: bool = False) -> None:
        """Run one planned call; `ptrs` maps "a"/"b" to base device pointers."""
        name = np.dtype(dtype).name
        if name not in _TYPES:
            raise ExecutionError(f"cuBLAS GEMM does not support {name}")
        dtype_id, compute, scale = _TYPES[name]
        if tf32 and compute == COMPUTE_32F and name == "float32":
            compute = COMPUTE_32F_FAST_TF32
        item = np.dtype(dtype).itemsize
        off = {"a": call.offsets[0], "b": call.offsets[1]}
        f, s = call.first, call.second
        al, be = scale(alpha), scale(beta)
        vp = ctypes.c_void_p
        self._check(self.lib.cublasGemmStridedBatchedEx(
            self.handle, f.trans, s.trans, call.m, call.n, call.k, ctypes.byref(al),
            vp(ptrs[f.source] + off[f.source] * item), dtype_id, f.ld, f.stride,
            vp(ptrs[s.source] + off[s.source] * item), dtype_id, s.ld, s.stride,
            ctypes.byref(be), vp(c_ptr + call.offsets[2] * item), dtype_id, call.ldc, call.stride_c,
            call.batch, compute, GEMM_DEFAULT), "cublasGemmStridedBatchedEx")
