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
    contiguous_strides,
    ctype,
    decompose,
    extent,
    grid_stride,
    make_kernel,
    memoize,
)
from einsat.gpu.kernels.elementwise import EXPRESSIONS, Operand, Step
from einsat.gpu.kernels.reduce import SERIAL_MAX, _block_size
from einsat.ir.expr import Index, parse, var
from einsat.ir.expr.compose import row_form
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Guard, Read, all_scopes, reads, scopes


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


def expressions(expr: str) -> list[Expr]:
    """The expressions of an eop's `expr` (one) or an `eop_multi`'s `exprs` (' ; '-separated),
    one per output."""
    return [parse(part) for part in expr.split(";")]


def out_params(exprs, dtype) -> list[Param]:
    """The output parameters: `out`, then `out1`, `out2`, ... for an eop_multi's further outputs."""
    return [Param("out" if k == 0 else f"out{k}", "out", dtype) for k in range(len(exprs))]


@memoize
def eop_kernel(expr: str, inputs: Sequence[Operand], dtype) -> Kernel:
    """The kernel of an eop whose `expr` attribute is `expr` (or of an `eop_multi` whose `exprs`
    it is: one output per expression, all of one shape), over `inputs` (any views); parameters
    in0..in{n-1}, then `out`, `out1`, ... (contiguous). `dtype` is the storage type of the
    outputs (float32, float64, or the half types float16 (`__half`) and bfloat16
    (`__nv_bfloat16`), whose inputs widen to float on load): arithmetic and statistics run in the
    compute and accumulator types (`codegen.ctype`: float for the half types). A fused row
    expression (`row_form`: softmax, layernorm, RMSNorm and what feeds them) gets the row kernel
    (`row_kernel`), any other one a thread per output element."""
    exprs = expressions(expr)
    e, extras = exprs[0], exprs[1:]
    if any(x.shape != e.shape for x in extras):
        raise ExecutionError(f"eop_multi: outputs of shapes {[x.shape for x in exprs]}; one kernel writes one shape")
    ct = ctype(dtype)
    if ct.compute == "bool":
        raise ExecutionError("eop kernels compute numbers, not booleans")
    rows = row_form(e)
    if rows is not None and not any(scopes(x) for x in extras):
        return row_kernel(e, rows, inputs, dtype, extras)
    w = _Writer(inputs, ct)
    pad = "            " if extras else "        "
    blocks = []
    for k, x in enumerate(exprs):  # each output in a block of its own (its iterators, its acc)
        inner = w.reduction(x, "x", indent=pad)
        block = [f"{pad}const idx_t x_{it.name} = p{j} + {it.lo}LL;" for j, it in enumerate(x.loops)]
        block += [inner.rstrip(), f"{pad}{'out' if k == 0 else f'out{k}'}[i] = {ct.save('acc')};"]
        blocks += ["        {", *block, "        }"] if extras else block
    lines = [decompose("i", e.shape, prefix="p")] if e.shape else []
    lines += w.lambdas + blocks  # a scope's lambda names only its own parameters and the inputs
    work = int(np.prod(e.shape))
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + out_params(exprs, dtype)
    span = max([work] + [extent(op.shape, op.strides) for op in inputs])
    return make_kernel("eop", params, grid_stride("\n".join(lines), work), work, span=span)


class _RowWriter(_Writer):
    """A writer whose scope reads are the row's statistics, computed before (C variables), and
    whose reads of a staged input (`staged`: input -> C array) are its row's copy at `slot`."""

    def __init__(self, inputs: Sequence[Operand], ct: CType, values: dict[Expr, str], staged: dict[int, str]):
        super().__init__(inputs, ct)
        self.values = values
        self.staged = staged
        self.slot = "c"

    def read(self, r: Read, names, ranges) -> str:
        if isinstance(r.src, Expr):
            return f"(({self.ct.compute}){self.values[r.src]})"
        if r.src in self.staged:
            return f"(({self.ct.compute}){self.staged[r.src]}[{self.slot}])"
        return super().read(r, names, ranges)


STAGE_BYTES = 24 << 10  # the block kernel's shared-memory row copies at most this much
WARP_STAGE = 64         # the warp kernel's register row copies: at most this many elements a lane


