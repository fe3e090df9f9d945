"""Element-wise kernels: one op, or a fused chain of them, over broadcast strided inputs.

A chain is a list of `Step`s over the kernel's inputs: step k's arguments name inputs
(0..n_inputs-1) or earlier steps (n_inputs + j). The kernel computes, for every output
element, each step's value in registers and stores the last one: one read of every input and
one write, whatever the chain's length. Inputs may be any strided view (transposed, sliced,
broadcast with zero strides): their strides are baked into the index arithmetic.

The C expression of each op lives in `EXPRESSIONS`, keyed by the op's name; its semantics
must equal the registry's NumPy reference (NaN-propagating `relu`, the overflow-free
two-branch `sigmoid`, C's truncating integer division like ONNX).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import (
    CType,
    Kernel,
    Param,
    broadcast_strides,
    coalesce,
    contiguous_strides,
    ctype,
    decompose,
    dot,
    extent,
    grid_stride,
    make_kernel,
    memoize,
    numel,
)
from einsat.ir import groups


@dataclass(frozen=True)
class Operand:
    """A kernel input: dtype, shape and strides in elements (any view)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @staticmethod
    def of(array) -> "Operand":
        item = array.dtype.itemsize
        return Operand(np.dtype(array.dtype), tuple(array.shape), tuple(s // item for s in array.strides))

    @staticmethod
    def contiguous(shape, dtype) -> "Operand":
        return Operand(np.dtype(dtype), tuple(shape), contiguous_strides(shape))


@dataclass(frozen=True)
class Step:
    """One op of a chain: its name (`Op.value`), attributes, argument refs and result dtype."""

    op: str
    args: tuple[int, ...]
    dtype: np.dtype
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, name, default=None):
        return dict(self.attrs).get(name, default)


Expr = Callable[[list[str], Step, CType, list[CType]], str]
EXPRESSIONS: dict[str, Expr] = {}


def expression(*names: str):
    def deco(fn: Expr) -> Expr:
        for n in names:
            EXPRESSIONS[n] = fn
        return fn
    return deco


@expression("identity", "cast")
def _identity(a, s, t, ins):
    return f"(({t.compute})({a[0]}))"


@expression("add")
def _add(a, s, t, ins):
    return f"({a[0]} + {a[1]})"


@expression("sub")
def _sub(a, s, t, ins):
    return f"({a[0]} - {a[1]})"


@expression("mul")
def _mul(a, s, t, ins):
    return f"({a[0]} * {a[1]})"


@expression("div")
def _div(a, s, t, ins):
    return f"({a[0]} / {a[1]})"  # C truncates integer division, as ONNX and the registry do


@expression("relu")
def _relu(a, s, t, ins):
    return f"(({a[0]} < {t.literal(0)}) ? {t.literal(0)} : {a[0]})"  # NaN passes through


@expression("leaky_relu")
def _leaky(a, s, t, ins):
    return f"(({a[0]} >= {t.literal(0)}) ? {a[0]} : {a[0]} * {t.literal(s.attr('alpha', 0.01))})"


@expression("sigmoid")
def _sigmoid(a, s, t, ins):
    x, one = a[0], t.literal(1)
    e = f"{t.fn('exp')}(-{t.fn('fabs')}({x}))"
    return f"(({x} >= {t.literal(0)}) ? {one} / ({one} + {e}) : {e} / ({one} + {e}))"


@expression("tanh")
def _tanh(a, s, t, ins):
    return f"{t.fn('tanh')}({a[0]})"


@expression("erf")
def _erf(a, s, t, ins):
    return f"{t.fn('erf')}({a[0]})"


@expression("exp")
def _exp(a, s, t, ins):
    return f"{t.fn('exp')}({a[0]})"


@expression("log")
def _log(a, s, t, ins):
    return f"{t.fn('log')}({a[0]})"


@expression("sqrt")
def _sqrt(a, s, t, ins):
    return f"{t.fn('sqrt')}({a[0]})"


@expression("sin")
def _sin(a, s, t, ins):
    return f"{t.fn('sin')}({a[0]})"


@expression("cos")
def _cos(a, s, t, ins):
    return f"{t.fn('cos')}({a[0]})"


@expression("floor")
def _floor(a, s, t, ins):
    return f"{t.fn('floor')}({a[0]})" if t.is_float else a[0]


@expression("isnan")
def _isnan(a, s, t, ins):
    return f"({a[0]} != {a[0]})"


@expression("clip")
def _clip(a, s, t, ins):
    """min(max(x, low), high) in that order: NaN passes through, low > high gives high."""
    x, low, high = a[0], s.attr("low", -np.inf), s.attr("high", np.inf)
    if np.isfinite(low):
        x = f"(({x} < {t.literal(low)}) ? {t.literal(low)} : {x})"
    if np.isfinite(high):
        x = f"(({x} > {t.literal(high)}) ? {t.literal(high)} : {x})"
    return f"({x})"


@expression("neg")
def _neg(a, s, t, ins):
    return f"(-{a[0]})"


@expression("abs")
def _abs(a, s, t, ins):
    return f"{t.fn('fabs')}({a[0]})" if t.is_float else f"(({a[0]}) < 0 ? -({a[0]}) : ({a[0]}))"


@expression("reciprocal")
def _recip(a, s, t, ins):
    return f"({t.literal(1)} / {a[0]})"


@expression("pow")
def _pow(a, s, t, ins):
    if t.is_float:
        return f"{t.fn('pow')}({a[0]}, {a[1]})"
    return f"einsat_ipow(({t.acc}){a[0]}, ({t.acc}){a[1]})"  # exact integer powers, as NumPy


def _fold(a: list[str], pick: str) -> str:
    """Variadic max/min, NaN-propagating like NumPy: the running value loses to a NaN."""
    acc = a[0]
    for v in a[1:]:
        acc = f"(({v} {pick} {acc} || {v} != {v}) ? {v} : {acc})"
    return acc


@expression("maximum")
def _max(a, s, t, ins):
    return _fold(a, ">")


@expression("minimum")
def _min(a, s, t, ins):
    return _fold(a, "<")


@expression("gelu")
def _gelu(a, s, t, ins):
    x, half, one = a[0], t.literal(0.5), t.literal(1)
    if s.attr("approximate", "none") == "tanh":
        inner = f"{t.literal(np.sqrt(2 / np.pi))} * ({x} + {t.literal(0.044715)} * {x} * {x} * {x})"
        return f"({half} * {x} * ({one} + {t.fn('tanh')}({inner})))"
    return f"({half} * {x} * ({one} + {t.fn('erf')}({x} / {t.literal(np.sqrt(2))})))"


@expression("where")
def _where(a, s, t, ins):
    return f"(({a[0]}) ? {a[1]} : {a[2]})"


# the registry's comparisons (bool results; their operands' type writes the literals, below)
COMPARISONS = frozenset(op.value for op in groups.COMPARISONS)


def _comparison(op: str, c_operator: str) -> None:
    expression(op)(lambda a, s, t, ins: f"({a[0]} {c_operator} {a[1]})")


_comparison("equal", "==")
_comparison("less", "<")
_comparison("greater", ">")
_comparison("less_equal", "<=")
_comparison("greater_equal", ">=")


@expression("logical_not")
def _not(a, s, t, ins):
    return f"(!{a[0]})"


@expression("logical_and")
def _and(a, s, t, ins):
    return f"({a[0]} && {a[1]})"


@expression("logical_or")
def _or(a, s, t, ins):
    return f"({a[0]} || {a[1]})"


@expression("logical_xor")
def _xor(a, s, t, ins):
    return f"(((bool){a[0]}) != ((bool){a[1]}))"


@expression("batchnorm")
def _batchnorm(a, s, t, ins):
    x, scale, bias, mean, var = a  # the registry's order of rounding: (x - m) * (s / sqrt(v + eps)) + b
    eps = t.literal(s.attr("epsilon", 1e-5))
    return f"(({x} - {mean}) * ({scale} / {t.fn('sqrt')}({var} + {eps})) + {bias})"


@memoize
def elementwise_kernel(out_shape: Sequence[int], inputs: Sequence[Operand], steps: Sequence[Step],
                       out_strides: Sequence[int] | None = None) -> Kernel:
    """A kernel computing `steps` over `inputs` broadcast to `out_shape`; the last step is stored.

    Parameters: in0..in{n-1} (the inputs), then `out` (contiguous unless `out_strides`).
    """
    out_shape = tuple(out_shape)
    n_in = len(inputs)
    if not steps:
        raise ExecutionError("an element-wise kernel needs at least one step")
    for k, s in enumerate(steps):
        if s.op not in EXPRESSIONS:
            raise ExecutionError(f"no element-wise expression for op {s.op!r}")
        if any(r >= n_in + k for r in s.args):
            raise ExecutionError(f"step {k} ({s.op!r}) reads itself or a later step")
    out_dtype = np.dtype(steps[-1].dtype)
    ostr = tuple(out_strides) if out_strides is not None else contiguous_strides(out_shape)
    in_strides = [broadcast_strides(op.shape, op.strides, out_shape) for op in inputs]
    shape, strides = coalesce(out_shape, in_strides + [ostr])
    work = numel(out_shape)
    coords = [f"c{k}" for k in range(len(shape))]
    lines = [decompose("i", shape)] if shape else []
    contig = contiguous_strides(shape)
    vals, cts = [], []
    for k, op in enumerate(inputs):
        ct = ctype(op.dtype)
        off = "i" if tuple(strides[k]) == contig else dot(coords, strides[k])
        lines.append(f"        const {ct.compute} v{k} = {ct.load(f'in{k}[{off}]')};")
        vals.append(f"v{k}")
        cts.append(ct)
    for j, s in enumerate(steps):
        ct = ctype(s.dtype)
        arg_cts = [cts[r] for r in s.args]
        t = arg_cts[0] if s.op in COMPARISONS else ct  # the type literals are written in
        expr = EXPRESSIONS[s.op]([vals[r] for r in s.args], s, t, arg_cts)
        lines.append(f"        const {ct.compute} t{j} = ({ct.compute})({expr});")
        vals.append(f"t{j}")
        cts.append(ct)
    oct_ = ctype(out_dtype)
    out_off = "i" if tuple(strides[-1]) == contig else dot(coords, strides[-1])
    lines.append(f"        out[{out_off}] = {oct_.save(vals[-1])};")
    params = [Param(f"in{k}", "in", op.dtype) for k, op in enumerate(inputs)] + [Param("out", "out", out_dtype)]
    body = grid_stride("\n".join(lines), work)
    span = max([work, extent(out_shape, ostr)] + [extent(op.shape, op.strides) for op in inputs])
    return make_kernel("ew", params, body, work, span=span)


@memoize
def copy_kernel(src: Operand, out_strides: Sequence[int] | None = None) -> Kernel:
    """Materialize any view `src` as a contiguous array (or into `out_strides`)."""
    return elementwise_kernel(src.shape, [src], [Step("identity", (0,), src.dtype)], out_strides)
