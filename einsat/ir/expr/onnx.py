"""An expression as standard ONNX nodes (how an eOperator exports, like the band products).

The grid of the expression (traversal axes, then summation axes) is built by broadcasting:
each iterator is a `Range` reshaped onto its own axis, each subscript is computed from them
with Add, Mul, Div and Mod (floor division as (a − a mod q) / q: ONNX's integer Div truncates),
each read is one `Gather` from the flattened tensor with one zero appended, where out-of-range
positions point at that zero. The body maps to the registry ops' ONNX types, a guard to Where,
the reduction to ReduceSum / ReduceMax over the summation axes. Scopes export first, as values
of their own. onnxruntime materializes the grid: the route is for moderate sizes, as for
`g2bmm`.

An offset sum takes a faster route (`_offset_sum`): one read of an input whose subscripts are
the output's iterators in order, each with a positive step, plus summation iterators and
constants — EinNet's shifted sums after a convolution or a product (Fig. 3, Fig. 6). Each of its
few summation points is a strided `Slice` of the input (zero-padded once where a position falls
outside), and the points are added (or maxed) in a chain (faster on onnxruntime CPU than one
variadic Sum): no index grid, no Gather. Axes past the last one an output iterator reaches
(a transposed convolution's taps) move outermost first, by one Transpose, so that the slices
copy runs rather than single elements; where the axes the slices cut (padded, strided, one
position) are still innermost and each slice would copy fewer than `MIN_RUN` elements at a time
(einnet_conv_transpose's 4×4 planes after its MatMul: 2 ms of Pad in a 2.5 ms sum), the cut axes
of the shortest tail that holds a run move outermost and the sum is transposed back, two copies
that swap blocks of axes (0.5 ms). A scope that is an offset sum takes the same route, and
a read of a whole value at the output's own positions (ReLU fused onto a scope) is the value.
EinNet's 5×5 convolution derived into a convolution and a shifted sum ran 0.95× the input's time
on onnxruntime CPU through Gathers, 3.9× through slices (`benchmarks/eop_export_bench.py` times
the two routes of each derived eOperator).
"""

from __future__ import annotations

import contextlib
import itertools
from math import prod

import numpy as np

from einsat.ir.expr.index import Index, var
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Read, scopes
from einsat.ir.registry import Op, opdef

I64 = np.int64


MAX_OFFSET_TERMS = 64  # summation points an offset sum slices one by one
MIN_RUN = 64  # elements a slice copies at a time below which the cut axes move outermost
_ROUTES = {"slices": True}


@contextlib.contextmanager
def gathers_only():
    """Within the block every expression exports through Gathers, offset sums too (to compare
    the two routes: `benchmarks/eop_export_bench.py`)."""
    _ROUTES["slices"] = False
    try:
        yield
    finally:
        _ROUTES["slices"] = True


def export(ctx, e: Expr, inputs: list[str], output: str, dtype) -> None:
    """Emit nodes computing `e` over the values `inputs` (by position) into `output`."""
    plan = offset_sum(e, [ctx.type(i).shape for i in inputs]) if _ROUTES["slices"] else None
    if plan is not None:
        _emit_offset_sum(ctx, plan, inputs, output)
    else:
        _Exporter(ctx, inputs, np.dtype(dtype)).expr(e, output)


class OffsetSum:
    """`e` as a sum (or max) of strided slices of input `src` after zero padding `pads`."""

    def __init__(self, src: int, perm: list[int] | None, pads: list[tuple[int, int]],
                 terms: list[list[tuple[int, int, int]]], shape: tuple[int, ...], reduce: str,
                 back: tuple[list[int], list[int]] | None = None, cut: set[int] = frozenset(), run: int = 0):
        self.src = src
        self.perm = perm  # the input's axes reordered first (constant or cut axes outermost), or None
        self.pads = pads  # (before, after) per (reordered) input axis
        self.terms = terms  # per summation point, per axis: (start, stop, step) in the padded input
        self.shape = shape
        self.reduce = reduce
        self.back = back  # (perm, sizes): the sum's iterator axes (sizes) transposed to the output's order
        self.cut = cut  # the input axes some slice or the padding does not take whole
        self.run = run  # elements each slice copies at a time (along and past the innermost cut axis)


