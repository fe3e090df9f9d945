"""The device interface the GPU lowering is written against, and its CuPy implementation.

Op implementations (`einsat.gpu.lower`) never call CuPy directly: they allocate with
`dev.empty`, launch generated kernels with `dev.launch`, and call `dev.gemm` / `dev.conv`.
Arrays are NumPy-like (shape, dtype, strides in bytes, views by slicing/transposing).
`ArrayDevice` holds what needs only an array module (allocation, uploads, downloads, copies);
`CupyDevice` is it over CuPy, and the tests' host emulation is it over NumPy, so both run the
same array handling. Allocation goes through `dev.allocator`, which `CompiledProgram` swaps to trace
and then to replay a static memory plan.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Protocol

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import Kernel


class Allocator(Protocol):
    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> Any: ...


class Device(Protocol):
    """What the lowering needs from a device."""

    name: str
    xp: Any          # the array module (cupy, or numpy in host emulation)
    tf32: bool

    def empty(self, shape, dtype) -> Any: ...
    def upload(self, array: np.ndarray) -> Any: ...
    def download(self, array) -> np.ndarray: ...
    def launch(self, kernel: Kernel, args: list) -> None: ...
    def fill(self, array, value: float) -> None: ...
    def gemm(self, call, a, b, c, alpha: float, beta: float, epilogue=None) -> None: ...
    def conv(self, plan, x, w, y) -> None: ...


def nvrtc_options(kernel: Kernel) -> tuple[str, ...]:
    """The options einsat gives CuPy's RawKernel for a generated kernel (CuPy adds its own)."""
    options = ("--std=c++17",)
    if "cuda_fp16.h" in kernel.source:  # NVRTC finds no CUDA headers by itself
        from einsat.gpu.kernels.libload import cuda_include_dirs
        options += tuple(f"-I{d}" for d in cuda_include_dirs()[:1])
    return options


MIN_WORKSPACE = 1 << 20
CHOICE_WARMUP, CHOICE_REPS = 3, 10  # timing each cuDNN algorithm candidate once per signature
CHOICE_COPIES = 5  # calls per captured graph when a candidate is timed as a program runs it (timing.graph_times)
SCREEN_REPS = 3  # calls per candidate in the first, cheap screen (Cudnn.choose's screen_ms)
# how the recorded choices were timed: a profile entry whose choices say otherwise is measured again
CHOICE_TIMER = f"screen {SCREEN_REPS} calls, then {CHOICE_COPIES} calls in a CUDA graph"


def pointer(array) -> int:
    """The address of an array's first element (CuPy's or NumPy's)."""
    if isinstance(array, np.ndarray):  # (a NumPy bfloat16 array's .data raises: no buffer format)
        return int(array.ctypes.data)
    data = getattr(array, "data", None)
    return int(data.ptr) if hasattr(data, "ptr") else int(array.ctypes.data)


def host_array(array) -> np.ndarray:
    """`array` as a C-contiguous NumPy array of the same shape. (`np.ascontiguousarray` is not
    this: it returns at least one dimension, and a device copy refuses the shape change.)"""
    return np.asarray(array, order="C")


