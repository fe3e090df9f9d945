"""NumPy functions on traced arrays (the `__array_function__` protocol).

Views (reshape, transpose, swapaxes, squeeze, expand_dims, broadcast_to, flip) are recorded as
`View` statements, NumPy deciding on the shadows whether a reshape can be a view; copies,
reductions and constructors are pure ops; `np.copyto` / `np.putmask` are in-place updates.
Functions whose output shape depends on the data (`np.nonzero`, `np.unique`, ...) fail with a
clear error, and so does any function einsat does not know.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import emit, indexing
from einsat.frontend.dispatch import implements
from einsat.frontend.tracer import fail
from einsat.frontend.ufuncs import call, reduce, trace_of, write_out
from einsat.ir.registry import Op


def _axis(a: int, ndim: int) -> int:
    if not -ndim <= a < ndim:
        raise fail(f"axis {a} is out of bounds for an array of rank {ndim}")
    return a % ndim


# -- views ------------------------------------------------------------------------------------
@implements(np.reshape)
def _reshape(a, shape=None, order="C", **kw):
    shape = kw.pop("newshape", shape)
    if order != "C":
        raise fail("only C-order reshapes are supported")
    tr = a._trace
    try:
        target = tr.shadow(a._name).reshape(shape).shape
    except (ValueError, TypeError) as e:
        raise fail(f"cannot reshape {list(a.shape)}: {e}") from None
    return emit.view(tr, a._name, (("reshape", target),), [], "reshape")


@implements(np.ravel)
def _ravel(a, order="C"):
    return _reshape(a, (-1,), order)


@implements(np.transpose)
def _transpose(a, axes=None):
    perm = tuple(range(a.ndim))[::-1] if axes is None else tuple(_axis(x, a.ndim) for x in axes)
    if sorted(perm) != list(range(a.ndim)):
        raise fail(f"axes {axes} don't match the array's rank {a.ndim}")
    return emit.view(a._trace, a._name, (("transpose", perm),), [], "transpose")


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    perm = list(range(a.ndim))
    i, j = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return _transpose(a, perm)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    src, dst = _axis(source, a.ndim), _axis(destination, a.ndim)
    order = [k for k in range(a.ndim) if k != src]
    order.insert(dst, src)
    return _transpose(a, order)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    axes = [k for k, d in enumerate(a.shape) if d == 1] if axis is None else \
        [_axis(x, a.ndim) for x in (axis if isinstance(axis, tuple) else (axis,))]
    if any(a.shape[k] != 1 for k in axes):
        raise fail("cannot select an axis to squeeze out which has size not equal to one")
    return _reshape(a, tuple(d for k, d in enumerate(a.shape) if k not in axes))


@implements(np.expand_dims)
def _expand_dims(a, axis):
    axes = axis if isinstance(axis, tuple) else (axis,)
    rank = a.ndim + len(axes)
    new = {_axis(x, rank) for x in axes}
    dims = iter(a.shape)
    return _reshape(a, tuple(1 if k in new else next(dims) for k in range(rank)))


@implements(np.broadcast_to)
def _broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return emit.view(a._trace, a._name, (("expand", shape),), [], "broadcast")


@implements(np.flip)
def _flip(m, axis=None):
    axes = range(m.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    key = [slice(None)] * m.ndim
    for x in axes:
        key[_axis(x, m.ndim)] = slice(None, None, -1)
    return m[tuple(key)]


# -- copies and computations -------------------------------------------------------------------
@implements(np.copy)
def _copy(a, order="K", subok=False):
    return emit.apply(a._trace, Op.IDENTITY, [emit.lift(a._trace, a)], "copy")


@implements(np.astype)
def _astype(x, dtype, copy=True, **kw):
    return x.astype(dtype, copy=copy)


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise fail("np.where(condition) returns a data-dependent number of indices; "
                   "use np.where(condition, x, y)")
    tr = trace_of([condition, x, y])
    c = emit.lift(tr, condition)
    if tr.types[c].dtype != np.bool_:
        c = call(tr, np.not_equal, [emit.wrap(tr, c), 0])._name
    dt = np.result_type(*(emit.weak_dtype(v) for v in (x, y)))
    names = [emit.cast(tr, emit.lift(tr, v), dt) for v in (x, y)]
    return emit.select(tr, c, *names)


@implements(np.clip)
def _clip(a, a_min=None, a_max=None, out=None, **kw):
    a_min, a_max = kw.pop("min", a_min), kw.pop("max", a_max)
    tr = trace_of([a, a_min, a_max])
    r = a
    if a_min is not None:
        r = call(tr, np.maximum, [r, a_min])
    if a_max is not None:
        r = call(tr, np.minimum, [r, a_max])
    return r if out is None else write_out(tr, out, r)


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    tr = trace_of([list(arrays)])
    dt = np.dtype(dtype) if dtype else np.result_type(*(emit.weak_dtype(a) for a in arrays))
    names = [emit.cast(tr, emit.lift(tr, a), dt) for a in arrays]
    axis = _axis(axis, tr.types[names[0]].rank)
    r = emit.apply(tr, Op.CONCAT, names, "concat", axis=axis)
    return r if out is None else write_out(tr, out, r)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    tr = trace_of([arrays])
    rank = np.ndim(arrays[0]) if not emit.is_traced(arrays[0]) else arrays[0].ndim
    ax = _axis(axis, rank + 1)
    expanded = [_expand_dims(a, ax) if emit.is_traced(a) else np.expand_dims(a, ax) for a in arrays]
    r = _concatenate(expanded, ax, dtype=dtype)
    return r if out is None else write_out(tr, out, r)


@implements(np.dot)
def _dot(a, b, out=None):
    if np.ndim(a) > 2 or np.ndim(b) > 2:
        raise fail("np.dot on arrays of rank > 2 is not supported; use np.matmul")
    tr = trace_of([a, b])
    r = call(tr, np.matmul, [a, b]) if np.ndim(a) and np.ndim(b) else call(tr, np.multiply, [a, b])
    return r if out is None else write_out(tr, out, r)


@implements(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    return indexing.getitem(a, (slice(None),) * _axis(axis, a.ndim) + (np.asarray(indices)
                            if not emit.is_traced(indices) else indices,))


@implements(np.sum)
def _sum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return _red(Op.REDUCE_SUM, a, axis, keepdims, dtype, out)


@implements(np.mean)
def _mean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return _red(Op.REDUCE_MEAN, a, axis, keepdims, dtype, out)


@implements(np.max, np.amax)
def _max(a, axis=None, out=None, keepdims=False, **kw):
    return _red(Op.REDUCE_MAX, a, axis, keepdims, None, out)


@implements(np.min, np.amin)
def _min(a, axis=None, out=None, keepdims=False, **kw):
    return _red(Op.REDUCE_MIN, a, axis, keepdims, None, out)


def _red(op, a, axis, keepdims, dtype, out):
    tr = trace_of([a])
    r = reduce(tr, op, a, axis, keepdims, dtype)
    return r if out is None else write_out(tr, out, r)


@implements(np.argmax)
def _argmax(a, axis=None, out=None, keepdims=False):
    tr = a._trace
    if axis is None:
        a, axis = _reshape(a, (-1,)), 0
    r = tr.scalar(emit.apply(tr, Op.ARGMAX, [a._name], "argmax", axis=_axis(axis, a.ndim),
                             keepdims=int(keepdims)))
    return r if out is None else write_out(tr, out, r)


# -- in-place updates ---------------------------------------------------------------------------
@implements(np.copyto)
def _copyto(dst, src, casting="same_kind", where=True):
    tr = trace_of([dst, src])
    if where is not True:
        src = _where(where, src, dst)
    write_out(tr, dst, emit.wrap(tr, emit.lift(tr, src)))


@implements(np.putmask)
def _putmask(a, mask, values):
    tr = trace_of([a, mask, values])
    if np.shape(values) != () and tuple(np.shape(values)) != a.shape:
        raise fail("np.putmask with values of another shape repeats them cyclically: not supported")
    write_out(tr, a, _where(mask, values, a))

