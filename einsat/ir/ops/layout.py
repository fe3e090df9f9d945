"""Layout ops that change a tensor's shape, not its data: transpose, reshape, flatten, squeeze,
unsqueeze, expand. (Concat, split, slice, pad and gather are in `slicing.py`.)

All are layout-only and multi-linear. Attributes are normalized to one explicit form:
transpose's perm filled in, reshape's -1 and 0 resolved, squeeze's axes filled in, axes sorted and
non-negative, expand's shape the full output shape. Reshape, flatten, squeeze and unsqueeze are
views of contiguous data and move no bytes; transpose and expand copy.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.dims import SymDim, exact_div
from einsat.ir.expr import Expr, Read, var
from einsat.ir.expr.build import broadcast_read, iters, reshape_read
from einsat.ir.ops.onnx_args import const_dims, const_ints, int64s, known_shape
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, register
from einsat.ir.types import TensorType


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    """Axes in [-rank, rank) made non-negative and sorted; a repeated axis is an error."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(f"axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"axes {tuple(axes)} name an axis twice")
    return tuple(sorted(out))


class _View(OpDef):
    """A reshape of contiguous data: no copy, no bytes moved, no flops."""

    layout_only = True
    multilinear = True
    view = True

    def numpy(self, args, attrs):
        return [args[0].reshape(self.infer([TensorType.of(args[0])], attrs)[0].shape)]

    def expression(self, inputs, attrs):
        """L_out x[unravel(ravel(out))]: floor divisions and modulos of the flat position."""
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        return Expr(loops, (), reshape_read(0, inputs[0].shape, loops))

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        return 0


@register
class Transpose(OpDef):
    """out = x.transpose(perm); the default perm reverses the dims."""

    op = Op.TRANSPOSE
    permutes = True
    exact_in_half = True
    eop_fusable = True
    layout_only = True
    multilinear = True
    view = True
    onnx_type = "Transpose"
    attrs = {"perm": Attr("ints", None, doc="default: reversed dims")}

    def normalize(self, attrs, types):
        x = types[0]
        if x is not None:
            perm = attrs["perm"]
            if perm is None:
                perm = tuple(reversed(range(x.rank)))
            if any(not -x.rank <= p < x.rank for p in perm) or \
                    sorted(p % x.rank for p in perm) != list(range(x.rank)):
                raise ShapeError(f"perm {perm} is not a permutation of the {x.rank} dims")
            attrs["perm"] = tuple(p % x.rank for p in perm)
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        return [TensorType(tuple(x.shape[p] for p in attrs["perm"]), x.dtype)]

    def numpy(self, args, attrs):
        return [np.transpose(args[0], attrs["perm"]).copy()]

    def expression(self, inputs, attrs):
        """L_out x[i_perm⁻¹]: output dim k reads input dim perm[k]."""
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        idx = [None] * len(loops)
        for k, p in enumerate(attrs["perm"]):
            idx[p] = var(loops[k].name)
        return Expr(loops, (), Read(0, tuple(idx)))

    def flops(self, ins, outs, attrs):
        return 0

    def from_onnx(self, ctx, onode):
        return [onode.input[0]], {"perm": ctx.attrs(onode).get("perm")}

    def to_onnx(self, ctx, node):
        """A Transpose that moves only axes of size 1 (the dims of size > 1 keep their order) keeps
        the elements in order: written as a Reshape, which onnxruntime runs without a copy and
        `tidy.minimal_views` joins with its neighbouring Reshapes (a decode step's [1, 1, h, d] ->
        [1, h, 1, d], eight in a 2-layer Mistral step)."""
        perm = node.attrs["perm"]
        shape = known_shape(ctx, node.inputs[0]) or (None,)
        if all(isinstance(d, (int, np.integer)) for d in shape) and \
                [p for p in perm if shape[p] != 1] == [k for k, d in enumerate(shape) if d != 1]:
            out = tuple(int(shape[p]) for p in perm)
            ctx.node("Reshape", [node.inputs[0], int64s(ctx, out, "shape")], node.outputs)
            return
        ctx.node("Transpose", node.inputs, node.outputs, perm=perm)