def _row_reads(e: Expr, rows: int, order: list[Expr], extras: Sequence[Expr], inputs: Sequence[Operand]) -> list[int]:
    """The inputs every read of which is at its output position's row and column ("the row"):
    an input of the output's shape, contiguous over the columns, read by the outputs at their
    own iterators and by each scope at its row iterators then its summation iterators (which
    span the columns). Such an input is staged once per row (`row_kernel`)."""
    n_cols = e.shape[rows:]
    good = {k for k, op in enumerate(inputs) if tuple(op.shape) == tuple(e.shape)
            and tuple(op.strides[rows:]) == contiguous_strides(n_cols)}
    bad: set[int] = set()

    def visit(body, names, ok_loops: bool) -> None:
        want = tuple(var(n) for n in names)
        for r in reads(body):
            if isinstance(r.src, int) and (not ok_loops or r.idx != want):
                bad.add(r.src)
    for x in (e, *extras):
        visit(x.body, [it.name for it in x.loops], all(it.lo == 0 for it in x.loops))
    for sc in order:
        ok = (len(sc.sums) == len(n_cols) and all(it.lo == 0 and it.size == d for it, d in zip(sc.sums, n_cols))
              and all(it.lo == 0 for it in sc.loops[:rows]) and len(sc.loops) >= rows)
        visit(sc.body, [it.name for it in sc.loops[:rows]] + [it.name for it in sc.sums], ok)
    return sorted(good - bad)


def _vector_width(n_cols: int, dtype, lanes: int) -> int:
    """Elements per vectorized load: 4 (16 bytes of float) or 2 (of double, or of float where a
    row has fewer than 4 per lane of a warp), where the row length allows; 1 otherwise (the half
    types load an element at a time)."""
    dt = np.dtype(dtype)
    widths = (4, 2) if dt == np.float32 else (2,) if dt == np.float64 else ()
    for v in widths:
        if n_cols % v == 0 and n_cols >= lanes * v:
            return v
    return 1


