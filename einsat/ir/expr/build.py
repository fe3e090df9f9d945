"""Small builders for the expressions of registry ops (`OpDef.expression`).

    loops = iters("o", out_shape)                       # o0, o1, ... over [0, dim)
    Expr(loops, (), Call("relu", (broadcast_read(0, x.shape, loops),)))

Iterator names are only local labels: the canonical printer renames them.
"""

from __future__ import annotations

from typing import Sequence

from einsat.ir.expr.index import Index, as_index, var
from einsat.ir.expr.nodes import Body, Call, Expr, Iter, Read


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
