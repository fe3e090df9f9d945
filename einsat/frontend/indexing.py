"""NumPy indexing on traced arrays: `x[key]` and `x[key] = value`.

Basic indexing (ints, slices with steps and negative bounds, `...`, `None`, traced integer
scalars such as a loop index) is a view: one `View` statement with a spec of `slice` / `select` /
`dselect` steps and, for `None`, a final `reshape`. As in NumPy, indexing every axis with
integers gives a scalar *copy*, and so does a 0-d integer *array* index (advanced indexing),
though writing through it updates the array.
Advanced indexing follows NumPy too: one integer array among full slices reads a copy (`gather`),
and a boolean mask writes `x[mask] = v` as `x[...] = where(mask, v, x)`. Reading through a
boolean mask has a data-dependent shape and is an error.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import emit
from einsat.frontend.tracer import Trace, fail
from einsat.ir.registry import Op


def _expand(key, ndim: int) -> list:
    key = list(key) if isinstance(key, tuple) else [key]
    n_ellipsis = sum(k is Ellipsis for k in key)
    if n_ellipsis > 1:
        raise fail("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > ndim:
        raise fail(f"too many indices: {used} for an array of rank {ndim}")
    if n_ellipsis:
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        key[at:at + 1] = [slice(None)] * (ndim - used)
        return key
    return key + [slice(None)] * (ndim - used)


def _has_ellipsis(key) -> bool:
    return any(k is Ellipsis for k in key)  # `in` would compare traced arrays with ==


def _kind(k) -> str:
    if k is None:
        return "none"
    if isinstance(k, slice):
        return "slice"
    if isinstance(k, (bool, np.bool_)):
        return "mask"
    if isinstance(k, (int, np.integer)):
        return "int"
    if emit.is_traced(k):
        if k.dtype == np.bool_:
            return "mask"
        if np.issubdtype(k.dtype, np.integer):
            return "dyn" if k.ndim == 0 else "array"
        raise fail(f"arrays used as indices must be of integer or boolean type, not {k.dtype}")
    a = np.asarray(k)
    if a.dtype == np.bool_:
        return "mask"
    if np.issubdtype(a.dtype, np.integer):
        return "int" if a.ndim == 0 else "array"
    raise fail(f"cannot index with {type(k).__name__}")


def _static_int(k) -> int:
    if emit.is_traced(k):
        raise fail("a slice bound is a traced value: the slice's length would depend on the data")
    try:
        return int(k.__index__())
    except (AttributeError, TypeError):
        raise fail(f"slice bounds must be integers, got {type(k).__name__}") from None


def basic_spec(tr: Trace, shape: tuple[int, ...], key: list) -> tuple[tuple, list[str]]:
    """(spec, dynamic index names) for a basic index already expanded to every axis."""
    steps, dyn, out_dims, axis = [], [], [], 0
    newaxis = False
    for k in key:
        kind = _kind(k)
        if kind == "none":
            out_dims.append(None)
            newaxis = True
        elif kind == "slice":
            bounds = [None if b is None else _static_int(b) for b in (k.start, k.stop, k.step)]
            if bounds[2] == 0:
                raise fail("slice step cannot be zero")
            start, stop, step = slice(*bounds).indices(shape[axis])
            count = len(range(start, stop, step))
            if (start, step, count) != (0, 1, shape[axis]):
                steps.append(("slice", axis, start if count else 0, step, count))
            out_dims.append(count)
            axis += 1
        elif kind == "int":
            i = int(k)
            if not -shape[axis] <= i < shape[axis]:
                raise fail(f"index {i} is out of bounds for axis {axis} with size {shape[axis]}")
            steps.append(("select", axis, i % shape[axis]))
            shape = shape[:axis] + shape[axis + 1:]
        elif kind == "dyn":
            steps.append(("dselect", axis, len(dyn)))
            dyn.append(emit.lift(tr, k))
            shape = shape[:axis] + shape[axis + 1:]
        else:
            raise fail(f"unexpected {kind} index")  # callers route advanced indices elsewhere
    if newaxis:
        steps.append(("reshape", tuple(1 if d is None else d for d in out_dims)))
    return tuple(steps), dyn


def getitem(x, key):
    tr = x._trace
    raw = list(key) if isinstance(key, tuple) else [key]
    kinds = [_kind(k) for k in raw if k is not Ellipsis]
    if "mask" in kinds:
        raise fail("indexing with a boolean mask gives a data-dependent shape; "
                   "use np.where(mask, x, fill) instead")
    if "array" in kinds:
        return _gather(x, raw, kinds)
    spec, dyn = basic_spec(tr, x.shape, _expand(key, x.ndim))
    # NumPy gives a scalar *copy* when integers index every axis (and no `...` is written)
    scalar = not _has_ellipsis(raw) and len(kinds) == x.ndim and all(k in ("int", "dyn") for k in kinds)
    v = emit.view(tr, x._name, spec, dyn) if spec else x
    if scalar:
        return tr.scalar(emit.apply(tr, Op.IDENTITY, [v._name], "item"))
    if any(d not in tr.scalars for d in dyn):  # a 0-d *array* index: NumPy's advanced indexing copies
        return emit.apply(tr, Op.IDENTITY, [v._name], "copy")
    return v


def _gather(x, raw, kinds):
    tr = x._trace
    if kinds.count("array") != 1 or any(k not in ("slice", "array") for k in kinds) or _has_ellipsis(raw):
        raise fail("einsat supports one integer-array index among full slices (x[:, idx]); "
                   "this advanced index is not supported")
    axis = next(i for i, k in enumerate(raw) if _kind(k) == "array")
    if any(isinstance(k, slice) and k != slice(None) for k in raw):
        raise fail("an integer-array index combined with partial slices is not supported")
    idx = emit.lift(tr, raw[axis])
    if not np.issubdtype(tr.types[idx].dtype, np.integer):
        raise fail("integer-array indices must be integers")
    return emit.apply(tr, Op.GATHER, [x._name, emit.cast(tr, idx, np.int64)], "gather", axis=axis)


def setitem(x, key, value) -> None:
    tr = x._trace
    raw = list(key) if isinstance(key, tuple) else [key]
    kinds = [_kind(k) for k in raw if k is not Ellipsis]
    if "mask" in kinds:
        return _masked_write(x, raw, kinds, value)
    if "array" in kinds:
        raise fail("writing through an integer-array index (a scatter) is not supported; "
                   "write through a mask with np.where, or through slices")
    spec, dyn = basic_spec(tr, x.shape, _expand(key, x.ndim))
    target = emit.view(tr, x._name, spec, dyn, "setitem")._name if spec else x._name
    emit.mutate(tr, target, emit.lift(tr, value))


def _masked_write(x, raw, kinds, value) -> None:
    """x[..., mask] = v  ==  x[...] = where(mask broadcast over x, v, x)."""
    tr = x._trace
    if kinds.count("mask") != 1 or any(k not in ("slice", "mask") for k in kinds):
        raise fail("einsat supports a boolean mask after full slices (x[:, mask] = v) only")
    if any(isinstance(k, slice) and k != slice(None) for k in raw):
        raise fail("a boolean mask combined with partial slices is not supported")
    pos = next(i for i, k in enumerate(raw) if k is not Ellipsis and _kind(k) == "mask")
    mask = raw[pos]
    if isinstance(mask, (bool, np.bool_)):
        raise fail("indexing with a Python bool is not supported")
    mname = emit.lift(tr, mask)
    mshape = tr.types[mname].shape
    lead = pos
    if _has_ellipsis(raw[:pos]):  # count the axes after the mask from the end instead
        lead = x.ndim - len(mshape) - sum(k is not Ellipsis for k in raw[pos + 1:])
    rest = x.shape[lead + len(mshape):]
    if x.shape[lead:lead + len(mshape)] != mshape:
        raise fail(f"boolean index of shape {list(mshape)} does not match the indexed dims "
                   f"{list(x.shape[lead:lead + len(mshape)])}")
    vname = emit.lift(tr, value)
    vshape = tr.types[vname].shape
    if len(vshape) > len(rest) or np.broadcast_shapes(vshape, rest) != rest:
        raise fail(f"a value of shape {list(vshape)} cannot be written through a boolean mask "
                   f"(einsat supports values broadcasting to {list(rest)}, the shape of one element)")
    vname = emit.cast(tr, vname, x.dtype)
    m = emit.apply(tr, Op.RESHAPE, [mname], "mask", shape=(1,) * lead + mshape + (1,) * len(rest))
    v = emit.apply(tr, Op.RESHAPE, [vname], "fill", shape=(1,) * (x.ndim - len(vshape)) + vshape)
    w = emit.select(tr, m._name, v._name, x._name, "masked")
    emit.mutate(tr, x._name, w._name)
