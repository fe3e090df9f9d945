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
from einsat.gpu.kernels.codegen import (
    CType,
    Kernel,
    Param,
    block_rows,
    ctype,
    decompose,
    extent,
    grid_stride,
    make_kernel,
    memoize,
)
from einsat.gpu.kernels.elementwise import EXPRESSIONS, Operand, Step
from einsat.gpu.kernels.reduce import SERIAL_MAX, _block_size
from einsat.ir.expr import Index, parse
from einsat.ir.expr.compose import row_form
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Read, all_scopes, scopes


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
    parameters in0..in{n-1}, then `out` (contiguous). A fused row expression (`row_form`:
    softmax, layernorm, RMSNorm and what feeds them) gets the row kernel (`row_kernel`), any
    other one a thread per output element."""
    e = parse(expr)
    ct = ctype(out_dtype)
    if ct.compute == "bool":
        raise ExecutionError("eop kernels compute numbers, not booleans")
    rows = row_form(e)
    if rows is not None:
        return row_kernel(e, rows, inputs, out_dtype)
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


class _RowWriter(_Writer):
    """A writer whose scope reads are the row's statistics, computed before (C variables)."""

    def __init__(self, inputs: Sequence[Operand], ct: CType, values: dict[Expr, str]):
        super().__init__(inputs, ct)
        self.values = values

    def read(self, r: Read, names, ranges) -> str:
        if isinstance(r.src, Expr):
            return f"(({self.ct.compute}){self.values[r.src]})"
        return super().read(r, names, ranges)


def row_kernel(e: Expr, rows: int, inputs: Sequence[Operand], out_dtype) -> Kernel:
    """A fused row expression (`ir.expr.compose.row_form`): its leading `rows` dims are rows,
    each scope a reduction over the rest that is computed once per row, in dependency order
    (a layernorm's mean before its variance), then the row's outputs. Statistics accumulate in
    the accumulator type (float for fp32 and fp16, double for fp64). Rows longer than
    `SERIAL_MAX` (the longest scope or output row) get a block each, shorter ones a warp each:
    the threads stride over the row (consecutive lanes, consecutive elements: coalesced loads)
    and combine with the prelude's warp-shuffle warp or block reductions. (A thread per row, as
    `reduce.softmax_kernel` runs rows of 64, measured 41 µs for bert_tensat's [16, 64, 64]
    softmax on an H100: its loads stride by a row.) On the serial host emulation a warp is one
    lane (`EINSAT_WARP`)."""
    ct = ctype(out_dtype)
    t = ct.acc
    order = [s for s in all_scopes(e) if s is not e]  # children before parents
    values = {s: f"st{k}" for k, s in enumerate(order)}
    w = _RowWriter(inputs, ct, values)
    row_shape, col_shape = e.shape[:rows], e.shape[rows:]
    n_rows, n_cols = int(np.prod(row_shape)), int(np.prod(col_shape))
    parallel = max([n_cols] + [s.sum_points() for s in order]) > SERIAL_MAX
    lo, step, row = ("threadIdx.x", "blockDim.x", "row") if parallel else ("lane", "EINSAT_WARP", "row")
    lines = [] if parallel else ["        const idx_t row = i / EINSAT_WARP, lane = i % EINSAT_WARP;"]
    lines += [decompose(row, row_shape, prefix="p")] if row_shape else []
    row_vars = [f"x_{it.name}" for it in e.loops[:rows]]
    lines += [f"        const idx_t {v} = p{k} + {it.lo}LL;" for k, (v, it) in enumerate(zip(row_vars, e.loops))]
    for k, s in enumerate(order):
        names = {it.name: (row_vars[j] if j < rows else f"{it.lo}LL") for j, it in enumerate(s.loops)}
        names.update({it.name: f"s{k}_{j}" for j, it in enumerate(s.sums)})
        scope = "block" if parallel else "warp"
        if s.reduce == "max":
            init, update, combine = ct.lowest(), f"st{k} = (v > st{k} || v != v) ? v : st{k};", f"einsat_{scope}_max"
        else:
            init, update, combine = ct.literal(0), f"st{k} += v;", f"einsat_{scope}_sum"
        lines.append(f"        {t} st{k} = {init};")
        lines.append(f"        for (idx_t c = {lo}; c < {s.sum_points()}LL; c += {step}) {{")
        lines.append(decompose("c", [it.size for it in s.sums], prefix=f"q{k}_", indent="            "))
        lines += [f"            const idx_t s{k}_{j} = q{k}_{j} + {it.lo}LL;" for j, it in enumerate(s.sums)]
        lines.append(f"            const {t} v = ({t})({w.body(s.body, names, s.ranges())});")
        lines.append(f"            {update}")
        lines.append("        }")
        lines.append(f"        st{k} = {combine}(st{k}, smem);" if parallel else f"        st{k} = {combine}(st{k});")
    names = {it.name: f"x_{it.name}" for it in e.loops}
    lines.append(f"        for (idx_t c = {lo}; c < {n_cols}LL; c += {step}) {{")
    if col_shape:
        lines.append(decompose("c", col_shape, prefix="pc", indent="            "))
    lines += [f"            const idx_t x_{it.name} = pc{k} + {it.lo}LL;" for k, it in enumerate(e.loops[rows:])]
    value = w.body(e.body, names, e.ranges())
    lines.append(f"            out[{row} * {n_cols}LL + c] = {ct.save(f'({t})({value})')};")
    lines.append("        }")
    body = "\n".join(lines)
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + [Param("out", "out", out_dtype)]
    span = max([n_rows * max(n_cols, 32)] + [extent(op.shape, op.strides) for op in inputs])
    if not parallel:  # a warp per row: work items are (row, lane) pairs
        return make_kernel("eop_rows", params, grid_stride(body, f"{n_rows}LL * EINSAT_WARP"), n_rows * 32,
                           span=span)
    block = _block_size(max([n_cols] + [s.sum_points() for s in order]))
    body = f"    __shared__ {t} smem[32];\n" + block_rows(body, n_rows)
    return make_kernel("eop_rows", params, body, n_rows, block=block, per_block=1, span=span)
