"""GEMMs through cuBLASLt: the algorithm chosen by timing, and bias / activation epilogues.

A planned call (`cublas.GemmCall`, column-major, strided batched) becomes one `cublasLtMatmul`
(`LtProblem`: the matmul descriptor, the layouts of A, B and C = D, the epilogue, the operands'
alignments). Its algorithm is chosen the way cuDNN convolutions choose theirs
(`kernels/cudnn.py: Cudnn.choose`): the candidates are cuBLAS's default
(`cublasGemmStridedBatchedEx` with CUBLAS_GEMM_DEFAULT, einsat's only GEMM before) and the first
`HEURISTIC_CANDIDATES` algorithms of `cublasLtMatmulAlgoGetHeuristic`; each is timed as the
program will run it (the device's `time_ms`: captured in a CUDA graph on a compiled program's
stream), after a cheap screen; the fastest is kept per problem (`GemmChooser`), recorded with
every candidate's time (`GemmChooser.records`: the profiler writes them into the profile entry,
`"gemm"`, a record of what was measured). A program times its own choices when it first runs a
problem: a profile's recorded choices are not reused (they were taken on another run's clocks,
and nothing here could check one without a device).

Epilogues (`CUBLASLT_EPILOGUE_*`): D = act(alpha·op(A)·op(B) + beta·C + bias), the bias a
packed vector over D's rows, broadcast over its columns and batches. `fused_matmul`'s bias,
ReLU and residual (as C with beta = 1) run in the GEMM that way (`gpu/lower/fused.py`); its
sigmoid and tanh have no epilogue and keep the separate element-wise kernel. cuBLASLt's GELU
epilogue is the tanh approximation: registered here for a `gelu(approximate="tanh")`
activation, which the registry's fused ops do not have yet.

Precisions: fp32 (CUBLAS_COMPUTE_32F, strict; CUBLAS_COMPUTE_32F_FAST_TF32 when the device asks
for TF32), fp16 and bf16 storage with fp32 accumulation and fp32 alpha/beta
(CUBLAS_COMPUTE_32F), fp64.

Everything but `CublasLt`'s handle works without a device: the descriptors are checked against
the real `libcublasLt.so` on machines without a GPU (tests/gpu/test_cublaslt_abi.py).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels import cublas
from einsat.gpu.kernels.cublas import GemmCall

# cublasLtMatmulDescAttributes_t
DESC_COMPUTE_TYPE, DESC_SCALE_TYPE, DESC_TRANSA, DESC_TRANSB = 0, 1, 3, 4
DESC_EPILOGUE, DESC_BIAS_POINTER, DESC_BIAS_BATCH_STRIDE = 7, 8, 10
# cublasLtMatrixLayoutAttribute_t
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
# cublasLtMatmulPreferenceAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT_A, PREF_MIN_ALIGNMENT_B, PREF_MIN_ALIGNMENT_C, PREF_MIN_ALIGNMENT_D = 5, 6, 7, 8
# cublasLtEpilogue_t
EPILOGUE_DEFAULT, EPILOGUE_RELU, EPILOGUE_BIAS, EPILOGUE_RELU_BIAS = 1, 2, 4, 6
EPILOGUE_GELU, EPILOGUE_GELU_BIAS = 32, 36
STATUS_SUCCESS = 0

HEURISTIC_CANDIDATES = 8   # algorithms asked of cublasLtMatmulAlgoGetHeuristic per problem
MAX_ALIGNMENT = 256        # the alignment cuBLASLt assumes by default (bytes)
WORKSPACE_BYTES = 32 << 20
SCREEN_FACTOR = 3          # candidates screened slower than this times the fastest are not timed further
DEFAULT = "default"        # the candidate that is cublasGemmStridedBatchedEx with CUBLAS_GEMM_DEFAULT

# (bias?, activation) -> the epilogue that computes it in the GEMM; absent: no epilogue does
EPILOGUES = {(False, "none"): EPILOGUE_DEFAULT, (True, "none"): EPILOGUE_BIAS,
             (False, "relu"): EPILOGUE_RELU, (True, "relu"): EPILOGUE_RELU_BIAS,
             (False, "gelu_tanh"): EPILOGUE_GELU, (True, "gelu_tanh"): EPILOGUE_GELU_BIAS}
EPILOGUE_NAMES = {EPILOGUE_DEFAULT: "default", EPILOGUE_BIAS: "bias", EPILOGUE_RELU: "relu",
                  EPILOGUE_RELU_BIAS: "relu_bias", EPILOGUE_GELU: "gelu", EPILOGUE_GELU_BIAS: "gelu_bias"}

# numpy dtype name -> (cudaDataType of A, B, C, D; cublasComputeType_t; cudaDataType of alpha/beta; its ctype)
TYPES = {"float32": (cublas.CUDA_R_32F, cublas.COMPUTE_32F, cublas.CUDA_R_32F, ctypes.c_float),
         "float16": (cublas.CUDA_R_16F, cublas.COMPUTE_32F, cublas.CUDA_R_32F, ctypes.c_float),
         "bfloat16": (cublas.CUDA_R_16BF, cublas.COMPUTE_32F, cublas.CUDA_R_32F, ctypes.c_float),
         "float64": (cublas.CUDA_R_64F, cublas.COMPUTE_64F, cublas.CUDA_R_64F, ctypes.c_double)}


def supported(dtype) -> bool:
    return np.dtype(dtype).name in TYPES


class EpilogueUnsupported(ExecutionError):
    """No cuBLASLt algorithm runs a GEMM problem with its epilogue (raised before any work is
    enqueued: the caller runs the GEMM without it, then its own epilogue kernel)."""


def epilogue_of(bias: bool, activation: str) -> int | None:
    """The cuBLASLt epilogue computing `act(y + bias)` (or `act(y)`), or None when none does."""
    return EPILOGUES.get((bool(bias), activation))


@dataclass(frozen=True)
class GemmEpilogue:
    """What a GEMM does around its product: a bias over cuBLAS's rows of D (the row-major
    output's last axis; a packed device vector, or None), an activation (`EPILOGUES`' names),
    and `residual`, an array laid out as the output that is read as C (with the call's beta)
    instead of the output itself."""

    activation: str = "none"
    bias: Any = None
    residual: Any = None

    @property
    def kind(self) -> int:
        e = epilogue_of(self.bias is not None, self.activation)
        if e is None:
            raise ExecutionError(f"no cuBLASLt epilogue computes {self.activation} with"
                                 f"{'' if self.bias is not None else 'out'} a bias")
        return e


def alignment(address: int) -> int:
    """The largest power of two dividing `address`, at most MAX_ALIGNMENT (bytes)."""
    return MAX_ALIGNMENT if address % MAX_ALIGNMENT == 0 else address & -address


@dataclass(frozen=True)
class LtProblem:
    """One `cublasLtMatmul`: D (m x n, column-major) = epilogue(alpha·op(A)·op(B) + beta·C), C laid
    out as D (the same descriptor; C is D itself or another array of D's layout).

    A is stored `a_rows x a_cols` (m x k, or k x m when transposed), B `b_rows x b_cols`; each
    with its leading dimension and batch stride (0: the same matrix for every batch). `align`
    is the alignment (bytes) of A, B, C and D (the lesser), and the bias pointers: cuBLASLt
    assumes 256 unless the preference says less, and an algorithm that needs more would fault."""

    dtype: str
    compute: int
    trans_a: int
    trans_b: int
    m: int
    n: int
    k: int
    a_rows: int
    a_cols: int
    lda: int
    stride_a: int
    b_rows: int
    b_cols: int
    ldb: int
    stride_b: int
    ldc: int
    stride_c: int
    batch: int
    epilogue: int = EPILOGUE_DEFAULT
    align: tuple[int, int, int, int] = (MAX_ALIGNMENT,) * 4
    separate_c: bool = False  # C is another array than D (cuBLAS's default GEMM cannot run it)

    @property
    def key(self) -> str:
        """A readable, complete key (the profile stores choices under it)."""
        t = "NT"
        return (f"lt|{self.dtype}|c{self.compute}|{t[self.trans_a]}{t[self.trans_b]}|m{self.m}n{self.n}k{self.k}"
                f"|a{self.a_rows}x{self.a_cols}/{self.lda}/{self.stride_a}|b{self.b_rows}x{self.b_cols}/{self.ldb}"
                f"/{self.stride_b}|c{self.ldc}/{self.stride_c}|batch{self.batch}"
                f"|{EPILOGUE_NAMES.get(self.epilogue, self.epilogue)}{'|c!=d' if self.separate_c else ''}"
                f"|align{','.join(map(str, self.align))}")


def problem(call: GemmCall, dtype, tf32: bool = False, epilogue: int = EPILOGUE_DEFAULT,
            align: tuple[int, int, int, int] = (MAX_ALIGNMENT,) * 4, separate_c: bool = False) -> LtProblem:
    """The cuBLASLt problem of one planned call (`cublas.plan_gemm`)."""
    name = np.dtype(dtype).name
    if name not in TYPES:
        raise ExecutionError(f"cuBLASLt GEMMs do not take {name}")
    compute = TYPES[name][1]
    if tf32 and name == "float32":
        compute = cublas.COMPUTE_32F_FAST_TF32
    f, s = call.first, call.second
    a_rows, a_cols = (call.m, call.k) if f.trans == 0 else (call.k, call.m)
    b_rows, b_cols = (call.k, call.n) if s.trans == 0 else (call.n, call.k)
    return LtProblem(name, compute, f.trans, s.trans, call.m, call.n, call.k, a_rows, a_cols, f.ld, f.stride,
                     b_rows, b_cols, s.ld, s.stride, call.ldc, call.stride_c, call.batch, epilogue, tuple(align),
                     separate_c)


# -- the ctypes binding --------------------------------------------------------------------

_vp, _ci, _sz, _u64, _i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int64
_pvp = ctypes.POINTER(_vp)


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 8 opaque 64-bit words (stored in the profile as hex)."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]

    def hex(self) -> str:
        return bytes(self).hex()

    @staticmethod
    def from_hex(text: str) -> "Algo":
        raw = bytes.fromhex(text)
        if len(raw) != ctypes.sizeof(Algo):
            raise ExecutionError(f"a cuBLASLt algorithm is {ctypes.sizeof(Algo)} bytes, the profile holds {len(raw)}")
        return Algo.from_buffer_copy(raw)


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [("algo", Algo), ("workspaceSize", _sz), ("state", _ci), ("wavesCount", ctypes.c_float),
                ("reserved", _ci * 4)]


_palgo, _pres = ctypes.POINTER(Algo), ctypes.POINTER(HeuristicResult)

# Every cuBLASLt function einsat calls: (argument types, return type); tests/gpu/test_cublaslt_abi.py
# compares them with the wheel's cublasLt.h.
SIGNATURES = {
    "cublasLtCreate": ([_pvp], _ci), "cublasLtDestroy": ([_vp], _ci), "cublasLtGetVersion": ([], _sz),
    "cublasLtGetStatusString": ([_ci], ctypes.c_char_p),
    "cublasLtMatmulDescCreate": ([_pvp, _ci, _ci], _ci), "cublasLtMatmulDescDestroy": ([_vp], _ci),
    "cublasLtMatmulDescSetAttribute": ([_vp, _ci, _vp, _sz], _ci),
    "cublasLtMatmulDescGetAttribute": ([_vp, _ci, _vp, _sz, ctypes.POINTER(_sz)], _ci),
    "cublasLtMatrixLayoutCreate": ([_pvp, _ci, _u64, _u64, _i64], _ci), "cublasLtMatrixLayoutDestroy": ([_vp], _ci),
    "cublasLtMatrixLayoutSetAttribute": ([_vp, _ci, _vp, _sz], _ci),
    "cublasLtMatrixLayoutGetAttribute": ([_vp, _ci, _vp, _sz, ctypes.POINTER(_sz)], _ci),
    "cublasLtMatmulPreferenceCreate": ([_pvp], _ci), "cublasLtMatmulPreferenceDestroy": ([_vp], _ci),
    "cublasLtMatmulPreferenceSetAttribute": ([_vp, _ci, _vp, _sz], _ci),
    "cublasLtMatmulAlgoGetHeuristic": ([_vp, _vp, _vp, _vp, _vp, _vp, _vp, _ci, _pres, ctypes.POINTER(_ci)], _ci),
    "cublasLtMatmul": ([_vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _palgo, _vp, _sz, _vp], _ci),
}


@dataclass
class LtDescriptors:
    """The descriptors of one problem (C and D share one layout)."""

    matmul: ctypes.c_void_p
    a: ctypes.c_void_p
    b: ctypes.c_void_p
    c: ctypes.c_void_p
    preference: ctypes.c_void_p


class CublasLt:
    """A cuBLASLt handle and descriptors cached per problem.

    `CublasLt(with_handle=False)` makes descriptors only: that needs no device, so they are
    checked against the real library on machines without a GPU."""

    def __init__(self, with_handle: bool = True, workspace_bytes: int = WORKSPACE_BYTES):
        from einsat.gpu.kernels.libload import bind, load
        self.lib = bind(load("cublasLt"), SIGNATURES)
        self.handle = ctypes.c_void_p()
        if with_handle:
            self._check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.workspace_bytes = workspace_bytes
        self._desc: dict[LtProblem, LtDescriptors] = {}

    def _check(self, status: int, what: str) -> None:
        if status != STATUS_SUCCESS:
            msg = self.lib.cublasLtGetStatusString(status)
            raise ExecutionError(f"{what} failed: cuBLAS status {status} ({msg.decode() if msg else '?'})")

    def version(self) -> int:
        return int(self.lib.cublasLtGetVersion())

    def _set(self, setter, desc, attr: int, value: ctypes._SimpleCData, what: str) -> None:
        self._check(setter(desc, attr, ctypes.byref(value), ctypes.sizeof(value)), f"{what} attribute {attr}")

    def _layout(self, dt: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> ctypes.c_void_p:
        lay = ctypes.c_void_p()
        self._check(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), dt, rows, cols, ld),
                    f"cublasLtMatrixLayoutCreate {rows}x{cols} ld {ld}")
        if batch > 1:
            setter = self.lib.cublasLtMatrixLayoutSetAttribute
            self._set(setter, lay, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch), "cublasLtMatrixLayoutSetAttribute")
            self._set(setter, lay, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(stride),
                      "cublasLtMatrixLayoutSetAttribute")
        return lay

    def descriptors(self, p: LtProblem) -> LtDescriptors:
        """The descriptors of `p`, made once (the bias pointer is set per call: `set_bias`)."""
        hit = self._desc.get(p)
        if hit is not None:
            return hit
        dt, _, scale, _ = TYPES[p.dtype]
        lib = self.lib
        md = ctypes.c_void_p()
        self._check(lib.cublasLtMatmulDescCreate(ctypes.byref(md), p.compute, scale), "cublasLtMatmulDescCreate")
        setter = lib.cublasLtMatmulDescSetAttribute
        self._set(setter, md, DESC_TRANSA, ctypes.c_int32(p.trans_a), "cublasLtMatmulDescSetAttribute")
        self._set(setter, md, DESC_TRANSB, ctypes.c_int32(p.trans_b), "cublasLtMatmulDescSetAttribute")
        self._set(setter, md, DESC_EPILOGUE, ctypes.c_uint32(p.epilogue), "cublasLtMatmulDescSetAttribute")
        a = self._layout(dt, p.a_rows, p.a_cols, p.lda, p.batch, p.stride_a)
        b = self._layout(dt, p.b_rows, p.b_cols, p.ldb, p.batch, p.stride_b)
        c = self._layout(dt, p.m, p.n, p.ldc, p.batch, p.stride_c)
        pref = ctypes.c_void_p()
        self._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        psetter = lib.cublasLtMatmulPreferenceSetAttribute
        self._set(psetter, pref, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(self.workspace_bytes),
                  "cublasLtMatmulPreferenceSetAttribute")
        for attr, al in zip((PREF_MIN_ALIGNMENT_A, PREF_MIN_ALIGNMENT_B, PREF_MIN_ALIGNMENT_C, PREF_MIN_ALIGNMENT_D),
                            (p.align[0], p.align[1], p.align[2], p.align[2])):
            self._set(psetter, pref, attr, ctypes.c_uint32(al), "cublasLtMatmulPreferenceSetAttribute")
        self._desc[p] = LtDescriptors(md, a, b, c, pref)
        return self._desc[p]

    def set_bias(self, p: LtProblem, bias_ptr: int) -> None:
        """Point the problem's matmul descriptor at a bias vector (0: none)."""
        d = self.descriptors(p)
        self._set(self.lib.cublasLtMatmulDescSetAttribute, d.matmul, DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr),
                  "cublasLtMatmulDescSetAttribute")

    def heuristics(self, p: LtProblem, count: int = HEURISTIC_CANDIDATES) -> list[HeuristicResult]:
        """cuBLASLt's candidate algorithms for `p`, best estimate first (only those it says run)."""
        d = self.descriptors(p)
        results = (HeuristicResult * count)()
        n = ctypes.c_int(0)
        st = self.lib.cublasLtMatmulAlgoGetHeuristic(self.handle, d.matmul, d.a, d.b, d.c, d.c, d.preference, count,
                                                     results, ctypes.byref(n))
        if st != STATUS_SUCCESS:
            return []
        return [results[i] for i in range(n.value) if results[i].state == STATUS_SUCCESS]

    def matmul(self, p: LtProblem, algo: Algo, a_ptr: int, b_ptr: int, c_ptr: int, d_ptr: int, alpha: float,
               beta: float, ws_ptr: int, ws_bytes: int, stream_ptr: int, bias_ptr: int = 0) -> int:
        """Enqueue one cublasLtMatmul (C and D of one layout, C = D in place or not); returns
        cuBLAS's status."""
        d = self.descriptors(p)
        if p.epilogue & EPILOGUE_BIAS:
            self.set_bias(p, bias_ptr)
        scale = TYPES[p.dtype][3]
        al, be = scale(alpha), scale(beta)
        vp = ctypes.c_void_p
        return self.lib.cublasLtMatmul(self.handle, d.matmul, ctypes.byref(al), vp(a_ptr), d.a, vp(b_ptr), d.b,
                                       ctypes.byref(be), vp(c_ptr), d.c, vp(d_ptr), d.c, ctypes.byref(algo),
                                       vp(ws_ptr), ws_bytes, vp(stream_ptr))


# -- choosing: candidates timed as the program runs them, the choice kept ---------------------------

@dataclass
class GemmChoice:
    """The algorithm a problem runs: `DEFAULT` (cuBLAS's GEMM), or a cuBLASLt algorithm (`config`:
    its cublasLtMatmulAlgo_t as hex) with its workspace bytes."""

    name: str
    config: str = ""
    workspace_bytes: int = 0

    @property
    def algo(self) -> Algo | None:
        return Algo.from_hex(self.config) if self.config else None


@dataclass
class GemmChooser:
    """Per-problem algorithm choices, each timed once (`choose`).

    `records` lists each choice made here, with every candidate's time (ms) or why it was left
    out: what the profiler writes into a profile entry under "gemm"."""

    choices: dict[str, GemmChoice] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)  # epilogue problems no algorithm runs, and why

    def choose(self, key: str, candidates: dict[str, tuple[GemmChoice, Callable[[], None]]],
               time_ms: Callable[[Callable[[], None]], float],
               screen_ms: Callable[[Callable[[], None]], float] | None = None,
               excluded: dict[str, str] | None = None, timer: str = "") -> GemmChoice:
        """The fastest of `candidates` ({name: (choice, run)}) by `time_ms`, cached under `key`.

        With `screen_ms` (a few calls), candidates slower than SCREEN_FACTOR times the fastest
        are left out before the full timing, as for cuDNN's algorithms. A candidate that raises
        is left out with its error; `excluded` names those left out before timing and why."""
        hit = self.choices.get(key)
        if hit is not None:
            return hit
        times: dict[str, Any] = dict(excluded or {})
        runnable = dict(candidates)
        if screen_ms is not None and len(runnable) > 1:
            screened = {}
            for name, (_, run) in list(runnable.items()):
                try:
                    screened[name] = screen_ms(run)
                except Exception as e:  # noqa: BLE001 - a candidate that fails is left out, not fatal
                    times[name] = f"{type(e).__name__}: {e}"
                    del runnable[name]
            if screened:
                fastest = min(screened.values())
                for name, t in screened.items():
                    if t > SCREEN_FACTOR * fastest:
                        times[name] = f"screened out: {t:.4g} ms, over {SCREEN_FACTOR}x the fastest"
                        del runnable[name]
        timed = {}
        for name, (_, run) in runnable.items():
            try:
                timed[name] = times[name] = float(time_ms(run))
            except Exception as e:  # noqa: BLE001
                times[name] = f"{type(e).__name__}: {e}"
        if not timed:
            raise ExecutionError(f"no GEMM algorithm runs {key}: {times}")
        best = min(timed, key=timed.get)
        choice = candidates[best][0]
        self.choices[key] = choice
        self.records.append({"key": key, "algo": choice.name, "config": choice.config,
                             "workspace_bytes": choice.workspace_bytes, "candidates_ms": times,
                             **({"timer": timer} if timer else {})})
        return choice