class ArrayDevice:
    """Everything a device does with arrays alone, over an array module `xp`.

    Allocation (through `allocator`), uploads, constants, downloads and copies into existing
    buffers are written once, here: `CupyDevice` is this over CuPy, and the tests' host
    emulation is this over NumPy, so a shape or layout slip in this code shows on the host.
    Subclasses supply only the raw copies (`_copy_in`, `_copy_out`) and `_on_device`.
    """

    name = "array"

    def __init__(self, xp, tf32: bool = False):
        self.xp = xp
        self.tf32 = tf32
        self._constants: dict[int, tuple[Any, Any]] = {}
        self._workspace = None
        self.allocator: Allocator = self._alloc
        self.launches = 0    # kernels, GEMMs and convolutions issued (the profiler counts them)
        self.downloads = 0   # device-to-host reads (a program with any cannot be captured)

    # -- the raw copies (NumPy here; CuPy overrides them) ----------------------------------------
    def _copy_in(self, buf, host: np.ndarray) -> None:
        np.copyto(buf, host)

    def _copy_out(self, array) -> np.ndarray:
        return np.array(array, copy=True)

    def _on_device(self, array) -> bool:
        """Whether `array` already lives on this device (the host emulation's arrays never count)."""
        return False

    # -- memory ---------------------------------------------------------------------------
    def _alloc(self, shape, dtype):
        return self.xp.empty(tuple(shape), dtype=dtype)

    def empty(self, shape, dtype):
        return self.allocator(tuple(int(d) for d in shape), np.dtype(dtype))

    def copy_in(self, buf, array) -> None:
        """Copy `array` (host, or this device's) into the device buffer `buf`, on the current stream."""
        if self._on_device(array):
            buf[...] = array
            return
        host = host_array(array)
        if host.shape != tuple(buf.shape) or host.dtype != buf.dtype:
            raise ExecutionError(f"cannot copy a {list(host.shape)} {host.dtype} array into a device buffer "
                                 f"{list(buf.shape)} {np.dtype(buf.dtype)}")
        self._copy_in(buf, host)

    def upload(self, array: np.ndarray):
        """A fresh device copy of a host array, same shape and dtype (0-d stays 0-d)."""
        host = np.asarray(array)
        buf = self.xp.empty(host.shape, dtype=host.dtype)
        self.copy_in(buf, host)
        return buf

    def constant(self, array: np.ndarray):
        """An uploaded copy of a constant, cached for the array's lifetime."""
        hit = self._constants.get(id(array))
        if hit is None or hit[0] is not array:
            hit = (array, self.upload(array))
            self._constants[id(array)] = hit
            self.synchronize()  # the cache serves every stream: the copy must have landed
        return hit[1]

    def workspace(self, nbytes: int) -> int:
        """A device pointer to at least `nbytes` of scratch memory (cuDNN's).

        One buffer: a larger request replaces it, and the replaced one is freed unless someone
        holds it (a captured program holds the buffer its graph points into:
        `workspace_buffer()`)."""
        if self._workspace is None or self._workspace.nbytes < nbytes:
            self._workspace = None  # freed before the larger one is allocated
            self._workspace = self.xp.empty(max(nbytes, MIN_WORKSPACE), dtype=np.uint8)
        return pointer(self._workspace)

    def workspace_buffer(self):
        """The current workspace buffer (None before the first request)."""
        return self._workspace

    def zeros(self, shape, dtype):
        """A fresh zero-filled device array (not from `allocator`), filled on the current stream."""
        buf = self.xp.empty(tuple(shape), dtype=dtype)
        self.fill(buf, 0)
        return buf

    def download(self, array) -> np.ndarray:
        self.downloads += 1
        return self._copy_out(array)

    def fill(self, array, value: float) -> None:
        array.fill(value)

    def synchronize(self) -> None:
        """Wait for the current stream (nothing to wait for on the host)."""

    @staticmethod
    def conv_strides(x) -> tuple[int, ...]:
        """x's strides in elements, as cuDNN's tensor descriptor takes them."""
        return tuple(s // x.dtype.itemsize for s in x.strides)


NO_GPU = ("this machine has no NVIDIA GPU (no CUDA driver: libcuda.so.1 does not load); the cupy backend, "
          "`einsat profile` and `einsat check` run on one. Here, `einsat optimize --cost cpu` optimizes for this "
          "machine's CPU, measured on onnxruntime")


def cuda_driver_present() -> bool:
    """Whether the NVIDIA driver's user-space library loads: without it there is no GPU to ask
    for, and installing CuPy would not help."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


class CupyDevice(ArrayDevice):
    """The current CUDA device through CuPy, cuBLAS (ctypes) and cuDNN (ctypes)."""

    name = "cupy"
    gemm_epilogues = True  # `gemm` runs cuBLASLt's bias / activation epilogues (gpu/lower/fused.py)

    def __init__(self, tf32: bool = False):
        if not cuda_driver_present():
            raise ExecutionError(NO_GPU)
        try:
            import cupy
        except ImportError as e:
            raise ExecutionError("the cupy backend needs CuPy (pip install 'einsat[gpu]')") from e
        super().__init__(cupy, tf32)
        self.cp = cupy
        try:
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        except Exception as e:  # CuPy's CUDARuntimeError: no driver, or no device
            raise ExecutionError(f"the cupy backend needs a CUDA device, and CuPy finds none "
                                 f"({type(e).__name__}: {e})") from e
        self.properties = props
        self.sm_count = int(props["multiProcessorCount"])
        self._modules: dict[str, Any] = {}
        self._cublas = None
        self._cublaslt = None
        self._cudnn = None
        self._sdpa = None  # cuDNN's fused attention (the frontend's graphs), made on first use
        self.conv_choices: list[dict] = []  # every cuDNN algorithm choice, in order (the profiler reads them)
        self.capture_failures: list[str] = []  # candidates `time_ms` could not time in a graph, and why
        from einsat.gpu.kernels.cublaslt import GemmChooser
        self.gemm_chooser = GemmChooser()  # each GEMM problem's algorithm (kernels/cublaslt.py)

    @property
    def gemm_choices(self) -> list[dict]:
        """Every GEMM algorithm choice timed here, in order (the profiler reads them)."""
        return self.gemm_chooser.records

    def _copy_in(self, buf, host: np.ndarray) -> None:
        buf.set(host, stream=self.cp.cuda.get_current_stream())

    def _copy_out(self, array) -> np.ndarray:
        return self.cp.asnumpy(array)

    def _on_device(self, array) -> bool:
        return isinstance(array, self.cp.ndarray)

    def new_stream(self):
        """A stream of its own for a compiled program (non-blocking: the legacy stream cannot capture)."""
        return self.cp.cuda.Stream(non_blocking=True)

    @property
    def stream_ptr(self) -> int:
        return self.cp.cuda.get_current_stream().ptr

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    # -- kernels ----------------------------------------------------------------------------
    def compile(self, kernel: Kernel):
        mod = self._modules.get(kernel.name)
        if mod is None:
            mod = self.cp.RawKernel(kernel.source, kernel.name, options=nvrtc_options(kernel))
            mod.compile()
            self._modules[kernel.name] = mod
        return mod

    def launch(self, kernel: Kernel, args: list) -> None:
        if kernel.work <= 0:
            return
        fn = self.compile(kernel)
        self.launches += 1
        limit = self.sm_count * 32 if not kernel.per_block else 1 << 20
        fn((kernel.grid(limit),), (kernel.block,), tuple(args))

    # -- libraries ----------------------------------------------------------------------------
    @property
    def cublas(self):
        if self._cublas is None:
            from einsat.gpu.kernels.cublas import WORKSPACE_BYTES, Cublas
            self._cublas_workspace = self.cp.empty(WORKSPACE_BYTES, dtype=np.uint8)  # cuBLAS's, for good
            self._cublas = Cublas(self._cublas_workspace.data.ptr, WORKSPACE_BYTES)
        return self._cublas

    @property
    def cublaslt(self):
        if self._cublaslt is None:
            from einsat.gpu.kernels.cublaslt import WORKSPACE_BYTES, CublasLt
            self._cublaslt_workspace = self.cp.empty(WORKSPACE_BYTES, dtype=np.uint8)  # cuBLASLt's, for good
            self._cublaslt = CublasLt(workspace_bytes=WORKSPACE_BYTES)
        return self._cublaslt

    @property
    def cublaslt_workspace(self) -> int:
        return self._cublaslt_workspace.data.ptr

    @property
    def cudnn(self):
        if self._cudnn is None:
            from einsat.gpu.kernels.cudnn import Cudnn
            self._cudnn = Cudnn()
        return self._cudnn

    def gemm(self, call, a, b, c, alpha: float = 1.0, beta: float = 0.0, epilogue=None) -> None:
        """One planned GEMM (`cublas.GemmCall`), with a bias / activation `epilogue`
        (`cublaslt.GemmEpilogue`) or none, by the algorithm chosen for its problem: cuBLAS's default
        or one of cuBLASLt's heuristic candidates, timed as `conv` times cuDNN's (`cublaslt.run_gemm`)."""
        from einsat.gpu.kernels.cublaslt import run_gemm
        self.launches += 1
        run_gemm(self, call, a, b, c, alpha, beta, epilogue, timer=CHOICE_TIMER)

    def conv(self, plan, x, w, y) -> None:
        h = self.cudnn
        self.launches += 1
        h.set_stream(self.stream_ptr)
        xs = self.conv_strides(x)
        known = len(h.choices)
        algo, size = h.choose(plan, xs, x.dtype, self.tf32, self.workspace, self.time_ms,
                              x.data.ptr, w.data.ptr, y.data.ptr, screen_ms=self.screen_ms)
        if len(h.choices) > known:  # a new signature: its choice goes into the profile
            self.conv_choices.append({**list(h.choices.values())[-1], "timer": CHOICE_TIMER})
        h.convolve(plan, xs, x.dtype, self.tf32, algo, self.workspace(size), size, x.data.ptr, w.data.ptr,
                   y.data.ptr)

    def sdpa_ready(self, plan) -> bool:
        """Whether cuDNN's fused attention runs `plan` (`kernels.cudnn_sdpa`), its graph built
        once: False where the frontend is not installed or no engine takes the plan (the
        caller falls back)."""
        if self._sdpa is None:
            try:
                from einsat.gpu.kernels.cudnn_sdpa import SdpaGraphs
                self._sdpa = SdpaGraphs()
            except Exception as e:  # no nvidia-cudnn-frontend, or it cannot make a handle
                self._sdpa = f"{type(e).__name__}: {e}"
        return not isinstance(self._sdpa, str) and self._sdpa.prepare(plan)

    def sdpa(self, plan, q, k, v, mask, out) -> None:
        """Run cuDNN's fused attention for a plan `sdpa_ready` accepted."""
        ptrs = {"q": q.data.ptr, "k": k.data.ptr, "v": v.data.ptr, "o": out.data.ptr}
        if mask is not None:
            ptrs["mask"] = mask.data.ptr
        size = self._sdpa.workspace_bytes(plan)
        self.launches += 1
        self._sdpa.execute(plan, ptrs, self.workspace(size) if size else 0, self.stream_ptr)

    # -- timing -------------------------------------------------------------------------------
    def screen_ms(self, fn: Callable[[], None]) -> float:
        """A first, cheap time of `fn`: the median of SCREEN_REPS calls after one, between events."""
        from einsat.gpu.timing import event_times
        return statistics.median(event_times(self.cp, fn, SCREEN_REPS, 1))

    def time_ms(self, fn: Callable[[], None], reps: int = CHOICE_REPS, warmup: int = CHOICE_WARMUP) -> float:
        """Median device time of `fn` over `reps` runs (einsat.gpu.timing), as the work it stands
        for will run: on a stream that can capture (a compiled program's, which replays as a
        CUDA graph) captured in a graph of `CHOICE_COPIES` calls (`graph_times`); on the legacy
        stream (the interpreter loop), or where the capture fails, one call after another
        between events (`event_times`). Timed one call at a time, a multi-kernel cuDNN algorithm
        carries its host launch gaps: on an H100, Winograd for a 512-channel 3×3 convolution on
        7×7 measured 0.16 ms against 0.12 ms for the implicit GEMM, and 0.067 ms against 0.11
        inside a program's graph."""
        from einsat.gpu.timing import event_times, graph_times
        stream = self.cp.cuda.get_current_stream()
        if stream.ptr:
            try:
                return statistics.median(graph_times(self.cp, fn, reps, warmup, stream, CHOICE_COPIES))
            except Exception as e:  # cuDNN's legacy API under capture is undocumented
                self.capture_failures.append(f"{type(e).__name__}: {e}")
        return statistics.median(event_times(self.cp, fn, reps, warmup))
