"""A host emulation of `einsat.gpu.device.Device`, for testing the GPU lowering without a GPU.

Generated kernels are compiled by the host C++ compiler with `EINSAT_HOST` defined (one block
of one thread at a time, see the prelude of `einsat.gpu.kernels.codegen`) into one shared
library per batch and called through ctypes. cuBLAS calls are emulated from their column-major
definition (so the GEMM planner is checked against it, not against NumPy's matmul), and cuDNN
calls from theirs (symmetric padding; backward data as a scatter of each input pixel).

Kernels are compiled in batches: run every case once with `dry=True` (launches are recorded,
nothing computes), compile all recorded kernels at once, then run for real.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from itertools import product

import numpy as np

from einsat.gpu.device import ArrayDevice
from einsat.gpu.kernels.codegen import Kernel
from tests.gpu.host_streams import Streams

CXX = os.environ.get("CXX", "g++")


SERIAL_LAUNCH = """extern "C" int launch_{name}(long long grid, void** args) {{
    blockDim.x = 1; gridDim.x = (unsigned int)grid; threadIdx.x = 0;
    for (long long b = 0; b < grid; ++b) {{ blockIdx.x = (unsigned int)b; {name}({casts}); }}
    return 0;
}}
"""
# a block of `block` real threads at a time, with the barriers of the block and of its warps
THREADED_LAUNCH = """extern "C" int launch_{name}(long long grid, void** args) {{
    blockDim.x = {block}; gridDim.x = (unsigned int)grid; einsat_deadlock = 0;
    einsat_block_barrier.n = {block};
    for (int w = 0; w < 32; ++w) einsat_warp_barrier[w].n = 32;
    for (long long b = 0; b < grid; ++b) {{
        blockIdx.x = (unsigned int)b;
        std::vector<std::thread> threads;
        for (unsigned int t = 0; t < {block}; ++t)
            threads.emplace_back([=] {{ threadIdx.x = t; {name}({casts}); }});
        for (auto& th : threads) th.join();
    }}
    return einsat_deadlock;
}}
"""
THREADED_GRID = 3  # blocks per launch with real threads: any grid is correct, three make blocks stride


class KernelLibrary:
    """Kernels compiled for the host, one shared library per `build` call. `threads=True` runs
    each block as `block` real threads with real barriers (EINSAT_HOST_THREADS in the prelude),
    so warp shuffles, block reductions and __syncthreads run as on the device."""

    def __init__(self, workdir: str | None = None, threads: bool = False):
        self.workdir = workdir or tempfile.mkdtemp(prefix="einsat-host-kernels-")
        self.threads = threads
        self.functions: dict[str, ctypes._CFuncPtr] = {}
        self.kernels: dict[str, Kernel] = {}

    def build(self, kernels) -> None:
        todo = {k.name: k for k in kernels if k.name not in self.functions}
        if not todo:
            return
        parts, wrappers = [], []
        for name, k in sorted(todo.items()):
            parts.append(k.source)
            casts = ", ".join(f"({p.decl().split(' __restrict__')[0]})args[{i}]" for i, p in enumerate(k.params))
            launch = THREADED_LAUNCH if self.threads else SERIAL_LAUNCH
            wrappers.append(launch.format(name=name, casts=casts, block=k.block))
        head = "#include <thread>\n#include <vector>\n" if self.threads else ""
        source = head + "\n".join(parts) + "\n" + "\n".join(wrappers)
        digest = hashlib.sha1(source.encode()).hexdigest()[:12]
        src = os.path.join(self.workdir, f"k_{digest}.cpp")
        lib = os.path.join(self.workdir, f"k_{digest}.so")
        with open(src, "w") as f:
            f.write(source)
        flags = ["-DEINSAT_HOST_THREADS", "-pthread"] if self.threads else []
        cmd = [CXX, "-O1", "-std=c++17", "-shared", "-fPIC", "-x", "c++", "-DEINSAT_HOST", *flags, "-w", src, "-o", lib]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        so = ctypes.CDLL(lib)
        for name, k in todo.items():
            fn = getattr(so, f"launch_{name}")
            fn.argtypes = [ctypes.c_longlong, ctypes.POINTER(ctypes.c_void_p)]
            fn.restype = ctypes.c_int
            self.functions[name] = fn
            self.kernels[name] = k

    def launch(self, kernel: Kernel, args: list) -> None:
        fn = self.functions[kernel.name]
        ptrs = (ctypes.c_void_p * len(args))(*[a.ctypes.data for a in args])
        grid = kernel.grid(THREADED_GRID if self.threads else 1 << 30) if kernel.work > 0 else 0
        if fn(grid, ptrs) != 0:
            raise AssertionError(f"{kernel.name}: a barrier waited 10 s (threads of a block diverge around it)")


def library_for(runs, library: "KernelLibrary | None" = None) -> "KernelLibrary":
    """`library` (a new one by default) with every kernel the (graph, feeds) pairs of `runs`
    launch, found by running each once on a dry device."""
    from einsat.gpu.backend_cupy import GpuBackend
    from einsat.gpu.interpreter import run

    library = library or KernelLibrary()
    dry = HostDevice(library, dry=True)
    for graph, feeds in runs:
        run(graph, feeds, backend=GpuBackend(dry))
    library.build(dry.recorded)
    return library


def poison(shape, dtype) -> np.ndarray:
    """A fresh array full of a value no kernel writes by accident (NaN, or a sentinel)."""
    a = np.empty(shape, dtype=dtype)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        a.fill(np.nan)
    elif a.dtype.kind == "b":
        a.view(np.uint8).fill(7)  # neither True (1) nor False (0)
    else:
        a.fill(np.iinfo(a.dtype).max - 3)
    return a


def strided(arr: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """A view of `arr`'s memory from element `offset`, with element strides."""
    item = arr.itemsize
    base = np.lib.stride_tricks.as_strided(arr, shape=(offset + 1,), strides=(item,))[offset:]
    return np.lib.stride_tricks.as_strided(base, tuple(shape), tuple(s * item for s in strides))