def candidate_name(index: int) -> str:
    """The name of cuBLASLt's `index`-th heuristic candidate in choice records."""
    return f"lt{index}"


def gemm_candidates(lt: CublasLt, p: LtProblem, run_lt: Callable[[GemmChoice], Callable[[], None]],
                    run_default: Callable[[], None] | None,
                    count: int = HEURISTIC_CANDIDATES) -> tuple[dict, dict[str, str]]:
    """({name: (choice, run)}, {name: why left out}): cuBLAS's default (when `run_default` is
    given: it cannot run an epilogue) and cuBLASLt's heuristic candidates within its workspace."""
    cands: dict[str, tuple[GemmChoice, Callable[[], None]]] = {}
    excluded: dict[str, str] = {}
    if run_default is not None:
        cands[DEFAULT] = (GemmChoice(DEFAULT), run_default)
    for i, r in enumerate(lt.heuristics(p, count)):
        if r.workspaceSize > lt.workspace_bytes:
            excluded[candidate_name(i)] = f"needs {r.workspaceSize} workspace bytes"
            continue
        choice = GemmChoice(candidate_name(i), r.algo.hex(), int(r.workspaceSize))
        cands[candidate_name(i)] = (choice, run_lt(choice))
    return cands, excluded


def _address(array) -> int:
    """The device address of an array's first element: CuPy's, or NumPy's in the host emulation
    (`device.pointer`, which this module cannot import: the device imports it)."""
    if isinstance(array, np.ndarray):
        return int(array.ctypes.data)
    return int(array.data.ptr)


