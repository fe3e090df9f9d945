"""Sources and plumbing: constant, identity, and PET's correct (alone, and fused into a layout copy).

    correct(mutant, fix; region)  = mutant, with mutant[region] replaced by fix
    fused_correct(mutant, fix; region, view, perm, shape)
                                  = reshape(transpose(reshape(correct(mutant, fix; region), view), perm), shape)

`region` is a box, its starts then its ends (2·rank values, 0 <= start <= end <= dim), and `fix`
has the box's shape. It is how a partially equivalent mutant enters the e-graph (PET §5): the
mutant's output with the positions the corrector proved wrong recomputed by the original program.
ONNX has no such op; it exports as a standard expansion of Slice and Concat nodes (see
`Correct.to_onnx`).

A corrected mutant's output is usually brought back to the original's layout by a
reshape/transpose chain (PET's layout mutants: `L⁻¹(Correct(op(L(x)), fix))`). `fused_correct`
is the correction and that chain as one op, one pass (on the GPU, one kernel writing the output
in its final layout; `rewrites.post.correct` makes it). An empty `view`, `perm` or `shape` is no
reshape, no transpose, no reshape.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.expr import Call, Expr, Guard, Read, var
from einsat.ir.expr.build import iters
from einsat.ir.ops.onnx_args import int64s
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, opdef, register, same_dtype
from einsat.ir.types import TensorType

_SCALAR_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                 "value_ints": np.int64}


@register
class Constant(OpDef):
    """A constant tensor held in the node (ONNX Constant)."""

    op = Op.CONSTANT
    dtype_of_first = False  # its value's
    arity = (0, 0)
    onnx_type = "Constant"
    attrs = {"value": Attr("tensor")}

    def infer(self, types, attrs):
        return [TensorType.of(attrs["value"])]

    def numpy(self, args, attrs):
        return [attrs["value"]]

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        """Written once, when the program starts: free at run time."""
        return 0

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        if "value" in a:
            return [], {"value": np.asarray(a["value"])}
        for key, dtype in _SCALAR_ATTRS.items():
            if key in a:
                return [], {"value": np.asarray(a[key], dtype=dtype)}
        raise ctx.not_representable(f"Constant with {sorted(a)}")

    def to_onnx(self, ctx, node):
        ctx.node("Constant", [], node.outputs, value=np.asarray(node.attrs["value"]))


@register
class Identity(OpDef):
    op = Op.IDENTITY
    shape_of_first = True
    permutes = True
    reshapes = True
    aliases = True
    exact_in_half = True
    ufunc = np.positive
    layout_only = True
    view = True
    multilinear = True
    onnx_type = "Identity"

    def infer(self, types, attrs):
        return [types[0]]

    def numpy(self, args, attrs):
        return [args[0]]

    def expression(self, inputs, attrs):
        loops = iters("o", inputs[0].shape)
        return Expr(loops, (), Read(0, tuple(var(it.name) for it in loops)))

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        """A rename: no data moves."""
        return 0


def _region(attrs, t: TensorType) -> tuple[tuple[int, ...], tuple[int, ...]]:
    r = attrs["region"]
    if len(r) != 2 * t.rank:
        raise ShapeError(f"region {r} needs {2 * t.rank} values (starts, then ends) for {t}")
    starts, ends = r[:t.rank], r[t.rank:]
    for k, (s, e, d) in enumerate(zip(starts, ends, t.shape)):
        if not 0 <= s <= e <= d:
            raise ShapeError(f"region {r}: dim {k} needs 0 <= start {s} <= end {e} <= {d}")
    return starts, ends


@register
class Correct(OpDef):
    """out = mutant; out[region] = fix (PET's correction). Export-only ONNX mapping
    (`onnx_type` None: no ONNX op imports as it)."""

    op = Op.CORRECT
    shape_of_first = True
    correction = True
    arity = (2, 2)
    attrs = {"region": Attr("ints", check=non_negative, doc="starts, then ends (2·rank)")}

    def infer(self, types, attrs):
        mutant, fix = types
        starts, ends = _region(attrs, mutant)
        box = tuple(e - s for s, e in zip(starts, ends))
        if fix.shape != box:
            raise ShapeError(f"fix {fix} must have the region's shape {list(box)}")
        return [TensorType(mutant.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        mutant, fix = args
        starts, ends = _region(attrs, TensorType.of(mutant))
        out = np.array(mutant)
        out[tuple(slice(s, e) for s, e in zip(starts, ends))] = fix
        return [out]

    def expression(self, inputs, attrs):
        """L_out mutant[i] − (mutant[i] inside the region) + fix[i − start] (fix reads 0 outside)."""
        starts, ends = _region(attrs, inputs[0])
        loops = iters("o", inputs[0].shape)
        here = tuple(var(it.name) for it in loops)
        inside = Read(0, here)
        for it, s, e in zip(loops, starts, ends):
            inside = Guard(var(it.name), s, e, inside)
        fix = Read(1, tuple(i - s for i, s in zip(here, starts)))
        return Expr(loops, (), Call("add", (Call("sub", (Read(0, here), inside)), fix)))

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        """One copy of the region: the fix is read and written over the mutant in place (the rest
        of the mutant does not move). Fused into a following layout copy it is not even that."""
        return 2 * ins[1].nbytes

    def to_onnx(self, ctx, node):
        """Box replacement as nested Concats: along each axis the box does not span, from the
        innermost out, the piece so far is put between the mutant's slices before and after it
        (those slices restricted to the box along the axes further out)."""
        mutant, fix = node.inputs
        t = ctx.type(mutant)
        starts, ends = _region(node.attrs, t)
        cut = [a for a in range(t.rank) if (starts[a], ends[a]) != (0, t.shape[a])]
        if not cut:
            ctx.node("Identity", [fix], node.outputs)
            return
        piece = fix
        for k in reversed(range(len(cut))):
            a, outer = cut[k], cut[:k]
            parts = []
            for lo, hi in ((0, starts[a]), (ends[a], t.shape[a])):
                if hi > lo:
                    axes = outer + [a]
                    s = [starts[b] for b in outer] + [lo]
                    e = [ends[b] for b in outer] + [hi]
                    ins = [mutant, int64s(ctx, s, "starts"), int64s(ctx, e, "ends"),
                           int64s(ctx, axes, "axes")]
                    parts.append(ctx.node("Slice", ins, [ctx.fresh("side")])[0])
                if lo == 0:
                    parts.append(piece)
            out = node.outputs if k == 0 else [ctx.fresh("box")]
            piece = ctx.node("Concat", parts, out, axis=a)[0]


def _layout_shape(shape: tuple[int, ...], attrs) -> tuple[int, ...]:
    """The shape after fused_correct's view reshape, transpose and final reshape (each optional)."""
    s = tuple(shape)
    for name in ("view", "perm", "shape"):
        v = tuple(attrs[name])
        if not v:
            continue
        if name == "perm":
            if sorted(v) != list(range(len(s))):
                raise ShapeError(f"perm {v} is not a permutation of the {len(s)} dims of {list(s)}")
            s = tuple(s[p] for p in v)
        else:
            if any(d < 0 for d in v) or prod(v) != prod(s):
                raise ShapeError(f"{name} {v} cannot reshape {list(s)} ({prod(s)} elements)")
            s = v
    return s


@register
class FusedCorrect(OpDef):
    """PET's correction fused into the reshape/transpose chain after it (see the module doc):
    out = reshape(transpose(reshape(correct(mutant, fix; region), view), perm), shape)."""

    op = Op.FUSED_CORRECT
    correction = True
    arity = (2, 2)
    attrs = {"region": Attr("ints", check=non_negative, doc="starts, then ends (2·rank)"),
             "view": Attr("ints", (), doc="reshape after the correction (empty: none)"),
             "perm": Attr("ints", (), doc="then transpose (empty: none)"),
             "shape": Attr("ints", (), doc="then reshape (empty: none)")}

    def infer(self, types, attrs):
        (corrected,) = Correct().infer(types, {"region": attrs["region"]})
        return [TensorType(_layout_shape(corrected.shape, attrs), corrected.dtype)]

    def numpy(self, args, attrs):
        (y,) = Correct().numpy(args, {"region": attrs["region"]})
        if attrs["view"]:
            y = y.reshape(attrs["view"])
        if attrs["perm"]:
            y = y.transpose(attrs["perm"])
        if attrs["shape"]:
            y = y.reshape(attrs["shape"])
        return [np.ascontiguousarray(y)]

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        """As `correct`'s: one copy of the region. The layout chain it absorbs is views that cost
        no bytes (the cost model's reshape and transpose), and where they would need a copy, the
        correction is done inside that copy."""
        return 2 * ins[1].nbytes

    def to_onnx(self, ctx, node):
        """The correction's Slice/Concat expansion, then Reshape, Transpose, Reshape."""
        steps = [(k, attrs) for k, attrs in (("view", node.attrs["view"]), ("perm", node.attrs["perm"]),
                                             ("shape", node.attrs["shape"])) if attrs]
        cur = node.outputs[0] if not steps else ctx.fresh("corrected")
        Correct().to_onnx(ctx, _Named(node.inputs, {"region": node.attrs["region"]}, [cur]))
        for k, (name, v) in enumerate(steps):  # each as its own op exports it (a Reshape to a 0 dim: allowzero)
            out = node.outputs[0] if k == len(steps) - 1 else ctx.fresh(name)
            op, attr = (Op.TRANSPOSE, "perm") if name == "perm" else (Op.RESHAPE, "shape")
            opdef(op).to_onnx(ctx, _Named([cur], {attr: v}, [out]))
            cur = out


class _Named:
    """The inputs, attributes and outputs of a node, for an expansion that writes another op's."""

    def __init__(self, inputs, attrs, outputs):
        self.inputs, self.attrs, self.outputs = list(inputs), attrs, list(outputs)