def resolve_shape(shape, in_shape) -> tuple[int, ...]:
    """ONNX Reshape's shape with allowzero=0: 0 copies the input dim, one -1 is inferred. An empty
    input keeps its zeros literally (the copy rule cannot be told apart there)."""
    size = prod(in_shape)
    out = list(shape)
    for k, d in enumerate(out):
        if isinstance(d, SymDim):
            continue
        if d == 0 and size:
            if k >= len(in_shape):
                raise ShapeError(f"shape {tuple(shape)}: a 0 at position {k} has no input dim to copy")
            out[k] = in_shape[k]
        elif d < -1:
            raise ShapeError(f"shape {tuple(shape)} has a negative dim {d}")
    if out.count(-1) > 1:
        raise ShapeError(f"shape {tuple(shape)} has more than one -1")
    if -1 in out:
        rest = prod(d for d in out if isinstance(d, SymDim) or d != -1)
        if isinstance(size, SymDim) or isinstance(rest, SymDim):
            inferred = exact_div(size, rest)  # for every size of the symbols, or refused
            if inferred is None:
                raise ShapeError(f"cannot reshape {list(in_shape)} ({size} elements) to {tuple(shape)}: the -1 "
                                 f"is {size} / ({rest}), not shown to be a whole number for every size")
            out[out.index(-1)] = inferred
        else:
            if rest == 0 or size % rest:
                raise ShapeError(f"cannot reshape {list(in_shape)} ({size} elements) to {tuple(shape)}")
            out[out.index(-1)] = size // rest
    if prod(out) != size:
        raise ShapeError(f"cannot reshape {list(in_shape)} ({size} elements) to {tuple(out)} "
                         f"({prod(out)} elements)")
    return tuple(out)


def symbolic_target(shape, in_shape) -> tuple:
    """A Reshape target with symbolic dims written as ONNX's own rules express it (allowzero=0):
    0 where the input's dim at that position is the same dim, then one remaining symbolic dim as
    -1; what is left symbolic is computed in the graph (`ExportContext.dims`)."""
    out = [0 if isinstance(d, SymDim) and k < len(in_shape) and d == in_shape[k] else d
           for k, d in enumerate(shape)]
    left = [k for k, d in enumerate(out) if isinstance(d, SymDim)]
    if len(left) == 1:
        out[left[0]] = -1
    return tuple(out)


@register
class Reshape(_View):
    op = Op.RESHAPE
    permutes = True
    reshapes = True
    exact_in_half = True
    eop_fusable = True
    onnx_type = "Reshape"
    attrs = {"shape": Attr("ints", doc="-1 and 0 (copy) resolved at creation; dims may be symbolic")}

    def normalize(self, attrs, types):
        if types[0] is not None:
            attrs["shape"] = resolve_shape(attrs["shape"], types[0].shape)
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        if prod(attrs["shape"]) != x.size:
            raise ShapeError(f"cannot reshape {x} to {list(attrs['shape'])}")
        return [TensorType(attrs["shape"], x.dtype)]

    def from_onnx(self, ctx, onode):
        shape = const_dims(ctx, onode, 1, "shape")
        x = ctx.type(onode.input[0])
        if not ctx.attrs(onode).get("allowzero", 0):  # 0 copies the input dim, even of an empty input
            shape = tuple(x.shape[k] if d == 0 and k < x.rank else d for k, d in enumerate(shape))
        return [onode.input[0]], {"shape": shape}

    def to_onnx(self, ctx, node):
        shape = node.attrs["shape"]
        if any(isinstance(d, SymDim) for d in shape) and 0 not in shape:
            shape = symbolic_target(shape, ctx.type(node.inputs[0]).shape)
            ctx.node("Reshape", [node.inputs[0], int64s(ctx, shape, "shape")], node.outputs)
            return
        ctx.node("Reshape", [node.inputs[0], int64s(ctx, shape, "shape")], node.outputs,
                 allowzero=1 if 0 in shape else None)


@register
class Flatten(_View):
    """[d0, ..., dn] -> [d0·...·d(axis-1), d(axis)·...·dn]; axis in [0, rank]."""

    op = Op.FLATTEN
    permutes = True
    reshapes = True
    exact_in_half = True
    onnx_type = "Flatten"
    attrs = {"axis": Attr("int", 1)}

    def normalize(self, attrs, types):
        x = types[0]
        if x is not None:
            if not -x.rank <= attrs["axis"] <= x.rank:
                raise ShapeError(f"axis {attrs['axis']} is out of range for rank {x.rank}")
            if attrs["axis"] < 0:
                attrs["axis"] += x.rank
        return attrs

    def infer(self, types, attrs):
        x, a = types[0], attrs["axis"]
        return [TensorType((prod(x.shape[:a]), prod(x.shape[a:])), x.dtype)]

    def from_onnx(self, ctx, onode):
        return [onode.input[0]], {"axis": ctx.attrs(onode).get("axis", 1)}

    def to_onnx(self, ctx, node):
        ctx.node("Flatten", node.inputs, node.outputs, axis=node.attrs["axis"])


