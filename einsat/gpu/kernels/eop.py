"""eOperators (EinNet §5.2) as generated kernels: one thread per output element.

    out[x] = reduce_{s} body(x, s)        (reduce: sum, or max)

The thread decomposes its output position into the traversal iterators, runs the summation
iterators as nested loops with constant bounds, computes every subscript with floor division
and modulo (C's `/` truncates, so negative operands are rounded down explicitly), and reads
each input through its strides (any view), guarded by a bounds test wherever the iterator
ranges may leave the tensor (padding reads 0). Element-wise functions use the C expressions of
`kernels.elementwise` (one definition per op). A scope the body reads is a lambda computing one
of its elements (recomputed at each read: an eOperator's scopes are small memory-bound maps).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import CType, Kernel, Param, ctype, decompose, extent, grid_stride, make_kernel, memoize
from einsat.gpu.kernels.elementwise import EXPRESSIONS, Operand, Step
from einsat.ir.expr import Index, parse
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Read, scopes


def floordiv(a: str, q: int) -> str:
    return a if q == 1 else f"(({a}) >= 0 ? ({a}) / {q}LL : -((-({a}) + {q - 1}LL) / {q}LL))"


class _Writer:
    """C code for one expression and its scopes."""

    def __init__(self, inputs: Sequence[Operand], ct: CType):
        self.inputs = inputs
        self.ct = ct
        self.lambdas: list[str] = []
        self.scope_names: dict[Expr, tuple[str, Expr]] = {}

    def index(self, i: Index, names: dict[str, str]) -> str:
        parts = []
        for a, c in i.terms:
            if isinstance(a, str):
                v = names[a]
            else:
                arg = self.index(a.arg, names)
                div = floordiv(arg, a.q)
                v = div if a.kind == "/" else f"(({arg}) - {a.q}LL * {div})"
            parts.append(v if c == 1 else f"{c}LL * {v}")
        if i.const or not parts:
            parts.append(f"{i.const}LL")
        return "(" + " + ".join(parts) + ")"

    def body(self, b: Body, names: dict[str, str], ranges) -> str:
        ct = self.ct
        if isinstance(b, Const):
            return ct.literal(b.value)
        if isinstance(b, Guard):
            i = self.index(b.idx, names)
            return f"((({i}) >= {b.lo}LL && ({i}) < {b.hi}LL) ? {self.body(b.value, names, ranges)} : {ct.literal(0)})"
        if isinstance(b, Call):
            if b.fn not in EXPRESSIONS:
                raise ExecutionError(f"eop: no C expression for {b.fn!r}")
            args = [self.body(a, names, ranges) for a in b.args]
            return EXPRESSIONS[b.fn](args, Step(b.fn, (), ct.dtype), ct, [ct] * len(args))
        return self.read(b, names, ranges)

    def read(self, r: Read, names, ranges) -> str:
        if isinstance(r.src, int):
            op = self.inputs[r.src]
            dims, lows = op.shape, (0,) * len(op.shape)
        else:
            dims, lows = r.src.shape, r.src.lows
        coords, conds = [], []
        for i, d, lo in zip(r.idx, dims, lows):
            c = self.index(i, names)
            coords.append(c)
            blo, bhi = i.bounds(ranges)
            if blo < lo or bhi >= lo + d:
                conds.append(f"({c}) >= {lo}LL && ({c}) < {lo + d}LL")
        if isinstance(r.src, int):
            op = self.inputs[r.src]
            off = " + ".join(f"({c}) * {s}LL" for c, s in zip(coords, op.strides) if s) or "0"
            value = f"({self.ct.compute}){ctype(op.dtype).load(f'in{r.src}[{off}]')}"
        else:
            value = f"{self.scope(r.src)}({', '.join(coords)})"
        return f"(({' && '.join(conds)}) ? {value} : {self.ct.literal(0)})" if conds else value

    def scope(self, s: Expr) -> str:
        if s not in self.scope_names:
            name = f"scope{len(self.scope_names)}"
            self.scope_names[s] = (name, s)
            params = ", ".join(f"idx_t {name}_{it.name}" for it in s.loops)
            inner = self.reduction(s, name, indent="            ")
            self.lambdas.append(f"        auto {name} = [&]({params}) -> {self.ct.acc} {{\n{inner}"
                                f"            return acc;\n        }};")
        return self.scope_names[s][0]

    def reduction(self, e: Expr, prefix: str, indent: str) -> str:
        """Statements leaving the value of `e` at its traversal point (named `<prefix>_<iter>`)
        in `acc`."""
        for s in scopes(e):
            self.scope(s)
        ct, t = self.ct, self.ct.acc
        names = {it.name: f"{prefix}_{it.name}" for it in e.loops + e.sums}
        ranges = e.ranges()
        value = self.body(e.body, names, ranges)
        if e.reduce == "max":
            init, update = ct.lowest(), "acc = (v > acc || v != v) ? v : acc;"
        else:
            init, update = ct.literal(0), "acc += v;"
        lines = [f"{indent}{t} acc = {init};"]
        pad = indent
        for it in e.sums:
            lines.append(f"{pad}for (idx_t {names[it.name]} = {it.lo}LL; {names[it.name]} < {it.hi}LL; "
                         f"++{names[it.name]}) {{")
            pad += "    "
        lines.append(f"{pad}const {t} v = ({t})({value});")
        lines.append(f"{pad}{update}")
        for _ in e.sums:
            pad = pad[:-4]
            lines.append(f"{pad}}}")
        return "\n".join(lines) + "\n"


@memoize
def eop_kernel(expr: str, inputs: Sequence[Operand], out_dtype) -> Kernel:
    """The kernel of an eop whose `expr` attribute is `expr`, over `inputs` (any views);
    parameters in0..in{n-1}, then `out` (contiguous)."""
    e = parse(expr)
    ct = ctype(out_dtype)
    if ct.compute == "bool":
        raise ExecutionError("eop kernels compute numbers, not booleans")
    w = _Writer(inputs, ct)
    inner = w.reduction(e, "x", indent="        ")
    lines = [decompose("i", e.shape, prefix="p")] if e.shape else []
    lines += [f"        const idx_t x_{it.name} = p{k} + {it.lo}LL;" for k, it in enumerate(e.loops)]
    lines += w.lambdas
    lines.append(inner.rstrip())
    lines.append(f"        out[i] = {ct.save('acc')};")
    work = int(np.prod(e.shape))
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + [Param("out", "out", out_dtype)]
    span = max([work] + [extent(op.shape, op.strides) for op in inputs])
    return make_kernel("eop", params, grid_stride("\n".join(lines), work), work, span=span)
