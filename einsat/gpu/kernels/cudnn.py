"""Convolutions through cuDNN 9's legacy API, called with ctypes on `libcudnn.so.9`.

CuPy 14 dropped its cuDNN bindings; cuDNN 9 keeps the imperative convolution API (deprecated
but supported), which is what EinNet uses: tensor/filter/convolution descriptors, then
`cudnnConvolutionForward` (conv) or `cudnnConvolutionBackwardData` (conv_transpose), with the
algorithm chosen by timing every candidate once per signature and cached.

`plan_conv` / `plan_conv_transpose` are pure: they lift 1-D convolutions to 2-D, split
asymmetric padding into cuDNN's symmetric padding plus an explicit pad (conv) or crop
(conv_transpose), and say what the caller must do around the cuDNN call.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from einsat.errors import ExecutionError

MAX_SPATIAL = 3
SCREEN_FACTOR = 3  # candidates screened slower than this times the fastest are not timed further


@dataclass(frozen=True)
class ConvPlan:
    """One cuDNN convolution and the einsat-side work around it.

    Forward: `pre_pad` (ONNX pads, or None) is applied to x first; cuDNN then runs with
    symmetric `pads`. Transposed (backward data): cuDNN produces `y_shape`; `post_pad`
    (ONNX pads, negative = crop, or None) turns it into the op's output. Shapes, pads,
    strides and dilations are the lifted ones (1-D becomes 2-D with a unit H); `pre_pad` and
    `post_pad` are einsat's own work and keep the op's rank.
    """

    transposed: bool
    lifted: bool              # a 1-D conv run as 2-D
    x_shape: tuple[int, ...]  # after pre_pad (forward) / the input (transposed)
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]  # what cuDNN writes
    pads: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    pre_pad: tuple[int, ...] | None = None
    post_pad: tuple[int, ...] | None = None

    @property
    def key(self) -> tuple:
        return (self.transposed, self.x_shape, self.w_shape, self.y_shape, self.pads, self.stride,
                self.dilation, self.groups)


def _lift(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[:2]) + (1,) + tuple(shape[2:])


def _spatial_dims(w_shape) -> int:
    nsp = len(w_shape) - 2
    if nsp < 1 or nsp > MAX_SPATIAL:
        raise ExecutionError(f"cuDNN convolutions take 1 to {MAX_SPATIAL} spatial dims, got {nsp}")
    return nsp


def _plan(transposed, xs, ws, ys, sym, stride, dilation, groups, **around) -> ConvPlan:
    """The plan of cuDNN's conv on these shapes; a 1-D conv is lifted to 2-D with a unit H."""
    xs, ws, ys = tuple(xs), tuple(ws), tuple(ys)
    sym, stride, dilation = tuple(sym), tuple(stride), tuple(dilation)
    lifted = len(ws) == 3
    if lifted:
        xs, ws, ys = _lift(xs), _lift(ws), _lift(ys)
        sym, stride, dilation = (0,) + sym, (1,) + stride, (1,) + dilation
    return ConvPlan(transposed, lifted, xs, ws, ys, sym, stride, dilation, groups, **around)


