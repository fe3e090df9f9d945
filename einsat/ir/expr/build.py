"""Small builders for the expressions of registry ops (`OpDef.expression`).

    loops = iters("o", out_shape)                       # o0, o1, ... over [0, dim)
    Expr(loops, (), Call("relu", (broadcast_read(0, x.shape, loops),)))

Iterator names are only local labels: the canonical printer renames them.
"""

from __future__ import annotations

from typing import Sequence

from einsat.ir.expr.index import Index, as_index, var
from einsat.ir.expr.nodes import Body, Call, Const, Expr, Iter, Read


def iters(prefix: str, sizes: Sequence[int], lows: Sequence[int] | None = None) -> tuple[Iter, ...]:
    lows = lows or (0,) * len(sizes)
    return tuple(Iter(f"{prefix}{k}", lo, lo + d) for k, (lo, d) in enumerate(zip(lows, sizes)))


def read(src, *idx) -> Read:
    return Read(src, tuple(as_index(i) for i in idx))


def broadcast_read(src, shape: Sequence[int], loops: Sequence[Iter]) -> Read:
    """Read a tensor of `shape` broadcast (NumPy rules) against the loops' dims."""
    pad = len(loops) - len(shape)
    idx = [Index() if d == 1 and loops[pad + k].size != 1 else var(loops[pad + k].name)
           for k, d in enumerate(shape)]
    return Read(src, tuple(idx))


def scope_read(scope: Expr, loops: Sequence[Iter]) -> Read:
    """Read a scope at the given loops (one per scope dim, same ranges)."""
    return Read(scope, tuple(var(it.name) for it in loops))


def flat_index(loops: Sequence[Iter]) -> Index:
    """The row-major flat position of the loops' point (each loop from its own low)."""
    out = Index()
    for it in loops:
        out = out * it.size + (var(it.name) - it.lo)
    return out


def reshape_read(src, shape: Sequence[int], loops: Sequence[Iter]) -> Read:
    """Read a tensor of `shape` as if reshaped (row-major) to the loops' dims."""
    flat = flat_index(loops)
    idx, stride = [], 1
    strides = []
    for d in reversed(shape):
        strides.append(stride)
        stride *= max(d, 1)
    strides.reverse()
    for k, (d, s) in enumerate(zip(shape, strides)):
        part = flat.floordiv(s)
        idx.append(part if k == 0 else part.mod(d))
    return Read(src, tuple(idx))


def elementwise(fn: str, shapes: Sequence[Sequence[int]], out_shape: Sequence[int]) -> Expr:
    """L_out fn(input0[...], input1[...]) with broadcasting."""
    loops = iters("o", out_shape)
    args: tuple[Body, ...] = tuple(broadcast_read(k, s, loops) for k, s in enumerate(shapes))
    return Expr(loops, (), Call(fn, args))


def window(out: Iter, tap: Iter, stride: int, dilation: int, pad_begin: int) -> Index:
    """The input position of output `out` and kernel tap `tap` in a sliding window."""
    return var(out.name) * stride + var(tap.name) * dilation - pad_begin


def epilogue(core: Expr, loops: Sequence[Iter], extra: Body, fn: str = "add") -> Expr:
    """L_loops fn({core}[loops], extra): a bias or a residual added to a scope."""
    return Expr(tuple(loops), (), Call(fn, (scope_read(core, loops), extra)))


def _split(loops: Sequence[Iter], axes: Sequence[int]) -> tuple[tuple[Iter, ...], tuple[Iter, ...]]:
    """(kept, reduced): the loops off `axes` and those on them."""
    kept = tuple(it for k, it in enumerate(loops) if k not in axes)
    return kept, tuple(loops[a] for a in axes)


