"""PET's compound "reshape & transpose" (§4.2): a factor of one dimension moved into another.

A `Move` splits dimension `src` into two digits, takes the factor `f` (its inner digit, or its
outer one) and puts it into dimension `dst` (as its outer digit, or its inner one). A layout is
a tuple of moves, realised as one reshape (every split), one transpose (every digit in its new
place) and one reshape (every merge):

    Figure 1 (pairs of images side by side): Move(src=0, f=2, inner=True, dst=3, outer=True)
             [N, C, H, W] -> [N/2, 2, C, H, W] -> [N/2, C, H, 2, W] -> [N/2, C, H, 2W]
    Figure 3 (rows and columns by parity):   Move(2, 2, True, 2, True), Move(3, 2, True, 3, True)
    §8.3.1 (tiles into the batch):           Move(2, 4, False, 0, False), Move(3, 4, False, 0, False)

`realise(shape, moves)` gives the three steps; `apply` and `undo` build them (on a
`GraphBuilder`) to take a value into the layout and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from einsat.ir.builder import Tensor


@dataclass(frozen=True, order=True)
class Move:
    src: int
    factor: int
    inner: bool  # the factor is src's inner digit (rows 2i, 2i+1 together) or its outer one (tiles)
    dst: int
    outer: bool  # it becomes dst's outer digit (side by side) or its inner one (interleaved)


@dataclass(frozen=True)
class Realised:
    """x -> reshape(split) -> transpose(perm) -> reshape(shape)."""

    source: tuple[int, ...]
    split: tuple[int, ...]
    perm: tuple[int, ...]
    shape: tuple[int, ...]


def realise(shape: tuple[int, ...], moves: tuple[Move, ...]) -> Realised | None:
    """The three steps of `moves` on `shape`, or None when a factor does not divide its dimension
    (pad it first: `padding`) or a dimension is split twice."""
    parts = [[n] for n in shape]             # each dimension's digits, in split order
    final = [[(d, 0)] for d in range(len(shape))]  # each new dimension's digits, as (dim, index)
    for m in moves:
        n = shape[m.src]
        if len(parts[m.src]) != 1 or m.factor < 2 or n % m.factor:
            return None
        parts[m.src] = [n // m.factor, m.factor] if m.inner else [m.factor, n // m.factor]
        factor, rest = ((m.src, 1), (m.src, 0)) if m.inner else ((m.src, 0), (m.src, 1))
        final[m.src] = [rest if digit == (m.src, 0) else digit for digit in final[m.src]]
        final[m.dst].insert(0 if m.outer else len(final[m.dst]), factor)
    offset = np.cumsum([0] + [len(p) for p in parts])
    perm = tuple(int(offset[d] + k) for dim in final for d, k in dim)
    split = tuple(n for p in parts for n in p)
    new = tuple(prod(parts[d][k] for d, k in dim) for dim in final)
    return Realised(tuple(shape), split, perm, new)


def apply(r: Realised, x: Tensor) -> Tensor:
    """`x` (of shape `r.source`) in the layout."""
    b = x.builder
    return b.reshape(b.transpose(b.reshape(x, shape=r.split), perm=r.perm), shape=r.shape)


def undo(r: Realised, y: Tensor) -> Tensor:
    """`y` (of shape `r.shape`) back in the source layout."""
    b = y.builder
    moved = tuple(r.split[p] for p in r.perm)
    inverse = tuple(int(i) for i in np.argsort(r.perm))
    return b.reshape(b.transpose(b.reshape(y, shape=moved), perm=inverse), shape=r.source)


def padding(shape: tuple[int, ...], moves: tuple[Move, ...]) -> tuple[int, ...]:
    """Zeros to add at the end of each dimension so that its factor divides it."""
    pad = [0] * len(shape)
    for m in moves:
        pad[m.src] = -shape[m.src] % m.factor
    return tuple(pad)


def moves_for(shape: tuple[int, ...], dilation: tuple[int, ...]) -> list[tuple[Move, ...]]:
    """The layouts the grammar tries on an [N, C, spatial...] value, in a fixed order: the batch
    into one spatial dimension (pairs, triples, quadruples side by side), spatial tiles into the
    batch (one dimension, then all; a dimension at least twice the tile count, padded to a
    multiple of it), and the parity reordering of the dilated dimensions."""
    spatial = list(range(2, len(shape)))
    out: list[tuple[Move, ...]] = []
    for f in (2, 3, 4):
        if shape[0] % f == 0:
            out += [(Move(0, f, True, d, True),) for d in spatial]
    for f in (2, 4):
        tiles = [Move(d, f, False, 0, False) for d in spatial if shape[d] >= 2 * f]
        out += [(m,) for m in tiles] + ([tuple(tiles)] if len(tiles) > 1 else [])
    dilated = tuple(Move(d, dilation[d - 2], True, d, True) for d in spatial if dilation[d - 2] > 1)
    if dilated:
        out.append(dilated)
    return out
