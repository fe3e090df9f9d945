"""Helpers for ops' ONNX mappings: shape-like inputs as static attributes and back.

At import, ONNX inputs such as Reshape's `shape` or Slice's `starts` must be statically known
(an initializer or a folded constant); when they are not, the node stays opaque. At export
they become int64 initializers.
"""

from __future__ import annotations

import numpy as np


def known_shape(ctx, name: str) -> tuple | None:
    """The einsat shape of value `name` at export, or None for a value inside a composite op's
    own export (it has no einsat type)."""
    try:
        return ctx.type(name).shape
    except KeyError:
        return None


def input_name(onode, k: int) -> str:
    """The name of ONNX input k, or '' when absent."""
    return onode.input[k] if k < len(onode.input) else ""


def const_input(ctx, onode, k: int, what: str) -> np.ndarray | None:
    """The static value of ONNX input k (None when the input is absent); raises
    `ctx.not_representable` when it is present but not statically known."""
    name = input_name(onode, k)
    if not name:
        return None
    value = ctx.constant(name)
    if value is None:
        raise ctx.not_representable(f"{onode.op_type}'s {what} input {name!r} is not a constant")
    return np.asarray(value)


def const_ints(ctx, onode, k: int, what: str) -> tuple[int, ...] | None:
    value = const_input(ctx, onode, k, what)
    return None if value is None else tuple(int(v) for v in value.reshape(-1))


def const_dims(ctx, onode, k: int, what: str) -> tuple | None:
    """Like `const_ints`, but the value may also be computed from symbolic shapes (a symbolic
    import's `Shape -> Gather -> Concat`): ints and `SymDim`s (`ctx.dims`)."""
    name = input_name(onode, k)
    if not name:
        return None
    dims = ctx.dims(name) if hasattr(ctx, "dims") else None
    return dims if dims is not None else const_ints(ctx, onode, k, what)


def int64s(ctx, values, hint: str) -> str:
    """An int64 initializer holding `values` (ONNX shape-like inputs are int64 tensors); where some
    are symbolic dims, a value computed in the graph from the inputs' shapes (`ctx.dims`)."""
    values = tuple(values)
    if any(not isinstance(v, (int, np.integer)) for v in values):
        return ctx.dims(values, hint)
    return ctx.constant(np.asarray(values, dtype=np.int64).reshape(-1), hint)


def first_output_only(ctx, onode) -> None:
    """Raise `ctx.not_representable` when the node names outputs beyond its first (einsat's op
    computes only that one: e.g. BatchNormalization's running statistics, MaxPool's indices)."""
    extra = [o for o in onode.output[1:] if o]
    if extra:
        raise ctx.not_representable(f"{onode.op_type}'s extra outputs {extra} have no einsat op")
