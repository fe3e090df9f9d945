"""Sequence and optional values at ONNX import: followed statically, never einsat values.

einsat's values are tensors. An ONNX sequence or optional that a model builds and reads with
positions known at import (torch's `split` exports as `SplitToSequence` + `SequenceAt`) is
followed by the importer instead: the sequence is a tuple of the names of its elements, an
optional a tuple of zero or one, and every op on them is resolved once — `SequenceAt` aliases
its output to an element, `SequenceLength` and `OptionalHasElement` are constants,
`SplitToSequence` and `ConcatFromSequence` become slices and a concat. What cannot be followed
(a sequence input, a position computed at run time, a sequence made by an op without a handler
here such as `Loop`) is an `OnnxError` naming the node, the value and its type.

`HANDLERS[op_type](ctx, onode)` does the work through the import context: `ctx.sequences` and
`ctx.optionals` (name -> tuple of element names), `ctx.alias`, `ctx.constants`, `ctx.emit`,
`ctx.type`, and `ctx.where()`/`ctx.kind(name)` for messages.
"""

from __future__ import annotations

import numpy as np

from einsat.errors import OnnxError
from einsat.ir.graph import _frozen
from einsat.ir.registry import Op


def _sequence(ctx, name: str) -> tuple[str, ...]:
    if name in ctx.sequences:
        return ctx.sequences[name]
    raise OnnxError(f"{ctx.where()}: {name!r} (of type {ctx.kind(name)}) is not a sequence built by an op einsat "
                    f"follows at import (SequenceConstruct, SplitToSequence, SequenceInsert, ...)")


def _position(ctx, onode, k: int, default: int | None, size: int, insert: bool = False) -> int:
    """The constant position input k of `onode` (negative counts from the back), in
    [0, size), or [0, size] for an insertion."""
    name = onode.input[k] if len(onode.input) > k else ""
    if not name:
        return default
    value = ctx.constant(name)
    if value is None:
        raise OnnxError(f"{ctx.where()}: the position {name!r} is computed at run time; einsat follows "
                        f"sequences only at positions known at import")
    pos = int(np.asarray(value).reshape(()))
    if not -size <= pos < size + insert:
        raise OnnxError(f"{ctx.where()}: position {pos} is out of range for a sequence of {size} elements")
    return pos + size if pos < 0 else pos


def _seq_empty(ctx, onode):
    ctx.sequences[onode.output[0]] = ()


def _seq_construct(ctx, onode):
    ctx.sequences[onode.output[0]] = tuple(onode.input)


def _seq_insert(ctx, onode):
    seq = _sequence(ctx, onode.input[0])
    pos = _position(ctx, onode, 2, len(seq), len(seq), insert=True)
    ctx.sequences[onode.output[0]] = seq[:pos] + (onode.input[1],) + seq[pos:]


def _seq_erase(ctx, onode):
    seq = _sequence(ctx, onode.input[0])
    pos = _position(ctx, onode, 1, len(seq) - 1, len(seq))
    ctx.sequences[onode.output[0]] = seq[:pos] + seq[pos + 1:]


def _seq_at(ctx, onode):
    seq = _sequence(ctx, onode.input[0])
    ctx.alias[onode.output[0]] = seq[_position(ctx, onode, 1, None, len(seq))]


def _seq_length(ctx, onode):
    ctx.constants[onode.output[0]] = _frozen(np.array(len(_sequence(ctx, onode.input[0])), np.int64))


def _split_to_sequence(ctx, onode):
    """Pieces of the input along `axis`: of the constant `split` sizes, or of size 1 (squeezed
    unless keepdims) when `split` is absent; a scalar `split` cuts equal pieces, the last smaller."""
    x = onode.input[0]
    shape = ctx.type(x).shape
    attrs = ctx.attrs(onode)
    axis = attrs.get("axis", 0) % max(len(shape), 1)
    dim = shape[axis]
    split_name = onode.input[1] if len(onode.input) > 1 else ""
    split = ctx.constant(split_name) if split_name else None
    if split_name and split is None:
        raise OnnxError(f"{ctx.where()}: the split sizes {split_name!r} are computed at run time")
    if split is None:
        sizes, squeeze = [1] * dim, not attrs.get("keepdims", 1)
    elif np.ndim(split) == 0:
        step = int(split)
        sizes, squeeze = [min(step, dim - s) for s in range(0, dim, step)], False
    else:
        sizes, squeeze = [int(s) for s in split], False
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise OnnxError(f"{ctx.where()}: split sizes {sizes} do not cut dim {axis} of size {dim}")
    pieces, start = [], 0
    for size in sizes:
        piece = ctx.emit(Op.SLICE, [x], {"starts": (start,), "ends": (start + size,), "axes": (axis,)})
        pieces.append(ctx.emit(Op.SQUEEZE, [piece], {"axes": (axis,)}) if squeeze else piece)
        start += size
    ctx.sequences[onode.output[0]] = tuple(pieces)


def _concat_from_sequence(ctx, onode):
    seq = _sequence(ctx, onode.input[0])
    if not seq:
        raise OnnxError(f"{ctx.where()}: ConcatFromSequence of an empty sequence")
    attrs = ctx.attrs(onode)
    axis, new_axis = attrs["axis"], attrs.get("new_axis", 0)
    if new_axis:
        rank = len(ctx.type(seq[0]).shape) + 1
        axis = axis % rank
        seq = tuple(ctx.emit(Op.UNSQUEEZE, [s], {"axes": (axis,)}) for s in seq)
    ctx.alias[onode.output[0]] = seq[0] if len(seq) == 1 else ctx.emit(Op.CONCAT, list(seq), {"axis": axis})


def _optional(ctx, onode):
    ctx.optionals[onode.output[0]] = tuple(i for i in onode.input if i)


def _optional_has_element(ctx, onode):
    """False for an absent input or an empty optional; a tensor or sequence given directly has one."""
    name = onode.input[0] if onode.input else ""
    has = bool(name) and len(ctx.optionals.get(name, (name,))) > 0
    ctx.constants[onode.output[0]] = _frozen(np.array(has))


def _optional_get_element(ctx, onode):
    """The element of an optional; a tensor or sequence given directly is itself."""
    name = onode.input[0]
    if name in ctx.optionals:
        if not ctx.optionals[name]:
            raise OnnxError(f"{ctx.where()}: OptionalGetElement of the empty optional {name!r}")
        (name,) = ctx.optionals[name]
    if name in ctx.sequences:
        ctx.sequences[onode.output[0]] = ctx.sequences[name]
    else:
        ctx.alias[onode.output[0]] = name


HANDLERS = {
    "SequenceEmpty": _seq_empty, "SequenceConstruct": _seq_construct, "SequenceInsert": _seq_insert,
    "SequenceErase": _seq_erase, "SequenceAt": _seq_at, "SequenceLength": _seq_length,
    "SplitToSequence": _split_to_sequence, "ConcatFromSequence": _concat_from_sequence,
    "Optional": _optional, "OptionalHasElement": _optional_has_element,
    "OptionalGetElement": _optional_get_element,
}