def offset_sum(e: Expr, shapes: list[tuple[int, ...]]) -> OffsetSum | None:
    """The offset-sum plan of `e` over inputs of `shapes`, or None where `e` is not one: its body
    one read of an input, every output iterator in one subscript of its own, in order, with a
    positive coefficient, the other terms summation iterators and constants, at most
    MAX_OFFSET_TERMS summation points."""
    r = e.body
    if not isinstance(r, Read) or not isinstance(r.src, int) or not 0 < e.sum_points() <= MAX_OFFSET_TERMS:
        return None
    loops = {it.name: it for it in e.loops}
    sums = {it.name: it for it in e.sums}
    placed: list[str] = []
    axes = []  # per input axis: (loop iterator or None, its coefficient, the summation terms, constant)
    for i in r.idx:
        if not i.is_affine():
            return None
        mine = [(a, c) for a, c in i.terms if a in loops]
        if len(mine) > 1 or any(c <= 0 for _, c in mine) or any(a not in loops and a not in sums for a, _ in i.terms):
            return None
        it = mine[0] if mine else (None, 0)
        if it[0] is not None:
            placed.append(it[0])
        axes.append((it[0], it[1], [(a, c) for a, c in i.terms if a in sums], i.const))
    if placed != [it.name for it in e.loops if it.name in placed] or len(set(placed)) != len(placed):
        return None
    if any(it.size != 1 for it in e.loops if it.name not in placed):
        return None
    # axes after the last that an output iterator reaches select one position per term, which
    # would make every slice copy single elements: they move outermost (one transposed copy)
    last = max((d for d, a in enumerate(axes) if a[0] is not None), default=-1)
    order = list(range(last + 1, len(axes))) + list(range(last + 1))
    plan = _plan(e, r.src, loops, sums, axes, shapes[r.src], order)
    if plan.run < MIN_RUN:
        # the axes the slices cut (padded, strided, one position, part of the axis) are the
        # innermost: Pad and Slice copy a few elements at a time (a transposed convolution's
        # 4×4 planes: 2 of its 2.5 ms in Pad). The cut axes of the shortest tail whose other
        # axes hold MIN_RUN elements move outermost, so the slices copy runs, at the price of two
        # transposed copies (the input, the result) that swap two blocks of axes where the cut
        # axes of the tail are adjacent, as a convolution's trailing spatial axes are
        whole = [d for d in order if axes[d][0] is not None and d not in plan.cut]
        for p in range(len(order) - 1, -1, -1):
            tail = order[p:]
            if prod(shapes[r.src][d] for d in tail if d in whole) >= MIN_RUN:
                moved = [d for d in tail if d not in whole]
                plan = _plan(e, r.src, loops, sums, axes, shapes[r.src],
                             moved + [d for d in order if d not in moved])
                break
    return plan


def _plan(e: Expr, src: int, loops, sums, axes, shape, order: list[int]) -> OffsetSum:
    """The plan reading the input's axes in `order` (`axes` as `offset_sum` describes them)."""
    axes = [axes[d] for d in order]
    shape = [shape[d] for d in order]
    terms = []
    for point in itertools.product(*(range(it.lo, it.hi) for it in e.sums)):
        at = dict(zip(sums, point))
        term = []
        for name, c, ss, k in axes:
            off = k + sum(at[a] * d for a, d in ss)
            if name is None:
                term.append((off, off + 1, 1))
            else:
                it = loops[name]
                term.append((c * it.lo + off, c * (it.hi - 1) + off + 1, c))
        terms.append(term)
    pads = [(max(0, -min(t[d][0] for t in terms)), max(0, max(t[d][1] for t in terms) - shape[d]))
            for d in range(len(shape))]
    terms = [[(a + pads[d][0], b + pads[d][0], c) for d, (a, b, c) in enumerate(t)] for t in terms]
    padded = [n + b + a for n, (b, a) in zip(shape, pads)]
    cut = {order[d] for d in range(len(axes)) if any(t[d] != (0, padded[d], 1) for t in terms) or pads[d] != (0, 0)}
    innermost = max((d for d in range(len(axes)) if order[d] in cut), default=-1)
    run = prod(padded[innermost + 1:])
    if innermost >= 0 and all(t[innermost][2] == 1 for t in terms):  # a slice copies its extent there
        run *= min(t[innermost][1] - t[innermost][0] for t in terms)
    # the sum's axes are the input's in `order`; without the size-1 ones, the output iterators'
    # axes go back to the output's order
    placed = [d for d in range(len(axes)) if axes[d][0] is not None]
    back = sorted(range(len(placed)), key=lambda k: order[placed[k]])
    sizes = [loops[axes[d][0]].size for d in placed]
    return OffsetSum(src, None if order == sorted(order) else order, pads, terms, e.shape, e.reduce,
                     None if back == sorted(back) else (back, sizes), cut, run)