def run_gemm(dev, call: GemmCall, a, b, c, alpha: float = 1.0, beta: float = 0.0,
             epilogue: GemmEpilogue | None = None, timer: str = "") -> GemmChoice:
    """Enqueue one planned call on `dev` (`CupyDevice`, or a test's emulation of it) with the
    algorithm chosen for its problem, choosing it first if it has none; returns the choice.

    `dev` provides `cublaslt` (a `CublasLt`), `cublaslt_workspace` (a device pointer of
    `cublaslt.workspace_bytes`), `cublas` (`cublas.Cublas`), `stream_ptr`, `tf32`,
    `gemm_chooser` (a `GemmChooser`), `time_ms` and `screen_ms`. While candidates are timed
    they write D; with beta != 0 and D read as C, D is saved first and restored after. A problem
    with an epilogue (or a separate C) that no cuBLASLt algorithm runs raises
    `EpilogueUnsupported` before enqueuing anything, every time it is met."""
    pointer = _address
    item = np.dtype(c.dtype).itemsize
    base = {"a": pointer(a), "b": pointer(b)}
    off = {"a": call.offsets[0], "b": call.offsets[1]}
    first = base[call.first.source] + off[call.first.source] * item
    second = base[call.second.source] + off[call.second.source] * item
    c_ptr = pointer(c) + call.offsets[2] * item
    bias = epilogue.bias if epilogue is not None else None
    residual = epilogue.residual if epilogue is not None else None
    bias_ptr = pointer(bias) if bias is not None else 0
    c_in = pointer(residual) + call.offsets[2] * item if residual is not None else c_ptr
    kind = epilogue.kind if epilogue is not None else EPILOGUE_DEFAULT
    align = (alignment(first), alignment(second), min(alignment(c_ptr), alignment(c_in)), alignment(bias_ptr))
    plain = kind == EPILOGUE_DEFAULT and residual is None  # what cuBLAS's default GEMM can run too
    p = problem(call, c.dtype, dev.tf32, kind, align, separate_c=residual is not None)
    stream = dev.stream_ptr

    def run_default() -> None:
        h = dev.cublas
        h.set_stream(stream)
        h.gemm(call, base, pointer(c), c.dtype, alpha, beta, dev.tf32)

    try:
        lt = dev.cublaslt
    except ExecutionError:
        if not plain:
            raise
        run_default()  # no cuBLASLt: cuBLAS's default is the only candidate
        return GemmChoice(DEFAULT)

    def run_lt(choice: GemmChoice) -> Callable[[], None]:
        algo = choice.algo

        def run() -> None:
            lt._check(lt.matmul(p, algo, first, second, c_in, c_ptr, alpha, beta, dev.cublaslt_workspace,
                                choice.workspace_bytes, stream, bias_ptr), f"cublasLtMatmul {p.key}")
        return run

    chooser: GemmChooser = dev.gemm_chooser
    key = p.key
    if kind & EPILOGUE_BIAS:  # the heuristic and the check read the bias pointer's alignment
        lt.set_bias(p, bias_ptr)
    if key in chooser.unsupported:
        raise EpilogueUnsupported(chooser.unsupported[key])
    choice = chooser.choices.get(key)
    if choice is None:
        cands, excluded = gemm_candidates(lt, p, run_lt, run_default if plain else None)
        if not cands and not plain:
            chooser.unsupported[key] = f"no cuBLASLt algorithm runs {key}: {excluded or 'the heuristic has none'}"
            raise EpilogueUnsupported(chooser.unsupported[key])
        saved = c.copy() if beta != 0.0 and residual is None else None
        try:
            choice = chooser.choose(key, cands, dev.time_ms, getattr(dev, "screen_ms", None), excluded, timer)
        except ExecutionError as e:
            if plain:
                raise
            chooser.unsupported[key] = str(e)
            raise EpilogueUnsupported(str(e)) from e
        finally:
            if saved is not None:
                c[...] = saved
    if choice.name == DEFAULT:
        run_default()
    else:
        run_lt(choice)()
    return choice