def row_kernel(e: Expr, rows: int, inputs: Sequence[Operand], out_dtype, extras: Sequence[Expr] = ()) -> Kernel:
    """A fused row expression (`ir.expr.compose.row_form`): its leading `rows` dims are rows,
    each scope a reduction over the rest that is computed once per row, in dependency order
    (a layernorm's mean before its variance), then the row's outputs (`extras`: an eop_multi's
    further outputs, element-wise over the same grid, written in the same pass). Statistics
    accumulate in the accumulator type (float for fp32 and the half types, double for fp64).
    Rows longer than `SERIAL_MAX` (the longest scope or output row) get a block each, shorter
    ones a warp each: the threads stride over the row (consecutive lanes, consecutive elements:
    coalesced loads) and combine with the prelude's warp-shuffle warp or block reductions. (A
    thread per row, as `reduce.softmax_kernel` runs rows of 64, measured 41 µs for bert_tensat's
    [16, 64, 64] softmax on an H100: its loads stride by a row.)

    An input read at the row itself (`_row_reads`: a layernorm's x and residual, a softmax's
    scores) is loaded from memory once per row, not once per pass: a block stages the row in
    shared memory (up to `STAGE_BYTES`), a warp in registers (an unrolled loop over its lane's
    elements); the loads are vectorized (`_vector_width`: 16-byte float4-sized loads of fp32 when
    the row's length and the input's address allow, checked at run time, element loads
    otherwise). On the serial host emulation a warp is one lane (`EINSAT_WARP`)."""
    ct = ctype(out_dtype)
    t = ct.acc
    order = [s for s in all_scopes(e) if s is not e]  # children before parents
    values = {s: f"st{k}" for k, s in enumerate(order)}
    row_shape, col_shape = e.shape[:rows], e.shape[rows:]
    n_rows, n_cols = int(np.prod(row_shape)), int(np.prod(col_shape))
    parallel = max([n_cols] + [s.sum_points() for s in order]) > SERIAL_MAX
    lo, step, row = ("threadIdx.x", "blockDim.x", "row") if parallel else ("lane", "EINSAT_WARP", "row")
    staged_in = _row_reads(e, rows, order, extras, inputs) if order else []
    item = 8 if t in ("double", "long long") else 4
    if parallel and len(staged_in) * n_cols * item > STAGE_BYTES:
        staged_in = []
    vec = _vector_width(n_cols, inputs[staged_in[0]].dtype, 1 if parallel else 32) if staged_in else 1
    if not parallel and n_cols > WARP_STAGE * vec:
        staged_in = []
    staged = {k: f"rb{k}" for k in staged_in}
    w = _RowWriter(inputs, ct, values, staged)
    lines = [] if parallel else ["        const idx_t row = i / EINSAT_WARP, lane = i % EINSAT_WARP;"]
    lines += [decompose(row, row_shape, prefix="p")] if row_shape else []
    row_vars = [f"x_{it.name}" for it in e.loops[:rows]]
    lines += [f"        const idx_t {v} = p{k} + {it.lo}LL;" for k, (v, it) in enumerate(zip(row_vars, e.loops))]

    def loop(points: int, body: list[str], cached: bool) -> list[str]:
        """A loop of the threads over `points` of the row, `c` the point; over a warp's register
        copy (`cached`), `slot` its element of the lane's copy."""
        if not (cached and staged and not parallel):
            w.slot = "c"
            return [f"        for (idx_t c = {lo}; c < {points}LL; c += {step}) {{", *body, "        }"]
        w.slot = "slot"
        return ["#pragma unroll", "        for (int j = 0; j < EINSAT_PER; ++j) {", "#pragma unroll",
                f"        for (int vl = 0; vl < {vec}; ++vl) {{",
                f"            const idx_t c = (lane + (idx_t)j * EINSAT_WARP) * {vec}LL + vl;",
                f"            const int slot = j * {vec} + vl;",
                f"            if (c < {points}LL) {{", *body, "            }", "        }", "        }"]

    if staged:
        lines += _stage(staged, inputs, rows, row_vars, n_cols, vec, parallel, ct)
    for k, s in enumerate(order):
        names = {it.name: (row_vars[j] if j < rows else f"{it.lo}LL") for j, it in enumerate(s.loops)}
        names.update({it.name: f"s{k}_{j}" for j, it in enumerate(s.sums)})
        scope = "block" if parallel else "warp"
        if s.reduce == "max":
            init, update, combine = ct.lowest(), f"st{k} = (v > st{k} || v != v) ? v : st{k};", f"einsat_{scope}_max"
        else:
            init, update, combine = ct.literal(0), f"st{k} += v;", f"einsat_{scope}_sum"
        lines.append(f"        {t} st{k} = {init};")
        cached = s.sum_points() == n_cols
        body = [decompose("c", [it.size for it in s.sums], prefix=f"q{k}_", indent="            ")]
        body += [f"            const idx_t s{k}_{j} = q{k}_{j} + {it.lo}LL;" for j, it in enumerate(s.sums)]
        w.slot = "slot" if cached and staged and not parallel else "c"
        body.append(f"            const {t} v = ({t})({w.body(s.body, names, s.ranges())});")
        body.append(f"            {update}")
        lines += loop(s.sum_points(), body, cached)
        lines.append(f"        st{k} = {combine}(st{k}, smem);" if parallel else f"        st{k} = {combine}(st{k});")
    names = {it.name: f"x_{it.name}" for it in e.loops}
    body = [decompose("c", col_shape, prefix="pc", indent="            ")] if col_shape else []
    body += [f"            const idx_t x_{it.name} = pc{k} + {it.lo}LL;" for k, it in enumerate(e.loops[rows:])]
    w.slot = "slot" if staged and not parallel else "c"
    for k, x in enumerate((e, *extras)):
        xnames = {it.name: f"x_{it.name}" for it in x.loops} if k else names
        if k and any(a.lo != b.lo for a, b in zip(x.loops, e.loops)):
            body.append("            {")
            body += [f"            const idx_t x_{a.name} = x_{b.name} - {b.lo}LL + {a.lo}LL;"
                     for a, b in zip(x.loops, e.loops)]
        value = w.body(x.body, xnames, x.ranges())
        target = "out" if k == 0 else f"out{k}"
        body.append(f"            {target}[{row} * {n_cols}LL + c] = {ct.save(f'({t})({value})')};")
        if k and any(a.lo != b.lo for a, b in zip(x.loops, e.loops)):
            body.append("            }")
    lines += loop(n_cols, body, True)
    if staged and parallel:
        lines.append("        __syncthreads();  // the row's copy is read to the end before the next row's")
    body = "\n".join(lines)
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + out_params((e, *extras), out_dtype)
    span = max([n_rows * max(n_cols, 32)] + [extent(op.shape, op.strides) for op in inputs])
    if not parallel:  # a warp per row: work items are (row, lane) pairs
        if staged:
            per = f"(({n_cols} + EINSAT_WARP * {vec} - 1) / (EINSAT_WARP * {vec}))"
            body = f"    constexpr int EINSAT_PER = {per};\n" + body
        return make_kernel("eop_rows", params, grid_stride(body, f"{n_rows}LL * EINSAT_WARP"), n_rows * 32,
                           span=span)
    block = _block_size(max([n_cols] + [s.sum_points() for s in order]))
    shared = "".join(f"    __shared__ {t} rb{k}[{n_cols}];\n" for k in staged)
    body = f"    __shared__ {t} smem[32];\n" + shared + block_rows(body, n_rows)
    return make_kernel("eop_rows", params, body, n_rows, block=block, per_block=1, span=span)