def _emit_offset_sum(ctx, plan: OffsetSum, inputs: list[str], output: str) -> None:
    def const(value, hint):
        return ctx.constant(np.asarray(value, dtype=I64), hint)

    def node(op_type, ins, hint, **attrs):
        return ctx.node(op_type, ins, [ctx.fresh(hint)], **attrs)[0]

    data = inputs[plan.src]
    if plan.perm is not None:
        data = node("Transpose", [data], "reordered", perm=list(plan.perm))
    if any(p != (0, 0) for p in plan.pads):
        data = node("Pad", [data, const([b for b, _ in plan.pads] + [a for _, a in plan.pads], "pads")], "padded")
    acc = None
    for k, term in enumerate(plan.terms):
        starts, stops, steps = zip(*term)
        part = node("Slice", [data, const(starts, "starts"), const(stops, "stops"),
                              const(list(range(len(term))), "axes"), const(steps, "steps")], "term")
        if acc is not None:
            part = node("Add" if plan.reduce == "sum" else "Max", [acc, part], "partial")
        acc = part
    if plan.back is not None:
        perm, sizes = plan.back
        acc = node("Reshape", [acc, const(sizes, "shape")], "squeezed")
        acc = node("Transpose", [acc], "reordered", perm=list(perm))
    ctx.node("Reshape", [acc, const(plan.shape, "shape")], [output])


