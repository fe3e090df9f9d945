"""Array creation on traced arrays: `np.zeros_like(x, shape=...)`, `np.full(shape, v, like=x)`, ...

Buffers an imperative kernel fills in place must be traced values, so they are created from a
traced array: the `*_like` functions, or the constructors with `like=`. Each is fresh storage
(an `expand` of a constant); `empty`'s unspecified contents are zeros here.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import emit
from einsat.frontend.dispatch import FUNCTIONS, implements
from einsat.frontend.tracer import fail
from einsat.ir.registry import Op


def _filled(tr, value, shape, dtype):
    c = tr.constant(np.asarray(value, dtype=dtype))
    if not shape:
        return emit.apply(tr, Op.IDENTITY, [c], "full")
    return emit.apply(tr, Op.EXPAND, [c], "full", shape=tuple(shape))


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)


def _like(fill):
    def make(prototype, dtype=None, order="K", subok=True, shape=None, **kw):
        """x_like(prototype, dtype, order, subok, shape): fresh storage (empty's unspecified
        contents are zeros here)."""
        dtype = np.dtype(dtype or prototype.dtype)
        shape = prototype.shape if shape is None else _shape(shape)
        return _filled(prototype._trace, fill, shape, dtype)
    return make


FUNCTIONS[np.zeros_like] = FUNCTIONS[np.empty_like] = _like(0)
FUNCTIONS[np.ones_like] = _like(1)


@implements(np.full_like)
def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    if emit.is_traced(fill_value):
        raise fail("np.full_like with a traced fill value: use np.zeros_like(a) + value")
    return _like(fill_value)(a, dtype, order, subok, shape)


def _constructor(fill, dtype_arg=0):
    def make(shape, *args, dtype=None, order="C", like=None, **kw):
        if like is None or not emit.is_traced(like):
            raise fail("np.zeros/ones/full/empty need like=<traced array> here")
        value = fill(args, kw)
        if len(args) > dtype_arg:
            dtype = args[dtype_arg]
        if dtype is None:
            dtype = np.asarray(value).dtype if fill is _full_value else np.float64
        return _filled(like._trace, value, _shape(shape), np.dtype(dtype))
    return make


def _full_value(args, kw):
    return args[0] if args else kw["fill_value"]


FUNCTIONS[np.zeros] = FUNCTIONS[np.empty] = _constructor(lambda a, kw: 0)
FUNCTIONS[np.ones] = _constructor(lambda a, kw: 1)
FUNCTIONS[np.full] = _constructor(_full_value, dtype_arg=1)


@implements(np.shape)
def _np_shape(a):
    return a.shape


@implements(np.ndim)
def _np_ndim(a):
    return a.ndim


@implements(np.size)
def _np_size(a, axis=None):
    return a.size if axis is None else a.shape[axis]