def _stage(staged: dict[int, str], inputs: Sequence[Operand], rows: int, row_vars: list[str], n_cols: int,
           vec: int, parallel: bool, ct: CType) -> list[str]:
    """Statements loading each staged input's row once: into shared memory (a block; then a
    barrier, the threads' loads and later reads differ) or the lane's registers (a warp: the
    loads and the passes share the lane's elements). `vec`-wide loads where the row's address
    is aligned to them, element loads otherwise."""
    t = ct.acc
    lines = []
    if not parallel:
        lines += [f"        {t} {name}[EINSAT_PER * {vec}];" for name in staged.values()]
    for k, name in staged.items():
        op = inputs[k]
        store = ctype(op.dtype).store
        base = " + ".join(f"{v} * {s}LL" for v, s in zip(row_vars, op.strides[:rows]) if s) or "0"
        src = f"src{k}"
        lines.append(f"        const {store}* {src} = in{k} + ({base});")
        load = ctype(op.dtype).load
        if vec > 1:
            lines.append(f"        struct alignas({vec * op.dtype.itemsize}) v{k}_t {{ {store} e[{vec}]; }};")
            aligned = f"((((unsigned long long)(const void*){src}) % {vec * op.dtype.itemsize}ULL) == 0ULL)"
        if parallel:
            if vec > 1:
                lines += [f"        if ({aligned}) {{",
                          f"            for (idx_t q = threadIdx.x; q < {n_cols // vec}LL; q += blockDim.x) {{",
                          f"                const v{k}_t u = reinterpret_cast<const v{k}_t*>({src})[q];",
                          *[f"                {name}[q * {vec}LL + {j}] = ({t}){load(f'u.e[{j}]')};"
                            for j in range(vec)],
                          "            }", "        } else {"]
            lines += [f"        for (idx_t c = threadIdx.x; c < {n_cols}LL; c += blockDim.x) "
                      f"{name}[c] = ({t}){load(f'{src}[c]')};"]
            if vec > 1:
                lines.append("        }")
            continue
        body = ["#pragma unroll", "        for (int j = 0; j < EINSAT_PER; ++j) {",
                "            const idx_t q = lane + (idx_t)j * EINSAT_WARP;"]
        if vec > 1:
            body += [f"            if (q * {vec}LL < {n_cols}LL) {{",
                     f"                if ({aligned}) {{",
                     f"                    const v{k}_t u = reinterpret_cast<const v{k}_t*>({src})[q];",
                     *[f"                    {name}[j * {vec} + {m}] = ({t}){load(f'u.e[{m}]')};" for m in range(vec)],
                     "                } else {",
                     *[f"                    {name}[j * {vec} + {m}] = ({t}){load(f'{src}[q * {vec}LL + {m}]')};"
                       for m in range(vec)],
                     "                }", "            }"]
        else:
            body += [f"            if (q < {n_cols}LL) {name}[j] = ({t}){load(f'{src}[q]')};"]
        lines += body + ["        }"]
    if parallel:
        lines.append("        __syncthreads();")
    return lines
