"""Layout ops that cut and join: concat, split, slice, pad, gather.

All are layout-only; all but `pad` in a non-zero mode are multi-linear (`gather` in its data).
Attributes are normalized to one explicit form: axes non-negative; slice is listed on every axis
with clamped, tightened bounds (see `canonical_slice`).
"""

from __future__ import annotations

import numpy as np

from einsat.ir.dims import SymDim, prove_eq, prove_ge
from einsat.ir.expr import Expr, Read, var
from einsat.ir.expr.build import iters
from einsat.ir.expr.nodes import add
from einsat.ir.ops.onnx_args import const_dims, const_input, const_ints, int64s, known_shape
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, normalize_axis, one_of, register, same_dtype
from einsat.ir.types import TensorType


def _axis(attrs, types):
    if types and types[0] is not None:
        attrs["axis"] = normalize_axis(attrs["axis"], types[0].rank)
    return attrs


class _Layout(OpDef):
    layout_only = True
    multilinear = True

    def flops(self, ins, outs, attrs):
        return 0


@register
class Concat(_Layout):
    op = Op.CONCAT
    exact_in_half = True
    eop_fusable = True
    nchwc = "carried"
    arity = (1, None)
    onnx_type = "Concat"
    attrs = {"axis": Attr("int")}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        a, first = attrs["axis"], types[0]
        for t in types[1:]:
            if t.rank != first.rank or t.shape[:a] + t.shape[a + 1:] != first.shape[:a] + first.shape[a + 1:]:
                raise ShapeError(f"inputs {first} and {t} differ in a dim other than the axis {a}")
        shape = first.shape[:a] + (sum(t.shape[a] for t in types),) + first.shape[a + 1:]
        return [TensorType(shape, same_dtype(types))]

    def numpy(self, args, attrs):
        return [np.concatenate(args, axis=attrs["axis"])]

    def expression(self, inputs, attrs):
        """L_out Σ_k input_k[..., i − offset_k, ...]: each input reads 0 outside its own part."""
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        a, offset, parts = attrs["axis"], 0, []
        for k, t in enumerate(inputs):
            idx = [var(it.name) for it in loops]
            idx[a] = idx[a] - offset
            parts.append(Read(k, tuple(idx)))
            offset += t.shape[a]
        return Expr(loops, (), add(*parts))

    def from_onnx(self, ctx, onode):
        return list(onode.input), {"axis": ctx.attrs(onode)["axis"]}

    def to_onnx(self, ctx, node):
        ctx.node("Concat", node.inputs, node.outputs, axis=node.attrs["axis"])