def row_scope(src, shape: Sequence[int], axes: Sequence[int], body_of, reduce: str = "sum") -> Expr:
    """L_kept R_axes body_of(read): a reduction of input `src` of `shape` over `axes` (its loops
    the kept dims in order); `body_of(read, kept_names)` builds the summand from the read of the
    input at the reduced point."""
    kept = iters("k", [d for k, d in enumerate(shape) if k not in axes])
    sums = iters("r", [shape[a] for a in axes])
    names, it_k, it_s = [], iter(kept), iter(sums)
    for k in range(len(shape)):
        names.append(next(it_s).name if k in axes else next(it_k).name)
    x = Read(src, tuple(var(n) for n in names))
    return Expr(kept, sums, body_of(x, kept), reduce)


def softmax(shape: Sequence[int], axis: int) -> Expr:
    """softmax along `axis`: exp(x - max) / Σ exp(x - max), the max and the sum as scopes over
    the other dims (the registry's order of rounding)."""
    def centred(x: Read, kept) -> Body:
        return Call("exp", (Call("sub", (x, Read(peak, tuple(var(it.name) for it in kept)))),))

    peak = row_scope(0, shape, (axis,), lambda x, kept: x, reduce="max")
    total = row_scope(0, shape, (axis,), centred)
    loops = iters("o", shape)
    kept, _ = _split(loops, (axis,))
    x = Read(0, tuple(var(it.name) for it in loops))
    at = tuple(var(it.name) for it in kept)
    num = Call("exp", (Call("sub", (x, Read(peak, at))),))
    return Expr(loops, (), Call("div", (num, Read(total, at))))


def layernorm(shape: Sequence[int], axis: int, epsilon: float, scale: Sequence[int],
              bias: Sequence[int] | None) -> Expr:
    """(x - mean) / sqrt(var + eps) * scale (+ bias) over the dims from `axis` on: the mean and
    the (biased) variance as sums over the leading dims, each divided by the count where it is
    read, as NumPy's `mean` rounds (a sum of x · (1/n) is not x's mean to the last bit: over a
    constant row it leaves x - mean a few ulps off 0, which 1/sqrt(eps) then amplifies)."""
    axes = tuple(range(axis, len(shape)))
    count = 1
    for a in axes:
        count *= shape[a]
    n = Const(float(max(count, 1)))
    total = row_scope(0, shape, axes, lambda x, kept: x)

    def mean_at(at: tuple) -> Body:
        return Call("div", (Read(total, at), n))

    def square(x: Read, kept) -> Body:
        d = Call("sub", (x, mean_at(tuple(var(it.name) for it in kept))))
        return Call("mul", (d, d))

    squares = row_scope(0, shape, axes, square)
    loops = iters("o", shape)
    lead, trail = loops[:axis], loops[axis:]
    at = tuple(var(it.name) for it in lead)
    x = Read(0, tuple(var(it.name) for it in loops))
    d = Call("sub", (x, mean_at(at)))
    variance = Call("div", (Read(squares, at), n))
    y = Call("mul", (Call("div", (d, Call("sqrt", (Call("add", (variance, Const(float(epsilon)))),)))),
                     broadcast_read(1, scale, trail)))
    if bias is not None:
        y = Call("add", (y, broadcast_read(2, bias, trail)))
    return Expr(loops, (), y)


def rmsnorm(shape: Sequence[int], axis: int, epsilon: float, scale: Sequence[int]) -> Expr:
    """x / sqrt(mean(x²) + eps) * scale over the dims from `axis` on: the sum of squares as a
    scope over the leading dims, divided by the count where it is read (NumPy's `mean`)."""
    axes = tuple(range(axis, len(shape)))
    count = 1
    for a in axes:
        count *= shape[a]
    n = Const(float(max(count, 1)))
    squares = row_scope(0, shape, axes, lambda x, kept: Call("mul", (x, x)))
    loops = iters("o", shape)
    lead, trail = loops[:axis], loops[axis:]
    at = tuple(var(it.name) for it in lead)
    x = Read(0, tuple(var(it.name) for it in loops))
    ms = Call("div", (Read(squares, at), n))
    y = Call("div", (x, Call("sqrt", (Call("add", (ms, Const(float(epsilon)))),))))
    return Expr(loops, (), Call("mul", (y, broadcast_read(1, scale, trail))))