def check_gemm_arguments(call) -> None:
    """What cublasGemmStridedBatchedEx refuses with CUBLAS_STATUS_INVALID_VALUE (cuBLAS docs:
    m, n, k, batchCount < 0; lda < max(1, m) for OP_N or max(1, k) for OP_T; ldb < max(1, k) for
    OP_N or max(1, n) for OP_T; ldc < max(1, m)), every int argument within a C int, and what it
    leaves undefined: batches of C that overlap."""
    from einsat.gpu.kernels.cublas import INT_MAX, OP_N, OP_T
    m, n, k = call.m, call.n, call.k
    assert min(m, n, k, call.batch) >= 0, call
    assert max(m, n, k, call.batch, call.first.ld, call.second.ld, call.ldc) <= INT_MAX, call
    for op, rows_n, rows_t in ((call.first, m, k), (call.second, k, n)):
        assert op.trans in (OP_N, OP_T), call
        assert op.ld >= max(1, rows_n if op.trans == OP_N else rows_t), f"leading dimension too small: {call}"
    assert call.ldc >= max(1, m), f"ldc too small: {call}"
    if call.batch > 1 and m and n:
        assert abs(call.stride_c) >= (n - 1) * call.ldc + m, f"batches of C overlap: {call}"


class HostDevice(ArrayDevice):
    """`Device` on the host: `ArrayDevice` over NumPy (the CuPy device's own array handling),
    host-compiled kernels, emulated cuBLAS and cuDNN. Fresh buffers are poisoned.

    `streams=True` emulates CUDA streams and capture (`tests.gpu.host_streams`): a
    `CompiledProgram` then captures and replays a graph, and unsynchronized use of memory
    across streams raises. `cudnn`, a real `Cudnn(with_handle=False)`, makes every convolution
    build its descriptors in the real library first (cuDNN must accept them)."""

    name = "host"

    def __init__(self, library: KernelLibrary, dry: bool = False, streams: bool = False,
                 fail_in_capture: frozenset[str] = frozenset(), cudnn=None):
        super().__init__(np)
        self.library = library
        self.dry = dry
        self.recorded: list[Kernel] = []
        self.allocator = poison
        self.gemm_calls = 0
        self.conv_calls = 0
        self.streams = Streams(fail_in_capture) if streams else None
        self.cudnn = cudnn

    # -- streams: work goes through `_issue`, which checks it against the other streams -----
    def new_stream(self):
        return self.streams.new() if self.streams is not None else None

    def synchronize(self) -> None:
        if self.streams is not None:
            self.streams.current.synchronize()

    def _issue(self, kind: str, fn, reads: list, writes: list) -> None:
        if self.streams is None:
            fn()
        else:
            self.streams.issue(kind, fn, reads, writes)

    def _copy_in(self, buf, host) -> None:
        self._issue("upload", lambda: np.copyto(buf, host), [], [buf])

    def _copy_out(self, array):
        out = []
        self._issue("download", lambda: out.append(np.array(array, copy=True)), [array], [])
        self.synchronize()  # as CuPy's asnumpy waits for the current stream
        return out[0]

    def fill(self, array, value) -> None:
        self._issue("fill", lambda: array.fill(value), [], [array])

    # -- work -------------------------------------------------------------------------------
    def launch(self, kernel: Kernel, args: list) -> None:
        assert [np.dtype(p.dtype) for p in kernel.params] == [a.dtype for a in args], \
            f"{kernel.name}: parameter dtypes {[p.dtype for p in kernel.params]} vs {[a.dtype for a in args]}"
        self.launches += 1
        if self.dry:
            self.recorded.append(kernel)
            return
        roles = [p.role for p in kernel.params]
        self._issue("kernel", lambda: self.library.launch(kernel, args),
                    [a for a, r in zip(args, roles) if r == "in"], [a for a, r in zip(args, roles) if r == "out"])

    def gemm(self, call, a, b, c, alpha=1.0, beta=0.0) -> None:
        """cuBLAS column-major semantics: C = alpha op(A) op(B) + beta C per batch, after
        cuBLAS's own argument checks (`check_gemm_arguments`)."""
        self.gemm_calls += 1
        self.launches += 1
        check_gemm_arguments(call)
        if not self.dry:
            self._issue("gemm", lambda: self._gemm(call, a, b, c, alpha, beta), [a, b] + ([c] if beta else []), [c])

    def _gemm(self, call, a, b, c, alpha, beta) -> None:
        src = {"a": a, "b": b}
        mats = []
        for op, off in ((call.first, 0), (call.second, 1)):
            arr = src[op.source]
            rows, cols = ((call.m, call.k) if off == 0 else (call.k, call.n))
            if op.trans:
                rows, cols = cols, rows
            offset = call.offsets[0 if op.source == "a" else 1]
            stored = strided(arr, offset, (call.batch, rows, cols), (op.stride, 1, op.ld))
            mats.append(stored.transpose(0, 2, 1) if op.trans else stored)
        cv = strided(c, call.offsets[2], (call.batch, call.m, call.n), (call.stride_c, 1, call.ldc))
        prod_ = np.matmul(mats[0].astype(np.float64), mats[1].astype(np.float64))
        res = alpha * prod_ + (beta * cv.astype(np.float64) if beta else 0.0)
        np.copyto(cv, res.astype(c.dtype))

    def conv(self, plan, x, w, y) -> None:
        """cuDNN semantics: cross-correlation with symmetric padding (forward), or its
        adjoint (backward data) scattering each input pixel through the filter."""
        self.conv_calls += 1
        self.launches += 1
        assert tuple(x.shape) == plan.x_shape and tuple(w.shape) == plan.w_shape and tuple(y.shape) == plan.y_shape
        if self.cudnn is not None:
            self.cudnn.descriptors(plan, self.conv_strides(x), x.dtype, self.tf32)
        if not self.dry:
            self._issue("conv", lambda: self._conv(plan, x, w, y), [x, w], [y])

    def _conv(self, plan, x, w, y) -> None:
        nsp = len(plan.pads)
        if not plan.transposed:
            from einsat.ir.ops.conv import conv_numpy
            y[...] = conv_numpy(x.astype(np.float64), w.astype(np.float64), None, plan.stride, plan.dilation,
                                plan.pads + plan.pads, plan.groups)
            return
        g = plan.groups
        c, fg = w.shape[:2]
        cg = c // g
        out = np.zeros(plan.y_shape, np.float64)
        xs = x.astype(np.float64)
        for tap in product(*[range(k) for k in w.shape[2:]]):
            index = []
            src_index = []
            for d in range(nsp):
                n_in, n_out = plan.x_shape[2 + d], plan.y_shape[2 + d]
                shift = tap[d] * plan.dilation[d] - plan.pads[d]
                s = plan.stride[d]
                valid = [i for i in range(n_in) if 0 <= i * s + shift < n_out]
                if not valid:
                    break
                i0, i1 = valid[0], valid[-1] + 1
                src_index.append(slice(i0, i1))
                index.append(slice(i0 * s + shift, (i1 - 1) * s + shift + 1, s))
            else:
                for gi in range(g):
                    xin = xs[(slice(None), slice(gi * cg, (gi + 1) * cg), *src_index)]
                    wt = w[(slice(gi * cg, (gi + 1) * cg), slice(None), *tap)].astype(np.float64)
                    contrib = np.einsum("nc...,cf->nf...", xin, wt)
                    out[(slice(None), slice(gi * fg, (gi + 1) * fg), *index)] += contrib
        y[...] = out.astype(y.dtype)
