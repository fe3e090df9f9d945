"""ONNX for `assign(x, w, spec)` without tables the size of `x`.

A spec of unit-stride slices and constant selects writes a *box* of `x` (a start and a count
per axis of `x`). Such a write exports as Slice and Concat: along the first axis the box does
not cover, `x` splits into the part before the box, the box's rows and the part after; the
rows are written recursively on the remaining axes, and the innermost piece is `w` broadcast to
the box (Expand, then Reshape to put the selected axes back). Every other spec (strided
slices, reshapes, transposes, dynamic selects) is a ScatterND whose flat positions come from a
`Range` computed at run time, so the file holds no index table either.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.ops.onnx_args import int64s


def box_of(shape: tuple[int, ...], spec) -> list[tuple[int, int]] | None:
    """(start, count) per axis of `shape` for a spec of unit-stride slices and constant selects;
    None for any other spec."""
    box = [(0, d) for d in shape]
    axes = list(range(len(shape)))  # axis of the view after each step -> axis of x
    for step in spec:
        kind = step[0]
        if kind == "slice" and step[3] == 1:
            _, axis, start, _, count = step
            first, _ = box[axes[axis]]
            box[axes[axis]] = (first + start, count)
        elif kind == "select":
            _, axis, index = step
            first, _ = box[axes[axis]]
            box[axes[axis]] = (first + index, 1)
            del axes[axis]
        else:
            return None
    return box


def assign_box_to_onnx(ctx, x: str, w: str, out: str, box: list[tuple[int, int]], region) -> None:
    """`out` = `x` with `box` holding `w` (broadcast to `region`, the view's shape)."""
    shape = ctx.type(x).shape
    full, piece = ctx.fresh("region"), ctx.fresh("box")
    ctx.node("Expand", [w, int64s(ctx, region, "shape")], [full])
    ctx.node("Reshape", [full, int64s(ctx, [count for _, count in box], "shape")], [piece])
    cut = [axis for axis, (start, count) in enumerate(box) if (start, count) != (0, shape[axis])]
    if not cut:
        ctx.node("Identity", [piece], [out])
        return
    ctx.node("Identity", [_write(ctx, x, piece, box, cut, list(shape))], [out])


def _write(ctx, x: str, piece: str, box, cut: list[int], shape: list[int]) -> str:
    """The value `x` (of `shape`) with the box on axes `cut` replaced by `piece`."""
    axis, rest = cut[0], cut[1:]
    start, count = box[axis]
    rows = _slice(ctx, x, axis, start, start + count)
    inner = piece if not rest else _write(ctx, rows, piece, box, rest, shape[:axis] + [count] + shape[axis + 1:])
    parts = ([_slice(ctx, x, axis, 0, start)] if start else []) + [inner] + \
        ([_slice(ctx, x, axis, start + count, shape[axis])] if start + count < shape[axis] else [])
    if len(parts) == 1:
        return inner
    out = ctx.fresh("concat")
    ctx.node("Concat", parts, [out], axis=axis)
    return out


def _slice(ctx, x: str, axis: int, start: int, end: int) -> str:
    out = ctx.fresh("part")
    ctx.node("Slice", [x, int64s(ctx, [start], "starts"), int64s(ctx, [end], "ends"),
                      int64s(ctx, [axis], "axes")], [out])
    return out


def flat_positions(ctx, shape: tuple[int, ...]) -> str:
    """The int64 tensor arange(prod(shape)).reshape(shape), computed by `Range` at run time."""
    flat, out = ctx.fresh("flat_positions"), ctx.fresh("positions")
    scalars = [ctx.constant(np.asarray(v, np.int64), hint)
               for v, hint in ((0, "zero"), (prod(shape), "size"), (1, "one"))]
    ctx.node("Range", scalars, [flat])
    ctx.node("Reshape", [flat, int64s(ctx, list(shape), "shape")], [out])
    return out
