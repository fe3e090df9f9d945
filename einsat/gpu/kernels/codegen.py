"""The core of einsat's CUDA code generator: types, the kernel record, index arithmetic.

Every generated kernel is a self-contained CUDA C++ source (a shared prelude, then one
`extern "C" __global__` function) with all shapes and strides baked in as constants, so the
compiler turns index division into multiply-shift and unrolls fixed loops. Nothing here
imports CuPy: sources are plain strings, compiled by NVRTC through CuPy on a GPU machine and
by `nvcc` (or, with `EINSAT_HOST` defined, by a host C++ compiler) in tests.

Launch contract (the same for every kernel, so one launcher serves all):
  - `grid-stride` kernels (`Kernel.per_block == 0`): one thread per work item,
    `for (i = blockIdx.x * blockDim.x + threadIdx.x; i < WORK; i += gridDim.x * blockDim.x)`;
  - `block-per-item` kernels (`per_block == 1`): one block per work item (a row to reduce),
    `for (row = blockIdx.x; row < WORK; row += gridDim.x)`, threads cooperate on the row;
    `block` is a multiple of 32 there. Any grid size is correct; the launcher picks one.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from math import prod
from typing import Sequence

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.prelude import HALF_HEADER, PRELUDE

# numpy dtype -> (storage C type, compute C type, accumulator C type). The halves (NumPy's float16,
# ml_dtypes' bfloat16) are storage only: loaded into float, computed and accumulated in float, and
# rounded to nearest even once when stored, as the NumPy reference computes them
# (`runtime.backend_numpy`).
_CTYPES = {
    "float32": ("float", "float", "float"),
    "float64": ("double", "double", "double"),
    "float16": ("__half", "float", "float"),
    "bfloat16": ("__nv_bfloat16", "float", "float"),
    "int64": ("long long", "long long", "long long"),
    "int32": ("int", "int", "long long"),
    "int16": ("short", "int", "long long"),
    "int8": ("signed char", "int", "long long"),
    "uint8": ("unsigned char", "int", "long long"),
    "bool": ("bool", "bool", "long long"),
}


@dataclass(frozen=True)
class CType:
    """How one numpy dtype lives in generated code: stored as `store`, computed as `compute`."""

    dtype: np.dtype
    store: str
    compute: str
    acc: str

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f" or self.is_half

    @property
    def is_half(self) -> bool:
        return is_half_dtype(self.dtype)

    def load(self, expr: str) -> str:
        """`expr` (a stored element) as a compute-type value (a half widens to float, exactly)."""
        if self.is_half:
            return f"{'__bfloat162float' if self.store == '__nv_bfloat16' else '__half2float'}({expr})"
        return expr

    def save(self, expr: str) -> str:
        """A compute-type value as a stored element (a half rounds to nearest even)."""
        if self.is_half:
            return f"{'__float2bfloat16_rn' if self.store == '__nv_bfloat16' else '__float2half_rn'}((float)({expr}))"
        return f"({self.store})({expr})"

    def literal(self, value: float) -> str:
        """A constant of the compute type, written exactly (hex-free, full precision)."""
        if self.compute in ("float", "double"):
            suffix = "f" if self.compute == "float" else "d"
            value = float(np.float32(value)) if suffix == "f" else float(value)
            if np.isnan(value):
                return f"einsat_nan_{suffix}()"
            if np.isinf(value):
                return f"einsat_inf_{suffix}()" if value > 0 else f"(-einsat_inf_{suffix}())"
            return f"({value!r}{'f' if suffix == 'f' else ''})"
        if self.compute == "bool":
            return "true" if value else "false"
        return f"(({self.compute}){int(value)})"

    def lowest(self) -> str:
        """The smallest value of the compute type (-inf for floats): the identity of max."""
        if self.is_float:
            return self.literal(-np.inf)
        if self.compute == "bool":
            return "false"
        return f"(({self.compute})({np.iinfo(self.dtype).min}LL))" if self.dtype.itemsize < 8 else \
            "(-9223372036854775807LL - 1)"

    def highest(self) -> str:
        """The largest value of the compute type (+inf for floats): the identity of min."""
        if self.is_float:
            return self.literal(np.inf)
        if self.compute == "bool":
            return "true"
        return f"(({self.compute})({np.iinfo(self.dtype).max}LL))"

    def fn(self, name: str) -> str:
        """A libm function for the compute type: `exp` -> `expf` for float."""
        return f"{name}f" if self.compute == "float" else name


class UnsupportedDtype(ExecutionError):
    """A dtype the generated kernels have no C type for (`lower.run_node` names the op)."""


def is_half_dtype(dtype) -> bool:
    """fp16 or bf16: stored in 16 bits, computed in float."""
    return np.dtype(dtype).name in ("float16", "bfloat16")


def ctype(dtype) -> CType:
    dt = np.dtype(dtype)
    try:
        store, compute, acc = _CTYPES[dt.name]
    except KeyError:
        raise UnsupportedDtype(f"generated kernels do not support dtype {dt.name} "
                               f"(they take {', '.join(_CTYPES)})") from None
    return CType(dt, store, compute, acc)




@dataclass(frozen=True)
class Param:
    """One kernel parameter: a device array (`in`: read, `out`: written) of a dtype."""

    name: str
    role: str  # "in" | "out"
    dtype: np.dtype

    def decl(self) -> str:
        t = ctype(self.dtype).store
        return f"const {t}* __restrict__ {self.name}" if self.role == "in" else f"{t}* __restrict__ {self.name}"


@dataclass(frozen=True)
class Kernel:
    """A generated kernel: its unique name, full source, parameters and launch shape."""

    name: str
    source: str
    params: tuple[Param, ...]
    work: int            # work items: elements (grid-stride) or rows (block-per-item)
    block: int = 256     # threads per block
    per_block: int = 0   # 0: one thread per item; 1: one block per item
    family: str = ""

    def grid(self, max_blocks: int = 65535) -> int:
        if self.work <= 0:
            return 0
        items = self.work if self.per_block else -(-self.work // self.block)
        return max(1, min(items, max_blocks))


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def memoize(fn):
    """Cache a kernel generator by its (frozen) arguments: generation is pure, and the
    interpreter calls it again for every node it runs. At most 4096 kernels are kept."""
    cache: dict = {}

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        key = (_freeze(args), _freeze(kw))
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= 4096:
                cache.clear()
            hit = cache[key] = fn(*args, **kw)
        return hit

    wrapper.cache = cache
    return wrapper


NARROW_LIMIT = 2**31 - 1


def extent(shape: Sequence[int], strides: Sequence[int]) -> int:
    """One more than the largest |element offset| a view of (shape, strides) reaches."""
    return sum((d - 1) * abs(s) for d, s in zip(shape, strides) if d > 0) + 1


def narrow(body: str) -> str:
    """The body with 32-bit index arithmetic: `idx_t` becomes `int` and the `LL` suffix of
    every constant below 2^31 goes (64-bit division by a constant costs twice the instructions)."""
    body = re.sub(r"\bidx_t\b", "int", body)
    return re.sub(r"\b(\d+)LL\b", lambda m: m.group(1) if int(m.group(1)) <= NARROW_LIMIT else m.group(0), body)


def make_kernel(family: str, params: Sequence[Param], body: str, work: int, *, block: int = 256,
                per_block: int = 0, span: int | None = None) -> Kernel:
    """Wrap a kernel body (the loop included) into a named, self-contained source.

    The name is `einsat_<family>_<hash of the body and signature>`, so equal kernels share a
    compiled module and different ones never collide. `span`, when given, bounds every index
    the body computes (work items and element offsets, see `extent`): below 2^31 the kernel
    uses 32-bit index arithmetic.
    """
    params = tuple(params)
    if span is not None and 2 * max(span, work) < NARROW_LIMIT:  # 2x: a grid-stride step may overshoot
        body = narrow(body)
    sig = ", ".join(p.decl() for p in params)
    digest = hashlib.sha1(f"{family}|{sig}|{body}|{block}".encode()).hexdigest()[:16]
    name = f"einsat_{family}_{digest}"
    header = HALF_HEADER if any(is_half_dtype(p.dtype) for p in params) else ""
    source = (f"{header}{PRELUDE}\nextern \"C\" __global__ void {name}({sig}) {{\n"
              f"{body.rstrip()}\n}}\n")
    return Kernel(name, source, params, int(work), block, per_block, family)


def grid_stride(body: str, work: str | int = "WORK") -> str:
    """A grid-stride loop over `i` in [0, work)."""
    return (f"    for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < (idx_t){work};"
            f" i += (idx_t)gridDim.x * blockDim.x) {{\n{body.rstrip()}\n    }}")


def block_rows(body: str, work: str | int) -> str:
    """A loop of blocks over `row` in [0, work); threads of a block share each row."""
    return (f"    for (idx_t row = blockIdx.x; row < (idx_t){work}; row += gridDim.x) {{\n"
            f"{body.rstrip()}\n    }}")


# -- index arithmetic ---------------------------------------------------------------------

def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge dims that every operand walks contiguously, and drop size-1 dims.

    Dim k and k+1 merge when, for every operand, stride[k] == stride[k+1] * shape[k+1]. The
    linear index order (row-major over `shape`) is unchanged, so offsets computed over the
    result equal those over the input.
    """
    dims = [(d, [s[k] for s in strides]) for k, d in enumerate(shape) if d != 1]
    if not dims:
        return (), [() for _ in strides]
    merged = [dims[0]]
    for d, st in dims[1:]:
        pd, pst = merged[-1]
        if all(a == b * d for a, b in zip(pst, st)):
            merged[-1] = (pd * d, st)
        else:
            merged.append((d, st))
    new_shape = tuple(d for d, _ in merged)
    return new_shape, [tuple(st[j] for _, st in merged) for j in range(len(strides))]


