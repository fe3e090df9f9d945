"""Typed values: a tensor type is a shape of dims and a dtype.

A dim is an `int` or a `SymDim` (`einsat.ir.dims`: a polynomial over named symbols such as
`batch`, `past_sequence + 1`). A static type's shape is a tuple of ints, as it always was;
`is_static` tells them apart, `concrete(sizes)` gives the static type at given symbol values.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Mapping

import numpy as np

from einsat.ir.dims import SymDim, substitute

_SHORT = {
    "float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16",
    "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "bool",
}


def is_float(dtype) -> bool:
    """A floating-point dtype: NumPy's (kind 'f') or ml_dtypes' bfloat16, which NumPy files under
    kind 'V' (`np.issubdtype(bfloat16, np.floating)` is False)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _dim(d):
    return d if isinstance(d, SymDim) else int(d)


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor's shape and element type. Dims are non-negative ints or `SymDim`s."""

    shape: tuple
    dtype: np.dtype

    def __init__(self, shape, dtype=np.float32):
        try:  # the hot path: all ints (a SymDim's int() raises a TypeError)
            shape = tuple(map(int, shape))
        except TypeError:
            shape = tuple(map(_dim, shape))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", np.dtype(dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """Every dim is an int (no symbol)."""
        return not any(isinstance(d, SymDim) for d in self.shape)

    @property
    def size(self):
        """The element count: an int, or a `SymDim` for a symbolic shape."""
        return prod(self.shape)

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset().union(*(d.symbols for d in self.shape if isinstance(d, SymDim)))

    def concrete(self, sizes: Mapping[str, int]) -> "TensorType":
        """This type with the symbols named in `sizes` replaced by their values (the static type
        when `sizes` names every symbol; a static type is returned as it is)."""
        if self.is_static:
            return self
        return TensorType([substitute(d, sizes) for d in self.shape], self.dtype)

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.shape))}] {_SHORT.get(self.dtype.name, self.dtype.name)}"

    __repr__ = __str__

    @staticmethod
    def of(array) -> "TensorType":
        return TensorType(np.shape(array), np.asarray(array).dtype)
