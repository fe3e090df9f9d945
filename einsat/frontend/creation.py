"""Array creation while tracing: `np.zeros((n, 2048))`, `np.zeros_like(x)`, `np.full(shape, v)`, ...

Buffers an imperative kernel fills in place must be traced values. The `*_like` functions and
the constructors with `like=<traced array>` reach einsat through NumPy's `__array_function__`;
the plain constructors (`np.zeros/ones/empty/full(shape)`) dispatch on nothing traced, so
`numpy_constructors()` swaps them in the `numpy` module while a function is traced (the name
`np.zeros` is looked up at each call; a `from numpy import zeros` made before tracing keeps
NumPy's own). Each buffer is fresh storage: an `expand` of a scalar constant, which exports as
ONNX `ConstantOfShape` and stays one after optimization (never a weight the size of the
buffer); `empty`'s unspecified contents are zeros here. Until it is written, a buffer's
contents are known (`Trace.known`): NumPy functions einsat does not trace (`np.triu` of a mask
of ones) run eagerly on it and give plain NumPy arrays, as they would without einsat.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np

from einsat.frontend import emit
from einsat.frontend.dispatch import FUNCTIONS, implements
from einsat.frontend.tracer import LIBRARY_DIRS, current_trace, fail
from einsat.ir.registry import Op


def _filled(tr, value, shape, dtype):
    c = tr.constant(np.asarray(value, dtype=dtype))
    if not shape:
        out = emit.apply(tr, Op.IDENTITY, [c], "full")
    else:
        out = emit.apply(tr, Op.EXPAND, [c], "full", shape=tuple(shape))
    tr.known[out._name] = (tr.constants[c], tuple(shape), dtype)
    return out


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
        tr = like._trace if emit.is_traced(like) else current_trace()
        if tr is None:
            raise fail("np.zeros/ones/full/empty with like= a traced array, outside a trace")
        value = fill(args, kw)
        if emit.is_traced(value):
            raise fail("np.full with a traced fill value: use np.zeros(shape) + value")
        if len(args) > dtype_arg:
            dtype = args[dtype_arg]
        if dtype is None:
            dtype = np.asarray(value).dtype if fill is _full_value else np.float64
        return _filled(tr, value, _shape(shape), np.dtype(dtype))
    return make


def _full_value(args, kw):
    return args[0] if args else kw["fill_value"]


FUNCTIONS[np.zeros] = FUNCTIONS[np.empty] = _constructor(lambda a, kw: 0)
FUNCTIONS[np.ones] = _constructor(lambda a, kw: 1)
FUNCTIONS[np.full] = _constructor(_full_value, dtype_arg=1)
_NUMPY_CONSTRUCTORS = {name: getattr(np, name) for name in ("zeros", "ones", "empty", "full")}


def _traced_constructor(name: str):
    numpy_fn, traced_fn = _NUMPY_CONSTRUCTORS[name], FUNCTIONS[_NUMPY_CONSTRUCTORS[name]]

    def constructor(shape, *args, **kwargs):
        if (current_trace() is None or kwargs.get("like") is not None
                or sys._getframe(1).f_code.co_filename.startswith(LIBRARY_DIRS)):
            return numpy_fn(shape, *args, **kwargs)  # other threads, NumPy's and einsat's own calls
        return traced_fn(shape, *args, **kwargs)
    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = numpy_fn.__doc__
    return constructor


_TRACED_CONSTRUCTORS = {name: _traced_constructor(name) for name in _NUMPY_CONSTRUCTORS}
_patched = 0  # nesting depth of `numpy_constructors`


@contextmanager
def numpy_constructors():
    """While open, `np.zeros/ones/empty/full(shape)` called in a trace make traced buffers (the
    constructors fall back to NumPy's outside a trace and when called from NumPy or einsat, so
    other threads and library code are unaffected)."""
    global _patched
    if not _patched:
        for name, fn in _TRACED_CONSTRUCTORS.items():
            setattr(np, name, fn)
    _patched += 1
    try:
        yield
    finally:
        _patched -= 1
        if not _patched:
            for name, fn in _NUMPY_CONSTRUCTORS.items():
                setattr(np, name, fn)


@implements(np.shape)
def _np_shape(a):
    return a.shape


@implements(np.ndim)
def _np_ndim(a):
    return a.ndim


@implements(np.size)
def _np_size(a, axis=None):
    return a.size if axis is None else a.shape[axis]