@register
class Split(_Layout):
    """Cuts x along `axis` into pieces of `sizes` (one output per size)."""

    op = Op.SPLIT
    exact_in_half = True
    view = True
    onnx_type = "Split"
    attrs = {"axis": Attr("int", 0), "sizes": Attr("ints", check=non_negative)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def num_outputs(self, attrs):
        return len(attrs["sizes"])

    def infer(self, types, attrs):
        x, a = types[0], attrs["axis"]
        if not attrs["sizes"] or sum(attrs["sizes"]) != x.shape[a]:
            raise ShapeError(f"sizes {attrs['sizes']} do not add up to dim {a} of {x}")
        return [TensorType(x.shape[:a] + (s,) + x.shape[a + 1:], x.dtype) for s in attrs["sizes"]]

    def numpy(self, args, attrs):
        return np.split(args[0], np.cumsum(attrs["sizes"])[:-1], axis=attrs["axis"])

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        x = ctx.type(onode.input[0])
        axis = normalize_axis(a.get("axis", 0), x.rank)
        sizes = const_ints(ctx, onode, 1, "split")
        if sizes is None:
            dim, n = x.shape[axis], a.get("num_outputs", len(onode.output))
            if "num_outputs" in a:  # opset 18: the last piece may be smaller
                chunk = -(-dim // n)
                sizes = (chunk,) * (n - 1) + (dim - chunk * (n - 1),)
            else:
                sizes = (dim // n,) * n if dim % n == 0 else ()
            if not sizes or min(sizes) < 0:
                raise ctx.not_representable(f"Split of dim {dim} into {n} pieces")
        return [onode.input[0]], {"axis": axis, "sizes": sizes}

    def to_onnx(self, ctx, node):
        ctx.node("Split", [node.inputs[0], int64s(ctx, node.attrs["sizes"], "split")], node.outputs,
                 axis=node.attrs["axis"])


def canonical_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int, int]:
    """ONNX Slice bounds (negative = from the end, then clamped) as the one canonical triple
    selecting the same elements: (0, 0, 1) when empty, (i, i+1, 1) for one element, else `end`
    just past the last element; "through index 0" with a negative step is end = -(dim+1)."""
    if step == 0:
        raise ShapeError("slice steps must not be 0")
    if isinstance(start, SymDim) or isinstance(end, SymDim) or isinstance(dim, SymDim):
        return _symbolic_slice(start, end, step, dim)
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    n = len(range(start, end, step))
    if n == 0:
        return 0, 0, 1
    if n == 1:
        return start, start + 1, 1
    last = start + (n - 1) * step
    if step > 0:
        return start, last + 1, step
    return start, (last - 1 if last > 0 else -(dim + 1)), step


def _symbolic_slice(start, end, step: int, dim) -> tuple:
    """`canonical_slice` where a bound or the dim is symbolic: unit steps only; a negative int
    bound counts from the end, an end of at least the dim is the dim. A symbolic end is kept as
    it is where it may exceed the dim: the program then holds only at sizes where it does not
    (`ir.symbolic.instantiate` refuses the others, naming the node)."""
    if step != 1:
        raise ShapeError(f"a slice [{start}:{end}:{step}] of a dim {dim}: only unit steps are taken with symbolic "
                         f"bounds or dims")
    start = start + dim if prove_ge(start, 0) is False else start  # negative: from the end
    end = end + dim if prove_ge(end, 0) is False else end
    if isinstance(end, int) and (end >= 2**31 or not isinstance(dim, SymDim) and end > dim):
        end = dim  # exporters write "to the end" as INT64_MAX
    elif prove_ge(end, dim):
        end = dim
    if prove_ge(start, 0) is not True:
        raise ShapeError(f"a slice from {start} of a dim {dim}: the start is not >= 0 for every size")
    after = prove_ge(end, start)
    if after is False:
        return 0, 0, 1
    if after is None and not isinstance(end, SymDim):
        raise ShapeError(f"a slice [{start}:{end}] of a dim {dim} is empty at some sizes only")
    return start, end, 1


def slice_len(start, end, step: int):
    if isinstance(start, SymDim) or isinstance(end, SymDim):
        return end - start  # unit steps (`_symbolic_slice`)
    return len(range(start, end if end >= 0 else -1, step))


@register
class Slice(_Layout):
    """x[start:end:step] along `axes` (ONNX Slice). Normalized: every axis listed in order, with
    `canonical_slice` bounds."""

    op = Op.SLICE
    exact_in_half = True
    view = True
    onnx_type = "Slice"
    attrs = {
        "starts": Attr("ints"),
        "ends": Attr("ints"),
        "axes": Attr("ints", None, doc="default: 0, 1, ..., len(starts)-1"),
        "steps": Attr("ints", None, doc="default: all 1"),
    }

    def normalize(self, attrs, types):
        x = types[0]
        if x is None:
            return attrs
        starts, ends = attrs["starts"], attrs["ends"]
        axes = attrs["axes"] if attrs["axes"] is not None else tuple(range(len(starts)))
        steps = attrs["steps"] if attrs["steps"] is not None else (1,) * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ShapeError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                             "must have the same length")
        axes = tuple(normalize_axis(a, x.rank) for a in axes)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"axes {axes} name an axis twice")
        full = [(0, d, 1) for d in x.shape]
        for a, s, e, st in zip(axes, starts, ends, steps):
            full[a] = (s, e, st)
        canon = [canonical_slice(s, e, st, d) for (s, e, st), d in zip(full, x.shape)]
        return {"starts": tuple(c[0] for c in canon), "ends": tuple(c[1] for c in canon),
                "axes": tuple(range(x.rank)), "steps": tuple(c[2] for c in canon)}

    def infer(self, types, attrs):
        x = types[0]
        dims = tuple(slice_len(s, e, st) for s, e, st in zip(attrs["starts"], attrs["ends"], attrs["steps"]))
        return [TensorType(dims, x.dtype)]

    def numpy(self, args, attrs):
        idx = tuple(slice(s, e if e >= 0 else None, st)
                    for s, e, st in zip(attrs["starts"], attrs["ends"], attrs["steps"]))
        return [np.asarray(args[0][idx], order="C")]

    def bytes(self, ins, outs, attrs):
        """Reads only what it keeps."""
        return 2 * outs[0].nbytes

    def expression(self, inputs, attrs):
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        idx = (var(it.name) * st + s for it, s, st in zip(loops, attrs["starts"], attrs["steps"]))
        return Expr(loops, (), Read(0, tuple(idx)))

    def from_onnx(self, ctx, onode):
        attrs = {"starts": const_dims(ctx, onode, 1, "starts"), "ends": const_dims(ctx, onode, 2, "ends"),
                 "axes": const_ints(ctx, onode, 3, "axes"), "steps": const_ints(ctx, onode, 4, "steps")}
        return [onode.input[0]], attrs

    def to_onnx(self, ctx, node):
        """Only the axes it cuts, and no steps input where they are all 1: onnxruntime's graph
        optimizer joins sibling Slices of one axis into a Split only in that form (Swin's cyclic
        shifts, every axis written, stayed 58 Slices where onnxslim's file ran 20 Splits)."""
        a = node.attrs
        dims = known_shape(ctx, node.inputs[0]) or (None,) * len(a["starts"])  # unknown: every axis written
        cut = [k for k, (s, e, st, d) in enumerate(zip(a["starts"], a["ends"], a["steps"], dims))
               if not (s == 0 and st == 1 and d is not None and prove_eq(e, d) is True)] or list(range(len(dims)))
        pick = lambda values: [values[k] for k in cut]  # noqa: E731
        ins = [node.inputs[0], int64s(ctx, pick(a["starts"]), "starts"), int64s(ctx, pick(a["ends"]), "ends"),
               int64s(ctx, pick(a["axes"]), "axes")]
        if any(st != 1 for st in pick(a["steps"])):
            ins.append(int64s(ctx, pick(a["steps"]), "steps"))
        ctx.node("Slice", ins, node.outputs)


