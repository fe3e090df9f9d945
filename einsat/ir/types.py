"""Typed values: a tensor type is a static shape and a dtype."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

_SHORT = {
    "float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16",
    "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "bool",
}


def is_float(dtype) -> bool:
    """A floating-point dtype: NumPy's (kind 'f') or ml_dtypes' bfloat16, which NumPy files under
    kind 'V' (`np.issubdtype(bfloat16, np.floating)` is False)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor's static shape and element type. Dims are non-negative ints."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __init__(self, shape, dtype=np.float32):
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "dtype", np.dtype(dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.shape))}] {_SHORT.get(self.dtype.name, self.dtype.name)}"

    __repr__ = __str__

    @staticmethod
    def of(array) -> "TensorType":
        return TensorType(np.shape(array), np.asarray(array).dtype)