@register
class Squeeze(_View):
    """Removes size-1 dims `axes` (default: every size-1 dim)."""

    op = Op.SQUEEZE
    permutes = True
    reshapes = True
    exact_in_half = True
    onnx_type = "Squeeze"
    attrs = {"axes": Attr("ints", None, doc="default: all size-1 dims")}

    def normalize(self, attrs, types):
        x = types[0]
        if x is not None:
            if attrs["axes"] is None:
                attrs["axes"] = tuple(k for k, d in enumerate(x.shape) if d == 1)
            attrs["axes"] = normalize_axes(attrs["axes"], x.rank)
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        bad = [a for a in attrs["axes"] if x.shape[a] != 1]
        if bad:
            raise ShapeError(f"cannot squeeze axes {bad} of {x}: their size is not 1")
        return [TensorType(tuple(d for k, d in enumerate(x.shape) if k not in attrs["axes"]), x.dtype)]

    def from_onnx(self, ctx, onode):
        axes = const_ints(ctx, onode, 1, "axes")
        return [onode.input[0]], {"axes": axes or None}  # no axes, or none listed: all size-1 dims

    def to_onnx(self, ctx, node):
        if not node.attrs["axes"]:  # ONNX would read "no axes" as "every size-1 dim"
            ctx.node("Identity", node.inputs, node.outputs)
            return
        ctx.node("Squeeze", [node.inputs[0], int64s(ctx, node.attrs["axes"], "axes")], node.outputs)


@register
class Unsqueeze(_View):
    """Inserts size-1 dims so that they sit at `axes` of the output (ONNX Unsqueeze)."""

    op = Op.UNSQUEEZE
    permutes = True
    reshapes = True
    exact_in_half = True
    onnx_type = "Unsqueeze"
    attrs = {"axes": Attr("ints", doc="positions in the output")}

    def normalize(self, attrs, types):
        x = types[0]
        if x is not None:
            attrs["axes"] = normalize_axes(attrs["axes"], x.rank + len(attrs["axes"]))
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        dims = iter(x.shape)
        rank = x.rank + len(attrs["axes"])
        return [TensorType(tuple(1 if k in attrs["axes"] else next(dims) for k in range(rank)), x.dtype)]

    def from_onnx(self, ctx, onode):
        return [onode.input[0]], {"axes": const_ints(ctx, onode, 1, "axes")}

    def to_onnx(self, ctx, node):
        if not node.attrs["axes"]:
            ctx.node("Identity", node.inputs, node.outputs)
            return
        ctx.node("Unsqueeze", [node.inputs[0], int64s(ctx, node.attrs["axes"], "axes")], node.outputs)


@register
class Expand(OpDef):
    """Broadcast x against `shape` (ONNX Expand: bidirectional); the attribute is normalized to
    the output shape."""

    op = Op.EXPAND
    exact_in_half = True
    layout_only = True
    repeats_input = True
    multilinear = True
    view = True
    onnx_type = "Expand"
    attrs = {"shape": Attr("ints", doc="dims may be symbolic")}

    def normalize(self, attrs, types):
        if types[0] is not None:
            if any(d < 0 for d in attrs["shape"]):
                raise ShapeError(f"shape {attrs['shape']} has a negative dim")
            attrs["shape"] = broadcast_shapes(types[0].shape, attrs["shape"])
        return attrs

    def infer(self, types, attrs):
        x = types[0]
        if broadcast_shapes(x.shape, attrs["shape"]) != attrs["shape"]:
            raise ShapeError(f"{x} does not broadcast to {list(attrs['shape'])}")
        return [TensorType(attrs["shape"], x.dtype)]

    def numpy(self, args, attrs):
        return [np.array(np.broadcast_to(args[0], attrs["shape"]))]

    def expression(self, inputs, attrs):
        loops = iters("o", attrs["shape"])
        return Expr(loops, (), broadcast_read(0, inputs[0].shape, loops))

    def flops(self, ins, outs, attrs):
        return 0

    def from_onnx(self, ctx, onode):
        return [onode.input[0]], {"shape": const_dims(ctx, onode, 1, "shape")}

    def to_onnx(self, ctx, node):
        one = ctx.graph.weights.get(node.inputs[0])
        if one is not None and one.size == 1:  # a filled buffer: ONNX's ConstantOfShape
            ctx.node("ConstantOfShape", [int64s(ctx, node.attrs["shape"], "shape")], node.outputs,
                     value=np.asarray(one).reshape(1))
            return
        ctx.node("Expand", [node.inputs[0], int64s(ctx, node.attrs["shape"], "shape")], node.outputs)