class _Exporter:
    def __init__(self, ctx, inputs: list[str], dtype: np.dtype):
        self.ctx = ctx
        self.inputs = inputs
        self.dtype = dtype
        self.scope_values: dict[Expr, str] = {}

    def const(self, value, dtype, hint="c") -> str:
        return self.ctx.constant(np.asarray(value, dtype=dtype), hint)

    def node(self, op_type: str, ins, hint: str, **attrs) -> str:
        return self.ctx.node(op_type, list(ins), [self.ctx.fresh(hint)], **attrs)[0]

    def expr(self, e: Expr, output: str) -> None:
        for s in scopes(e):
            if s not in self.scope_values:
                name = self.ctx.fresh("scope")
                plan = offset_sum(s, [self.ctx.type(i).shape for i in self.inputs]) if _ROUTES["slices"] else None
                if plan is not None:
                    _emit_offset_sum(self.ctx, plan, self.inputs, name)
                else:
                    self.expr(s, name)
                self.scope_values[s] = name
        self.loops, self.sums = e.loops, e.sums
        its = e.loops + e.sums
        rank = len(its)
        self.axes = {it.name: (axis, it) for axis, it in enumerate(its)}
        self.grid = {}
        self.ranges = e.ranges()
        value = self.body(e.body)
        full = self.const(list(e.shape) + [it.size for it in e.sums], I64, "grid")
        value = self.node("Expand", [value, full], "grid_value")
        if e.sums:
            kind = "ReduceSum" if e.reduce == "sum" else "ReduceMax"
            self.ctx.reduce(kind, value, range(len(e.loops), rank), output, keepdims=0)
        else:
            self.ctx.node("Identity", [value], [output])

    def iterator(self, name: str) -> str:
        """The values of grid iterator `name` on its own axis (a Range, made when first read)."""
        if name not in self.grid:
            axis, it = self.axes[name]
            shape = [1] * len(self.axes)
            shape[axis] = it.size
            rng = self.node("Range", [self.const(it.lo, I64), self.const(it.hi, I64), self.const(1, I64)], "range")
            self.grid[name] = self.node("Reshape", [rng, self.const(shape, I64, "shape")], f"it_{name}", allowzero=1)
        return self.grid[name]

    def index(self, i: Index) -> str:
        out = None
        for a, c in i.terms:
            if isinstance(a, str):
                t = self.iterator(a)
            else:
                arg = self.index(a.arg)
                q = self.const(a.q, I64, "q")
                rem = self.node("Mod", [arg, q], "mod", fmod=0)
                t = rem if a.kind == "%" else self.node("Div", [self.node("Sub", [arg, rem], "sub"), q], "div")
            if c != 1:
                t = self.node("Mul", [t, self.const(c, I64, "coef")], "scaled")
            out = t if out is None else self.node("Add", [out, t], "index")
        if out is None:
            return self.const(i.const, I64, "index")
        return self.node("Add", [out, self.const(i.const, I64, "offset")], "index") if i.const else out

    def body(self, b: Body) -> str:
        if isinstance(b, Const):
            return self.const(b.value, self.dtype, "value")
        if isinstance(b, Guard):
            i = self.index(b.idx)
            inside = self.node("And", [self.node("GreaterOrEqual", [i, self.const(b.lo, I64, "lo")], "ge"),
                                       self.node("Less", [i, self.const(b.hi, I64, "hi")], "lt")], "inside")
            return self.node("Where", [inside, self.body(b.value), self.const(0, self.dtype, "zero")], "guarded")
        if isinstance(b, Call):
            args = [self.body(a) for a in b.args]
            return opdef(Op(b.fn)).onnx_call(self.ctx, args, self.ctx.fresh(b.fn), self.dtype)
        return self.read(b)

    def read(self, r: Read) -> str:
        if isinstance(r.src, int):
            name, shape, lows = self.inputs[r.src], self.ctx.type(self.inputs[r.src]).shape, (0,) * len(r.idx)
        else:
            name, shape, lows = self.scope_values[r.src], r.src.shape, r.src.lows
        if self._whole(r, shape, lows):  # the value itself, on the grid's leading axes: no Gather
            if not self.sums:
                return name
            full = list(shape) + [1] * len(self.sums)
            return self.node("Reshape", [name, self.const(full, I64, "shape")], "whole")
        aligned = self._aligned(r, shape, lows)
        if aligned is not None:  # the value broadcast onto the grid: a Transpose and a Reshape
            perm, full = aligned
            if perm != sorted(perm):
                name = self.node("Transpose", [name], "aligned", perm=perm)
            return self.node("Reshape", [name, self.const(full, I64, "shape")], "broadcast")
        flat, mask = None, None
        stride = 1
        for i, d, lo in reversed(list(zip(r.idx, shape, lows))):
            pos = i - lo
            lo_b, hi_b = pos.bounds(self.ranges)
            p = self.index(pos)
            if lo_b < 0 or hi_b >= d:
                ok = self.node("And", [self.node("GreaterOrEqual", [p, self.const(0, I64, "zero")], "ge"),
                                       self.node("Less", [p, self.const(d, I64, "dim")], "lt")], "inside")
                mask = ok if mask is None else self.node("And", [mask, ok], "inside")
            term = p if stride == 1 else self.node("Mul", [p, self.const(stride, I64, "stride")], "offset")
            flat = term if flat is None else self.node("Add", [flat, term], "flat")
            stride *= d
        size = prod(shape)
        data = self.node("Reshape", [name, self.const([-1], I64, "flat")], "data")
        if flat is None:
            flat = self.const(0, I64, "index")
        if mask is not None:
            data = self.node("Concat", [data, self.const([0], self.dtype, "zero")], "padded", axis=0)
            flat = self.node("Where", [mask, flat, self.const(size, I64, "outside")], "gather_index")
        return self.node("Gather", [data, flat], "read", axis=0)

    def _aligned(self, r: Read, shape, lows) -> tuple[list[int], list[int]] | None:
        """(perm, grid shape) when `r` reads its whole source broadcast onto the grid: each
        subscript a grid iterator over the dim's own range (each iterator once) or, at a dim of
        size 1, that dim's one position. The source's dims then go in grid order (`perm`, the
        size-1 ones last) and reshape to the grid's rank. None otherwise (the Gather route):
        how a fused chain (softmax, a norm, GELU) exports as the element-wise ops and the
        reductions it was made of."""
        placed, ones = [], []
        for k, (i, d, lo) in enumerate(zip(r.idx, shape, lows)):
            names = [a for a, _ in i.terms]
            if len(names) == 1 and isinstance(names[0], str) and i == var(names[0]) and names[0] in self.axes:
                axis, it = self.axes[names[0]]
                if it.lo != lo or it.size != d:
                    return None
                placed.append((axis, k))
            elif not i.terms and d == 1 and i.const == lo:
                ones.append(k)
            else:
                return None
        if len({a for a, _ in placed}) != len(placed):
            return None
        placed.sort()
        full = [1] * len(self.axes)
        for axis, k in placed:
            full[axis] = shape[k]
        return [k for _, k in placed] + ones, full

    def _whole(self, r: Read, shape, lows) -> bool:
        """Whether `r` reads its whole source at the output's position: subscripts the output's
        iterators in order, over the source's own ranges."""
        return (len(r.idx) == len(self.loops) and tuple(shape) == tuple(it.size for it in self.loops)
                and tuple(lows) == tuple(it.lo for it in self.loops)
                and all(i == var(it.name) for i, it in zip(r.idx, self.loops)))