def _sym(padding: Sequence[int], nsp: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Symmetric pads min(begin, end) per dim, and the remainder as ONNX pads (None if zero)."""
    sym = tuple(min(padding[i], padding[nsp + i]) for i in range(nsp))
    rest = tuple(padding[i] - sym[i] for i in range(nsp)) + tuple(padding[nsp + i] - sym[i] for i in range(nsp))
    return sym, (rest if any(rest) else None)


def plan_conv(x_shape, w_shape, stride, padding, dilation, groups) -> ConvPlan:
    nsp = _spatial_dims(w_shape)
    sym, rest = _sym(padding, nsp)
    pre = None
    xs = tuple(x_shape)
    if rest is not None:
        pre = (0, 0) + rest[:nsp] + (0, 0) + rest[nsp:]
        xs = xs[:2] + tuple(xs[2 + i] + rest[i] + rest[nsp + i] for i in range(nsp))
    span = [dilation[i] * (w_shape[2 + i] - 1) + 1 for i in range(nsp)]
    out = tuple((xs[2 + i] + 2 * sym[i] - span[i]) // stride[i] + 1 for i in range(nsp))
    ys = (x_shape[0], w_shape[0]) + out
    return _plan(False, xs, w_shape, ys, sym, stride, dilation, groups, pre_pad=pre)


def plan_conv_transpose(x_shape, w_shape, out_shape, stride, padding, dilation, groups,
                        output_padding) -> ConvPlan:
    """ConvTranspose as cuDNN backward data, then a crop or zero pad.

    With L = stride·(in−1) + span, the full (unpadded) result is full[0:L] (zero beyond) and the
    op's output is full[begin : L + output_padding − end]. cuDNN with symmetric padding p writes
    full[p : L − p]; p = min(begin, max(0, end − output_padding)) keeps everything the output
    needs inside that, so the rest is a crop at the start and a crop or zero fill at the end.
    """
    nsp = _spatial_dims(w_shape)
    op = tuple(output_padding) if output_padding else (0,) * nsp
    sym = tuple(min(padding[i], max(0, padding[nsp + i] - op[i])) for i in range(nsp))
    span = [dilation[i] * (w_shape[2 + i] - 1) + 1 for i in range(nsp)]
    core = tuple(stride[i] * (x_shape[2 + i] - 1) + span[i] - 2 * sym[i] for i in range(nsp))
    if any(c <= 0 for c in core):
        raise ExecutionError(f"conv_transpose: padding {list(padding)} leaves no output")
    begin = tuple(-(padding[i] - sym[i]) for i in range(nsp))
    end = tuple(out_shape[2 + i] - core[i] - begin[i] for i in range(nsp))
    post = None
    if any(begin) or any(end):
        post = (0, 0) + begin + (0, 0) + end
    ys = (x_shape[0], w_shape[1] * groups) + core
    return _plan(True, x_shape, w_shape, ys, sym, stride, dilation, groups, post_pad=post)


def lift_strides(strides: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """Strides of a [N, C, L] view seen as [N, C, 1, L]."""
    return tuple(strides[:2]) + (strides[2] * shape[2],) + tuple(strides[2:])


# -- the ctypes binding (GPU machine only) ------------------------------------------------

DATA_FLOAT, DATA_DOUBLE, DATA_HALF, DATA_BFLOAT16 = 0, 1, 2, 9
TENSOR_NCHW = 0
CROSS_CORRELATION = 1
MATH_DEFAULT, MATH_TENSOR_OP, MATH_FMA = 0, 1, 3
FWD_ALGOS, BWD_DATA_ALGOS = 8, 6
WORKSPACE_LIMIT = 1 << 30

# numpy dtype -> (cuDNN data type, compute type, alpha/beta C type). The halves store fp16 / bf16
# and compute in float (the convolution descriptor's compute type; alpha and beta are floats):
# accumulation in fp32, the result rounded once, as the NumPy reference computes a half conv.
_DT = {"float32": (DATA_FLOAT, DATA_FLOAT, ctypes.c_float), "float16": (DATA_HALF, DATA_FLOAT, ctypes.c_float),
       "bfloat16": (DATA_BFLOAT16, DATA_FLOAT, ctypes.c_float),
       "float64": (DATA_DOUBLE, DATA_DOUBLE, ctypes.c_double)}
HALF_DATA = frozenset({DATA_HALF, DATA_BFLOAT16})


def supported(dtype) -> bool:
    return np.dtype(dtype).name in _DT


_vp, _ci, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_pi, _pvp = ctypes.POINTER(_ci), ctypes.POINTER(_vp)

# Every cuDNN function einsat calls: (argument types, return type). tests/gpu/test_abi.py
# compares them with the declarations in the wheel's cudnn*.h.
SIGNATURES = {
    "cudnnGetErrorString": ([_ci], ctypes.c_char_p), "cudnnGetVersion": ([], _sz),
    "cudnnCreate": ([_pvp], _ci), "cudnnSetStream": ([_vp, _vp], _ci),
    "cudnnCreateTensorDescriptor": ([_pvp], _ci), "cudnnSetTensorNdDescriptor": ([_vp, _ci, _ci, _pi, _pi], _ci),
    "cudnnCreateFilterDescriptor": ([_pvp], _ci), "cudnnSetFilterNdDescriptor": ([_vp, _ci, _ci, _ci, _pi], _ci),
    "cudnnCreateConvolutionDescriptor": ([_pvp], _ci),
    "cudnnSetConvolutionNdDescriptor": ([_vp, _ci, _pi, _pi, _pi, _ci, _ci], _ci),
    "cudnnSetConvolutionGroupCount": ([_vp, _ci], _ci), "cudnnSetConvolutionMathType": ([_vp, _ci], _ci),
    "cudnnGetConvolutionNdForwardOutputDim": ([_vp, _vp, _vp, _ci, _pi], _ci),
    "cudnnGetConvolutionForwardWorkspaceSize": ([_vp, _vp, _vp, _vp, _vp, _ci, ctypes.POINTER(_sz)], _ci),
    "cudnnConvolutionForward": ([_vp, _vp, _vp, _vp, _vp, _vp, _vp, _ci, _vp, _sz, _vp, _vp, _vp], _ci),
    "cudnnGetConvolutionBackwardDataWorkspaceSize": ([_vp, _vp, _vp, _vp, _vp, _ci, ctypes.POINTER(_sz)], _ci),
    "cudnnConvolutionBackwardData": ([_vp, _vp, _vp, _vp, _vp, _vp, _vp, _ci, _vp, _sz, _vp, _vp, _vp], _ci),
}


class Cudnn:
    """A cuDNN handle, descriptors cached per signature, algorithms chosen by timing.

    `Cudnn(with_handle=False)` builds descriptors only: that needs no device, so the
    descriptors are checked against the real library on machines without a GPU."""

    def __init__(self, with_handle: bool = True):
        from einsat.gpu.kernels.libload import bind, load
        self.lib = bind(load("cudnn"), SIGNATURES)
        self.handle = ctypes.c_void_p()
        if with_handle:
            self._check(self.lib.cudnnCreate(ctypes.byref(self.handle)), "cudnnCreate")
        self._desc: dict[tuple, tuple] = {}
        self._algo: dict[tuple, tuple[int, int]] = {}
        self.choices: dict[tuple, dict] = {}
        self._stream = None

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            msg = self.lib.cudnnGetErrorString(status).decode()
            raise ExecutionError(f"{what} failed: cuDNN status {status} ({msg})")

    def version(self) -> int:
        return int(self.lib.cudnnGetVersion())

    def set_stream(self, stream_ptr: int) -> None:
        if stream_ptr != self._stream:
            self._check(self.lib.cudnnSetStream(self.handle, ctypes.c_void_p(stream_ptr)), "cudnnSetStream")
            self._stream = stream_ptr

    @staticmethod
    def _ints(values) -> ctypes.Array:
        return (ctypes.c_int * len(values))(*[int(v) for v in values])

    def _tensor(self, shape, strides, dt) -> ctypes.c_void_p:
        d = ctypes.c_void_p()
        self._check(self.lib.cudnnCreateTensorDescriptor(ctypes.byref(d)), "cudnnCreateTensorDescriptor")
        self._check(self.lib.cudnnSetTensorNdDescriptor(d, dt, len(shape), self._ints(shape), self._ints(strides)),
                    f"cudnnSetTensorNdDescriptor {list(shape)} strides {list(strides)}")
        return d

    def descriptors(self, plan: ConvPlan, x_strides, dtype, tf32: bool) -> tuple:
        """(x, w, conv, y) descriptors for a plan and x's strides (y and w are contiguous)."""
        key = (plan.key, tuple(x_strides), np.dtype(dtype).name, tf32)
        if key in self._desc:
            return self._desc[key]
        dt, compute, _ = _DT[np.dtype(dtype).name]
        from einsat.gpu.kernels.codegen import contiguous_strides
        lib = self.lib
        x_shape, y_shape = (plan.y_shape, plan.x_shape) if plan.transposed else (plan.x_shape, plan.y_shape)
        x_str = contiguous_strides(x_shape) if plan.transposed else x_strides
        y_str = x_strides if plan.transposed else contiguous_strides(y_shape)
        xd, yd = self._tensor(x_shape, x_str, dt), self._tensor(y_shape, y_str, dt)
        wd = ctypes.c_void_p()
        self._check(lib.cudnnCreateFilterDescriptor(ctypes.byref(wd)), "cudnnCreateFilterDescriptor")
        self._check(lib.cudnnSetFilterNdDescriptor(wd, dt, TENSOR_NCHW, len(plan.w_shape), self._ints(plan.w_shape)),
                    f"cudnnSetFilterNdDescriptor {list(plan.w_shape)}")
        cd = ctypes.c_void_p()
        n = len(plan.pads)
        self._check(lib.cudnnCreateConvolutionDescriptor(ctypes.byref(cd)), "cudnnCreateConvolutionDescriptor")
        self._check(lib.cudnnSetConvolutionNdDescriptor(cd, n, self._ints(plan.pads), self._ints(plan.stride),
                                                        self._ints(plan.dilation), CROSS_CORRELATION, compute),
                    "cudnnSetConvolutionNdDescriptor")
        self._check(lib.cudnnSetConvolutionGroupCount(cd, plan.groups), "cudnnSetConvolutionGroupCount")
        math = MATH_TENSOR_OP if tf32 or dt in HALF_DATA else (MATH_FMA if dt == DATA_FLOAT else MATH_DEFAULT)
        self._check(lib.cudnnSetConvolutionMathType(cd, math), "cudnnSetConvolutionMathType")
        dims = self._ints([0] * (n + 2))
        self._check(lib.cudnnGetConvolutionNdForwardOutputDim(cd, xd, wd, n + 2, dims), "cudnnGetOutputDim")
        if tuple(dims) != tuple(y_shape):
            raise ExecutionError(f"cuDNN computes output {list(dims)}, einsat expects {list(y_shape)}")
        self._desc[key] = (xd, wd, cd, yd)
        return self._desc[key]

    def _workspace_size(self, plan, descs, algo) -> int | None:
        xd, wd, cd, yd = descs
        size = ctypes.c_size_t()
        if plan.transposed:
            # cuDNN's forward x is our output (dx), its forward y our input (dy)
            st = self.lib.cudnnGetConvolutionBackwardDataWorkspaceSize(self.handle, wd, yd, cd, xd, algo,
                                                                      ctypes.byref(size))
        else:
            st = self.lib.cudnnGetConvolutionForwardWorkspaceSize(self.handle, xd, wd, cd, yd, algo, ctypes.byref(size))
        return size.value if st == 0 else None

    def _run(self, plan, descs, algo, x_ptr, w_ptr, y_ptr, ws_ptr, ws_bytes, dtype) -> int:
        xd, wd, cd, yd = descs
        scale = _DT[np.dtype(dtype).name][2]
        one, zero = scale(1.0), scale(0.0)
        vp = ctypes.c_void_p
        if plan.transposed:  # our x is cuDNN's dy (descriptor yd), our y its dx (descriptor xd)
            return self.lib.cudnnConvolutionBackwardData(self.handle, ctypes.byref(one), wd, vp(w_ptr), yd, vp(x_ptr),
                                                         cd, algo, vp(ws_ptr), ws_bytes, ctypes.byref(zero), xd,
                                                         vp(y_ptr))
        return self.lib.cudnnConvolutionForward(self.handle, ctypes.byref(one), xd, vp(x_ptr), wd, vp(w_ptr), cd,
                                                algo, vp(ws_ptr), ws_bytes, ctypes.byref(zero), yd, vp(y_ptr))

    def choose(self, plan, x_strides, dtype, tf32, workspace: Callable[[int], int],
               time_ms: Callable[[Callable[[], None]], float], x_ptr, w_ptr, y_ptr,
               screen_ms: Callable[[Callable[[], None]], float] | None = None) -> tuple[int, int]:
        """(algorithm, workspace bytes): the fastest candidate by measurement, cached per signature.

        Every candidate's workspace size is asked first and one workspace of the largest
        (within WORKSPACE_LIMIT) serves them all. With `screen_ms` (a cheap timing: a few calls),
        candidates slower than SCREEN_FACTOR times the fastest are left out before `time_ms`
        times the rest (an FFT algorithm can take a thousand times a depthwise convolution's
        best, and `time_ms` runs each candidate dozens of times). `choices[key]` records the
        choice and each candidate's time (ms) or why it was left out."""
        key = (plan.key, tuple(x_strides), np.dtype(dtype).name, tf32)
        if key in self._algo:
            return self._algo[key]
        descs = self.descriptors(plan, x_strides, dtype, tf32)
        sizes, times = {}, {}
        for algo in range(BWD_DATA_ALGOS if plan.transposed else FWD_ALGOS):
            size = self._workspace_size(plan, descs, algo)
            if size is None:
                times[algo] = "not supported"
            elif size > WORKSPACE_LIMIT:
                times[algo] = f"needs {size} workspace bytes"
            else:
                sizes[algo] = size
        ws = workspace(max(sizes.values(), default=0))
        runs: dict[int, Callable[[], None]] = {}
        for algo, size in sizes.items():
            st = self._run(plan, descs, algo, x_ptr, w_ptr, y_ptr, ws, size, dtype)
            if st != 0:
                times[algo] = f"status {st}"
                continue
            runs[algo] = lambda a=algo, s=size: self._check(
                self._run(plan, descs, a, x_ptr, w_ptr, y_ptr, ws, s, dtype), "cuDNN convolution")
        if screen_ms is not None and len(runs) > 1:
            screened = {a: screen_ms(run) for a, run in runs.items()}
            fastest = min(screened.values())
            for a, t in screened.items():
                if t > SCREEN_FACTOR * fastest:
                    times[a] = f"screened out: {t:.4g} ms alone, over {SCREEN_FACTOR}x the fastest"
                    del runs[a]
        for algo, run in runs.items():
            times[algo] = time_ms(run)
        timed = {a: t for a, t in times.items() if not isinstance(t, str)}
        if not timed:
            raise ExecutionError(f"no cuDNN algorithm runs convolution {plan}: {times}")
        best = min(timed, key=timed.get)
        self._algo[key] = (best, sizes[best])
        self.choices[key] = {"algo": best, "workspace_bytes": sizes[best], "candidates_ms": times}
        return self._algo[key]

    def convolve(self, plan, x_strides, dtype, tf32, algo, ws_ptr, ws_bytes, x_ptr, w_ptr, y_ptr) -> None:
        descs = self.descriptors(plan, x_strides, dtype, tf32)
        self._check(self._run(plan, descs, algo, x_ptr, w_ptr, y_ptr, ws_ptr, ws_bytes, dtype), "cuDNN convolution")
