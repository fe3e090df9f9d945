"""Matrix products: matmul (NumPy/ONNX semantics), batchmatmul, gemm."""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.registry import Op, OpDef, ShapeError, broadcast_shapes, register, same_dtype
from einsat.ir.types import TensorType


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ShapeError("matmul needs inputs of rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"contracted dims differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@register
class MatMul(OpDef):
    op = Op.MATMUL
    arity = (2, 2)
    multilinear = True
    onnx_type = "MatMul"

    def infer(self, types, attrs):
        a, b = types
        return [TensorType(matmul_shape(a.shape, b.shape), same_dtype(types))]

    def numpy(self, args, attrs):
        return [np.matmul(*args)]

    def flops(self, ins, outs, attrs):
        k = ins[0].shape[-1]
        return 2 * outs[0].size * k
