"""What every lowering module uses: the table of op implementations (`implements`) and the
device-array helpers (operands of generated kernels, contiguous copies, reshapes as views).

An implementation is `fn(dev, node, args, out_types) -> list[array]`, registered under the
op's name with `@implements("conv")`; `einsat.gpu.lower` imports every lowering module, so the
table is complete once it is imported.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from einsat.gpu.kernels.elementwise import Operand, copy_kernel
from einsat.ir.types import TensorType

Impl = Callable[[Any, Any, list, Sequence[TensorType]], list]
IMPLS: dict[str, Impl] = {}
HOST_OPS = frozenset({"opaque"})


GEMM_LOWERED: set[str] = set()  # ops lowered as GEMMs whose algorithms the device chooses (`gemm=True`)


def implements(*names: str, gemm: bool = False):
    """Register `fn` as the lowering of the ops `names`; `gemm=True`: each runs as GEMMs whose
    algorithm the device chooses and the profile records (`profiler.stale` asks)."""
    def deco(fn: Impl) -> Impl:
        for n in names:
            IMPLS[n] = fn
            if gemm:
                GEMM_LOWERED.add(n)
        return fn
    return deco


def operand(a) -> Operand:
    return Operand.of(a)


def run_kernel(dev, kernel, inputs: list, out_shape, out_dtype):
    out = dev.empty(out_shape, out_dtype)
    dev.launch(kernel, list(inputs) + [out])
    return out


def materialize(dev, a):
    """A contiguous copy of any view (one generated copy kernel)."""
    return run_kernel(dev, copy_kernel(operand(a)), [a], a.shape, a.dtype)


def is_contiguous(a) -> bool:
    expect = a.dtype.itemsize
    for d, s in zip(reversed(a.shape), reversed(a.strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def contiguous(dev, a):
    return a if is_contiguous(a) else materialize(dev, a)


def view_strides(shape, strides, itemsize: int, new_shape) -> tuple[int, ...] | None:
    """Byte strides of `new_shape` viewing the same elements as (shape, strides), or None
    when a reshape of that layout needs a copy (NumPy's rule, computed on metadata only)."""
    if int(np.prod(shape)) == 0:
        return tuple(itemsize for _ in new_shape)
    fake = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=f"V{itemsize}"), shape, strides)
    try:
        return np.reshape(fake, tuple(new_shape), copy=False).strides
    except ValueError:
        return None


def reshape(dev, a, new_shape):
    """A view of `a` with `new_shape` when the layout allows it, else a contiguous copy."""
    new_shape = tuple(int(d) for d in new_shape)
    if tuple(a.shape) == new_shape:
        return a
    st = view_strides(a.shape, a.strides, a.dtype.itemsize, new_shape)
    if st is None:
        a = materialize(dev, a)
        st = view_strides(a.shape, a.strides, a.dtype.itemsize, new_shape)
    return dev.xp.lib.stride_tricks.as_strided(a, new_shape, st)