@register
class Pad(_Layout):
    """np.pad with ONNX pads (all begins, then all ends): mode "constant" fills `value`,
    "reflect" mirrors without repeating the edge, "edge" repeats it. Linear unless it fills a non-zero constant
    (`is_multilinear` says so per application; the class flag stays False, the safe answer)."""

    op = Op.PAD
    exact_in_half = True
    multilinear = False
    onnx_type = "Pad"
    attrs = {
        "pads": Attr("ints", check=non_negative, doc="2·rank: all begins, then all ends"),
        "mode": Attr("str", "constant", one_of("constant", "reflect", "edge")),
        "value": Attr("float", 0.0, doc="the fill of mode 'constant'"),
    }

    def normalize(self, attrs, types):
        if attrs["mode"] != "constant":
            attrs["value"] = 0.0
        return attrs

    def is_multilinear(self, attrs):
        # reflect and edge copy input elements; constant mode adds `value`, linear only when 0
        return attrs["value"] == 0.0

    def infer(self, types, attrs):
        x, p = types[0], attrs["pads"]
        if len(p) != 2 * x.rank:
            raise ShapeError(f"pads {p} need {2 * x.rank} values (begins, then ends) for {x}")
        r = x.rank
        for k, d in enumerate(x.shape):
            if attrs["mode"] == "reflect" and max(p[k], p[r + k]) >= max(d, 1):
                raise ShapeError(f"reflect padding {p[k]}+{p[r + k]} of dim {k} needs pads < its size {d}")
            if attrs["mode"] == "edge" and d == 0 and p[k] + p[r + k]:
                raise ShapeError(f"edge padding of the empty dim {k}")
        return [TensorType(tuple(d + p[k] + p[r + k] for k, d in enumerate(x.shape)), x.dtype)]

    def numpy(self, args, attrs):
        x, p = args[0], attrs["pads"]
        if x.ndim == 0:  # np.pad rejects 0-d arrays; there is nothing to pad
            return [np.array(x)]
        widths = [(p[k], p[x.ndim + k]) for k in range(x.ndim)]
        if attrs["mode"] == "constant":
            return [np.pad(x, widths, constant_values=np.asarray(attrs["value"]).astype(x.dtype))]
        return [np.pad(x, widths, mode=attrs["mode"])]

    def expression(self, inputs, attrs):
        """L_out x[i − pad_begin]: zero padding only (the expressions' own padding)."""
        if attrs["mode"] != "constant" or attrs["value"] != 0.0:
            return None
        loops = iters("o", self.infer(inputs, attrs)[0].shape)
        return Expr(loops, (), Read(0, tuple(var(it.name) - p for it, p in zip(loops, attrs["pads"]))))

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        mode = a.get("mode", "constant")
        if mode not in ("constant", "reflect", "edge"):
            raise ctx.not_representable(f"Pad mode {mode!r}")
        x = ctx.type(onode.input[0])
        pads = const_ints(ctx, onode, 1, "pads")
        value = const_input(ctx, onode, 2, "constant_value")
        axes = const_ints(ctx, onode, 3, "axes")
        if axes is not None:  # opset 18: pads for some axes only
            full = [0] * (2 * x.rank)
            for k, ax in enumerate(axes):
                ax %= x.rank
                full[ax], full[x.rank + ax] = pads[k], pads[len(axes) + k]
            pads = tuple(full)
        if min(pads, default=0) < 0:
            raise ctx.not_representable(f"Pad with negative pads {pads}")
        attrs = {"pads": pads, "mode": mode}
        if value is not None and value.size:
            attrs["value"] = float(value.reshape(-1)[0])
        return [onode.input[0]], attrs

    def to_onnx(self, ctx, node):
        a, x = node.attrs, ctx.type(node.inputs[0])
        ins = [node.inputs[0], int64s(ctx, a["pads"], "pads")]
        if a["mode"] == "constant" and a["value"] != 0.0:
            ins.append(ctx.constant(np.asarray(a["value"]).astype(x.dtype), "value"))
        ctx.node("Pad", ins, node.outputs, mode=a["mode"])


@register
class Gather(_Layout):
    """np.take(data, indices, axis): out[i.., j.., k..] = data[i.., indices[j..], k..]; negative
    indices count from the end (ONNX Gather). Multi-linear in data."""

    op = Op.GATHER
    exact_in_half = True
    parameter_inputs = (1,)  # the indices
    arity = (2, 2)
    onnx_type = "Gather"
    attrs = {"axis": Attr("int", 0)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        data, idx = types
        if idx.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ShapeError(f"indices must be int32 or int64, not {idx.dtype}")
        a = attrs["axis"]
        return [TensorType(data.shape[:a] + idx.shape + data.shape[a + 1:], data.dtype)]

    def numpy(self, args, attrs):
        data, idx = args
        return [np.take(data, idx, axis=attrs["axis"])]

    def bytes(self, ins, outs, attrs):
        """Reads the indices and only the gathered data."""
        return ins[1].nbytes + 2 * outs[0].nbytes

    def from_onnx(self, ctx, onode):
        return list(onode.input), {"axis": ctx.attrs(onode).get("axis", 0)}

    def to_onnx(self, ctx, node):
        ctx.node("Gather", node.inputs, node.outputs, axis=node.attrs["axis"])
