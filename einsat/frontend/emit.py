"""Recording statements: pure ops, views and mutations, with shapes checked on the user's line.

Every helper takes the trace and value names and returns a traced array (or a name); shapes
and dtypes come from the op registry's inference, so a bad shape fails on the line that
wrote it with a `FrontendError`.
"""

from __future__ import annotations

import numpy as np

from einsat.errors import EinsatError
from einsat.frontend.program import MutateStmt, OpStmt, ViewStmt
from einsat.frontend.tracer import Trace, Traced, fail, user_line
from einsat.ir.ops.views import apply_spec, spec_shapes
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType


def is_traced(x) -> bool:
    return isinstance(x, Traced)


def weak_dtype(x):
    """What `np.result_type` should see for x: a dtype, or a Python scalar (weak, as in NumPy 2)."""
    if is_traced(x):
        return x.dtype
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return x
    return np.asarray(x).dtype


def wrap(tr: Trace, name: str):
    return tr.array_type(tr, name)


def lift(tr: Trace, x, dtype=None) -> str:
    """The value name of `x`: a traced array of this trace, or a new constant for anything else
    NumPy can turn into an array (cast to `dtype` if given)."""
    if is_traced(x):
        if x._trace is not tr:
            raise fail("a traced array from another trace is used here")
        return tr.use(x._name)
    if isinstance(x, (list, tuple)) and any(is_traced(e) for e in x):
        raise fail("a list holding traced arrays: use np.stack to make it one array")
    a = np.asarray(x)
    if a.dtype == object:
        raise fail(f"cannot use a {type(x).__name__} as a tensor")
    return tr.constant(a, dtype)


def apply(tr: Trace, op: Op, inputs: list[str], hint: str | None = None, **attrs):
    """Record `op(inputs; attrs)` into fresh storage and return it as a traced array."""
    types = [tr.types[tr.use(i)] for i in inputs]
    try:
        attrs = normalize_attrs(op, attrs, types)
        outs = opdef(op).infer(types, attrs)
    except EinsatError as e:
        raise fail(f"{op.value}: {e}") from None
    names = [tr.new_value(hint or op.value, t) for t in outs]
    tr.emit(OpStmt(op, list(inputs), names, attrs, user_line()))
    results = [wrap(tr, n) for n in names]
    return results[0] if len(results) == 1 else tuple(results)


def select(tr: Trace, cond: str, a: str, b: str, hint: str = "where"):
    """where(cond, a, b); for bools as (cond & a) | (~cond & b), since onnxruntime has no bool
    Where kernel and the graph should run everywhere."""
    if tr.types[a].dtype != np.bool_:
        return apply(tr, Op.WHERE, [cond, a, b], hint)
    keep = apply(tr, Op.LOGICAL_AND, [cond, a], hint)
    other = apply(tr, Op.LOGICAL_AND, [apply(tr, Op.LOGICAL_NOT, [cond], hint)._name, b], hint)
    return apply(tr, Op.LOGICAL_OR, [keep._name, other._name], hint)


def cast(tr: Trace, name: str, dtype) -> str:
    dtype = np.dtype(dtype)
    if tr.types[name].dtype == dtype:
        return name
    if name in tr.constants:
        return tr.constant(tr.constants[name].astype(dtype))
    return apply(tr, Op.CAST, [name], dtype=dtype.name)._name


def view(tr: Trace, base: str, spec: tuple, dyn: list[str], hint: str = "view"):
    """Record `out <- base[spec]`. NumPy decides on the shadows whether it is a view (shared
    storage) or a copy (fresh storage, read through an access)."""
    t = tr.types[tr.use(base)]
    try:
        shape = spec_shapes(t.shape, spec)[-1]
    except EinsatError as e:
        raise fail(str(e)) from None
    shadow = apply_spec(tr.shadow(base), spec, [0] * len(dyn))
    shares = shadow.size == 0 or np.may_share_memory(shadow, tr.shadow(base))
    if not shares:  # reshaping e.g. a transposed view: NumPy copies
        assert spec[-1][0] == "reshape", f"only a reshape can copy, not {spec}"
        v = view(tr, base, spec[:-1], dyn, hint) if spec[:-1] else wrap(tr, base)
        return apply(tr, Op.RESHAPE, [v._name], hint, shape=spec[-1][1])
    name = tr.new_value(hint, TensorType(shape, t.dtype), root=tr.root[base], shadow=shadow)
    if base in tr.readonly or any(step[0] == "expand" for step in spec):
        tr.readonly.add(name)
    tr.emit(ViewStmt(name, base, tuple(spec), list(dyn), user_line()))
    return wrap(tr, name)


def mutate(tr: Trace, target: str, source: str) -> None:
    """Record `target[...] = source` (broadcast, cast with NumPy's same-kind rule)."""
    t, s = tr.types[tr.use(target)], tr.types[tr.use(source)]
    if target in tr.readonly:
        raise fail(f"assignment destination {target} is read-only (a broadcast view)")
    if target in tr.constants:
        raise fail("cannot write into a constant")
    if not np.can_cast(s.dtype, t.dtype, "same_kind"):
        raise fail(f"cannot write {s.dtype} values into a {t.dtype} array (NumPy's same_kind rule)")
    try:
        fits = tuple(np.broadcast_shapes(s.shape, t.shape)) == t.shape
    except ValueError:
        fits = False
    if not fits:
        raise fail(f"cannot broadcast a value of shape {list(s.shape)} into {list(t.shape)}")
    source = cast(tr, source, t.dtype)
    tr.known.pop(tr.root.get(target, target), None)
    tr.emit(MutateStmt(target, source, user_line()))
