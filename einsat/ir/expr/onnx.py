"""An expression as standard ONNX nodes (how an eOperator exports, like the band products).

The grid of the expression (traversal axes, then summation axes) is built by broadcasting:
each iterator is a `Range` reshaped onto its own axis, each subscript is computed from them
with Add, Mul, Div and Mod (floor division as (a − a mod q) / q: ONNX's integer Div truncates),
each read is one `Gather` from the flattened tensor with one zero appended, where out-of-range
positions point at that zero. The body maps to the registry ops' ONNX types, a guard to Where,
the reduction to ReduceSum / ReduceMax over the summation axes. Scopes export first, as values
of their own. onnxruntime materializes the grid: the route is for moderate sizes, as for
`g2bmm`.
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.expr.index import Index
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Read, scopes
from einsat.ir.registry import Op, opdef

I64 = np.int64


def export(ctx, e: Expr, inputs: list[str], output: str, dtype) -> None:
    """Emit nodes computing `e` over the values `inputs` (by position) into `output`."""
    _Exporter(ctx, inputs, np.dtype(dtype)).expr(e, output)


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
                self.expr(s, name)
                self.scope_values[s] = name
        its = e.loops + e.sums
        rank = len(its)
        self.grid = {}
        for axis, it in enumerate(its):
            shape = [1] * rank
            shape[axis] = it.size
            rng = self.node("Range", [self.const(it.lo, I64), self.const(it.hi, I64), self.const(1, I64)], "range")
            self.grid[it.name] = self.node("Reshape", [rng, self.const(shape, I64, "shape")], f"it_{it.name}",
                                           allowzero=1)
        self.ranges = e.ranges()
        value = self.body(e.body)
        full = self.const(list(e.shape) + [it.size for it in e.sums], I64, "grid")
        value = self.node("Expand", [value, full], "grid_value")
        if e.sums:
            axes = self.const(list(range(len(e.loops), rank)), I64, "axes")
            kind = "ReduceSum" if e.reduce == "sum" else "ReduceMax"
            self.ctx.node(kind, [value, axes], [output], keepdims=0)
        else:
            self.ctx.node("Identity", [value], [output])

    def index(self, i: Index) -> str:
        out = None
        for a, c in i.terms:
            if isinstance(a, str):
                t = self.grid[a]
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
            onnx_type = opdef(Op(b.fn)).onnx_type
            return self.node(onnx_type, [self.body(a) for a in b.args], b.fn)
        return self.read(b)

    def read(self, r: Read) -> str:
        if isinstance(r.src, int):
            name, shape, lows = self.inputs[r.src], self.ctx.type(self.inputs[r.src]).shape, (0,) * len(r.idx)
        else:
            name, shape, lows = self.scope_values[r.src], r.src.shape, r.src.lows
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