def decompose(index: str, shape: Sequence[int], prefix: str = "c", indent: str = "        ") -> str:
    """C statements splitting a row-major linear `index` into coordinates `<prefix>0..`."""
    if not shape:
        return ""
    lines = [f"{indent}idx_t {prefix}_r = {index};"]
    for k in range(len(shape) - 1, 0, -1):
        lines.append(f"{indent}const idx_t {prefix}{k} = {prefix}_r % {shape[k]}LL; {prefix}_r /= {shape[k]}LL;")
    lines.append(f"{indent}const idx_t {prefix}0 = {prefix}_r;")
    return "\n".join(lines)


def dot(coords: Sequence[str], strides: Sequence[int], offset: int = 0) -> str:
    """The C expression sum(coord * stride) + offset, skipping zero strides."""
    terms = [f"{c}" if s == 1 else f"{c} * {s}LL" for c, s in zip(coords, strides) if s != 0]
    if offset:
        terms.append(f"{offset}LL")
    return " + ".join(terms) if terms else "0"


def broadcast_strides(in_shape: Sequence[int], in_strides: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Strides that read an input of `in_shape` broadcast (NumPy rules) to `out_shape`."""
    pad = len(out_shape) - len(in_shape)
    if pad < 0:
        raise ExecutionError(f"cannot broadcast {list(in_shape)} to {list(out_shape)}")
    out = []
    for k, d in enumerate(out_shape):
        if k < pad:
            out.append(0)
            continue
        di, si = in_shape[k - pad], in_strides[k - pad]
        if di == d:
            out.append(si if d != 1 else 0)
        elif di == 1:
            out.append(0)
        else:
            raise ExecutionError(f"cannot broadcast {list(in_shape)} to {list(out_shape)}")
    return tuple(out)


def numel(shape: Sequence[int]) -> int:
    return prod(shape)
