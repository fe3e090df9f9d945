"""NumPy ufuncs on traced arrays: `np.exp(x)`, `x + 1`, `np.maximum(v, 0, out=v)`, `np.add.reduce`.

Dtypes follow NumPy exactly: `ufunc.resolve_dtypes` picks the loop (Python scalars are weak, as
in NumPy 2), inputs are cast to it, and `out=` casts the result under NumPy's same-kind rule.
So the functional program runs the very same NumPy loops as the eager function, and its
outputs are bitwise equal. `out=` on a traced array is an in-place update (a `Mutate`).
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import emit
from einsat.frontend.tracer import Trace, fail
from einsat.ir.groups import BINARY_UFUNCS, BOOL_UFUNCS, REDUCE_UFUNCS, UNARY_UFUNCS
from einsat.ir.registry import Op

# NumPy ufunc -> the op it is traced as: the registry's `ufunc`/`bool_ufunc`/`reduces` facts
UNARY = UNARY_UFUNCS
BINARY = BINARY_UFUNCS
BOOL_BITWISE = BOOL_UFUNCS  # on bools only
REDUCE = REDUCE_UFUNCS  # np.add.reduce is reduce_sum


def trace_of(values) -> Trace:
    for v in values:
        if emit.is_traced(v):
            return v._trace
        if isinstance(v, (tuple, list)):
            for e in v:
                if emit.is_traced(e):
                    return e._trace
    raise fail("no traced array among the arguments")


def _dtype_key(x):
    """What `resolve_dtypes` needs: a dtype for arrays, the Python type for weak scalars."""
    if emit.is_traced(x):
        return x.dtype
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return type(x)
    return np.asarray(x).dtype


def ufunc_call(ufunc, method, inputs, kwargs):
    out = kwargs.pop("out", None)
    tr = trace_of(list(inputs) + list(out or ()))
    if method == "reduce":
        return _reduce(tr, ufunc, inputs, kwargs, out)
    if method != "__call__":
        raise fail(f"np.{ufunc.__name__}.{method} is not supported by einsat's tracer")
    for k in ("where", "casting", "order", "subok", "signature"):
        if k in kwargs:
            raise fail(f"np.{ufunc.__name__}(..., {k}=...) is not supported")
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise fail(f"np.{ufunc.__name__}: unsupported keyword(s) {sorted(kwargs)}")
    result = call(tr, ufunc, inputs, dtype)
    if out is None or all(o is None for o in out):
        return result
    return write_out(tr, out[0], result)


def call(tr: Trace, ufunc, inputs, dtype=None):
    """Record `ufunc(*inputs)` with NumPy's dtype resolution; returns a traced array (a scalar
    when 0-d, as NumPy returns)."""
    return tr.scalar(_call(tr, ufunc, inputs, dtype))


def _call(tr: Trace, ufunc, inputs, dtype=None):
    keys = tuple(_dtype_key(x) for x in inputs)
    try:
        loop = ufunc.resolve_dtypes(keys + (None,) * ufunc.nout,
                                    signature=(None,) * ufunc.nin + ((np.dtype(dtype),) if dtype else (None,)))
    except TypeError as e:  # NumPy's "no loop" errors are TypeErrors
        raise fail(f"np.{ufunc.__name__} has no loop for {keys}: {e}") from None
    names = [emit.cast(tr, emit.lift(tr, x), loop[k]) for k, x in enumerate(inputs)]
    if ufunc in UNARY:
        return emit.apply(tr, UNARY[ufunc], names, ufunc.__name__)
    if ufunc in BINARY:
        if ufunc is np.divide and not np.issubdtype(loop[0], np.floating):
            raise fail(f"np.divide on {loop[0]} is not supported")
        return emit.apply(tr, BINARY[ufunc], names, ufunc.__name__)
    if ufunc in BOOL_BITWISE:
        if loop[0] != np.bool_:
            raise fail(f"np.{ufunc.__name__} on {loop[0]} integers is not supported (only on bools)")
        return emit.apply(tr, BOOL_BITWISE[ufunc], names, ufunc.__name__)
    if ufunc is np.not_equal:
        return emit.apply(tr, Op.LOGICAL_NOT, [emit.apply(tr, Op.EQUAL, names)._name], "not_equal")
    if ufunc is np.square:
        return emit.apply(tr, Op.MUL, [names[0], names[0]], "square")
    if ufunc is np.reciprocal and np.issubdtype(loop[0], np.floating):
        one = tr.constant(np.ones((), loop[0]))
        return emit.apply(tr, Op.DIV, [one, names[0]], "reciprocal")
    if ufunc is np.floor_divide and np.issubdtype(loop[0], np.floating):
        q = emit.apply(tr, Op.DIV, names, "div")
        return emit.apply(tr, Op.FLOOR, [q._name], "floor_divide")
    raise fail(f"np.{ufunc.__name__} is not supported by einsat's tracer")


def write_out(tr: Trace, target, result):
    """`out=target`: an in-place update of a traced array; returns the target."""
    if not emit.is_traced(target):
        raise fail("a traced result is written into a NumPy array (out=...): einsat cannot see that "
                   "buffer; create buffers inside the traced function, e.g. np.zeros(shape)")
    emit.mutate(tr, emit.lift(tr, target), result._name)
    return target


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise fail(f"axis {a} is out of bounds for an array of rank {ndim}")
        out.append(a % ndim)
    return tuple(sorted(set(out)))


def reduce(tr: Trace, op: Op, x, axis=None, keepdims=False, dtype=None):
    """A reduction with NumPy's result dtypes (sums of bools and small ints are int64, means of
    ints are float64)."""
    name = emit.lift(tr, x)
    t = tr.types[name]
    if dtype is not None:
        name = emit.cast(tr, name, dtype)
    elif op is Op.REDUCE_SUM and (t.dtype == np.bool_ or np.issubdtype(t.dtype, np.integer)):
        name = emit.cast(tr, name, np.int64 if t.dtype.kind != "u" else np.uint64)
    elif op is Op.REDUCE_MEAN and not np.issubdtype(t.dtype, np.inexact):
        name = emit.cast(tr, name, np.float64)
    axes = _axes(axis, t.rank)
    if t.rank == 0:
        return tr.scalar(emit.apply(tr, Op.IDENTITY, [name], op.value))
    if any(t.shape[a] == 0 for a in axes) and op in (Op.REDUCE_MAX, Op.REDUCE_MIN):
        raise fail("zero-size array to reduction operation which has no identity")
    return tr.scalar(emit.apply(tr, op, [name], op.value, axes=axes, keepdims=int(bool(keepdims))))


def _reduce(tr, ufunc, inputs, kwargs, out):
    if ufunc not in REDUCE or len(inputs) != 1:
        raise fail(f"np.{ufunc.__name__}.reduce is not supported")
    r = reduce(tr, REDUCE[ufunc], inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims", False),
               kwargs.get("dtype"))
    return r if out is None else write_out(tr, out[0], r)
