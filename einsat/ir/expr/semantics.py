"""NumPy semantics of expressions: masked gathers over an iterator grid, then a reduction.

The grid of an expression is its traversal points × its summation points. It is evaluated in
blocks of at most `BLOCK` grid points: a block's traversal iterators are column vectors and its
summation iterators row vectors, every subscript is computed by broadcasting, every read is one
masked gather (0 outside the tensor: padding), and the block's rows are reduced. No Python loop
runs over elements; scopes are evaluated into arrays first (each once).

Element-wise functions are the registry's own NumPy semantics (`Call("relu", ...)` runs
`opdef(Op.RELU).numpy`), with their default attributes.

In a half dtype (fp16, bf16) half is storage, not arithmetic: the inputs are widened to fp32
(exactly), the whole expression (its element-wise steps, its sums, its scopes) is computed in
fp32, and the result is rounded to the half once, as einsat's generated GPU kernels load half
into float and round once when they store (docs/precision.md). A fused chain of half ops thus
drops its inner roundings, and a norm's statistics never accumulate in half.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

import numpy as np

from einsat.errors import ShapeError
from einsat.ir.expr.nodes import Body, Const, Expr, Guard, Read, scopes
from einsat.ir.registry import Op, opdef
from einsat.ir.types import is_float

BLOCK = 1 << 20


def evaluate(e: Expr, inputs: Sequence[np.ndarray], dtype=None) -> np.ndarray:
    """The value of `e` on `inputs` (the arrays its reads name by position), in `dtype`
    (default: the inputs' result type)."""
    arrays = [np.asarray(a) for a in inputs]
    if dtype is None:
        dtype = np.result_type(*arrays) if arrays else np.float32
    dtype = np.dtype(dtype)
    if is_float(dtype) and dtype.itemsize == 2:  # half storage: computed in fp32, rounded once
        wide = [a.astype(np.float32) if is_float(a.dtype) and a.dtype.itemsize == 2 else a for a in arrays]
        return _Evaluator(wide, np.dtype(np.float32)).expr(e).astype(dtype)
    return _Evaluator(arrays, dtype).expr(e)


class _Evaluator:
    def __init__(self, inputs: list[np.ndarray], dtype: np.dtype):
        self.inputs = inputs
        self.dtype = dtype
        self.acc = np.float64 if dtype.kind == "f" else dtype
        self.values: dict[Expr, tuple[np.ndarray, tuple[int, ...]]] = {}

    def source(self, src) -> tuple[np.ndarray, tuple[int, ...]]:
        """(array, offsets): a scope's array is read at subscript - its iterators' lows."""
        if isinstance(src, int):
            if src >= len(self.inputs):
                raise ShapeError(f"the expression reads input {src}, but only {len(self.inputs)} are given")
            a = self.inputs[src]
            return a, (0,) * a.ndim
        return self.values[src]

    def expr(self, e: Expr) -> np.ndarray:
        for s in scopes(e):
            if s not in self.values:
                self.values[s] = (self.expr(s), s.lows)
        shape = e.shape
        out = np.zeros(prod(shape), dtype=self.dtype)
        n_loop, n_sum = out.size, e.sum_points()
        if n_loop == 0:
            return out.reshape(shape)
        rows = max(1, min(n_loop, BLOCK // max(n_sum, 1)))
        cols = max(1, min(n_sum, BLOCK // rows))
        for t0 in range(0, n_loop, rows):
            t = np.arange(t0, min(t0 + rows, n_loop), dtype=np.int64)
            values = _coords(t, e.loops, column=True)
            acc = None
            for s0 in range(0, max(n_sum, 1), cols):
                s = np.arange(s0, min(s0 + cols, n_sum), dtype=np.int64)
                values.update(_coords(s, e.sums, column=False))
                block = np.broadcast_to(self.body(e.body, values), (len(t), len(s) if e.sums else 1))
                part = block.max(axis=1) if e.reduce == "max" else block.sum(axis=1, dtype=self.acc)
                acc = part if acc is None else (np.maximum(acc, part) if e.reduce == "max" else acc + part)
            if e.sums and n_sum == 0:
                acc = np.zeros(len(t), self.acc)
            out[t0:t0 + len(t)] = acc
        return out.reshape(shape)

    def body(self, b: Body, values) -> np.ndarray:
        if isinstance(b, Read):
            array, offsets = self.source(b.src)
            if len(b.idx) != array.ndim:
                raise ShapeError(f"a read with {len(b.idx)} subscripts of a tensor of rank {array.ndim}")
            return gather(array, [i.evaluate(values) - o for i, o in zip(b.idx, offsets)]).astype(self.dtype)
        if isinstance(b, Const):
            return np.asarray(b.value, dtype=self.dtype)
        if isinstance(b, Guard):
            i = np.asarray(b.idx.evaluate(values))
            return np.where((i >= b.lo) & (i < b.hi), self.body(b.value, values), np.zeros((), self.dtype))
        return apply(b.fn, [np.asarray(self.body(a, values), dtype=self.dtype) for a in b.args])


def _coords(flat: np.ndarray, its, column: bool) -> dict[str, np.ndarray]:
    """Iterator values at flat grid positions, as a column (traversal) or row (summation)."""
    out = {}
    rest = flat
    for it in reversed(its):
        size = max(it.size, 1)
        v = rest % size + it.lo
        rest = rest // size
        out[it.name] = v[:, None] if column else v[None, :]
    return out


def gather(array: np.ndarray, idx: list) -> np.ndarray:
    """array[idx...] by broadcasting, 0 where any subscript is outside the array."""
    if not idx:
        return np.asarray(array)
    idx = np.broadcast_arrays(*[np.asarray(i, dtype=np.int64) for i in idx])
    inside = np.ones(idx[0].shape, dtype=bool)
    flat = np.zeros(idx[0].shape, dtype=np.int64)
    for i, d in zip(idx, array.shape):
        inside &= (i >= 0) & (i < d)
        flat = flat * d + np.clip(i, 0, max(d - 1, 0))
    if array.size == 0:
        return np.zeros(flat.shape, array.dtype)
    vals = array.reshape(-1)[flat]
    return np.where(inside, vals, np.zeros((), array.dtype))


def apply(fn: str, args: list[np.ndarray]) -> np.ndarray:
    """An element-wise registry op by name, with its default attributes."""
    d = opdef(Op(fn))
    attrs = {k: a.default for k, a in d.attrs.items()}
    return d.numpy(args, attrs)[0]
