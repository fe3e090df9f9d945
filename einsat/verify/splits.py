"""Split points: a tensor's boxes as the cells of a grid, given by interior split points per
dimension, and the arithmetic on them that box propagation (`boxes.py`) and its rules use.

`Splits` holds, per dimension, the sorted interior points 0 < s < dim where a new box starts.
`none`/`every` are one box / one box per position, `uniform_splits` splits a constant where
consecutive slices differ, `axis_splits` where a position map stops moving affinely,
`reshape_splits` / `broadcast_splits` carry splits through reshapes and broadcasting, `cells`
lists a grid's boxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from math import prod

import numpy as np

Splits = tuple[tuple[int, ...], ...]


def norm(sets, shape) -> Splits:
    """Sorted interior split points (0 < s < dim) per dimension."""
    return tuple(tuple(sorted(int(s) for s in set(ss) if 0 < s < d)) for ss, d in zip(sets, shape))


def none(shape) -> Splits:
    return tuple(() for _ in shape)


def every(shape) -> Splits:
    return tuple(tuple(range(1, d)) for d in shape)


def uniform_splits(array) -> Splits:
    """Split points of a constant tensor: between consecutive slices that differ anywhere."""
    a = np.asarray(array)
    out = []
    for d in range(a.ndim):
        if a.shape[d] < 2 or a.size == 0:
            out.append(())
            continue
        diff = np.diff(a, axis=d) != 0
        other = tuple(k for k in range(a.ndim) if k != d)
        out.append(tuple(int(i) + 1 for i in np.nonzero(diff.any(axis=other) if other else diff)[0]))
    return tuple(out)


def box_ids(idx: np.ndarray, splits: Sequence[int], size: int, lo: int | None = None,
            hi: int | None = None) -> np.ndarray:
    """The input box each coordinate reads; -1 in the padding [lo, 0) ∪ [size, hi), -2 beyond."""
    ids = np.searchsorted(np.asarray(splits, dtype=np.int64), idx, side="right")
    lo = 0 if lo is None else lo
    hi = size if hi is None else hi
    ids = np.where((idx < 0) | (idx >= size), -1, ids)
    return np.where((idx < lo) | (idx >= hi), -2, ids)


def axis_splits(idx: np.ndarray, ids: np.ndarray) -> set[int]:
    """Split points of a 1-d map o -> idx[o] (box ids `ids`): each run reads one box, affinely.

    `idx` and `ids` are (L,) or (L, taps): a split for any tap splits the output."""
    idx = idx.reshape(len(idx), -1)
    ids = ids.reshape(len(ids), -1)
    out: set[int] = set()
    for t in range(idx.shape[1]):
        x, b = idx[:, t], ids[:, t]
        start = 0
        for o in range(1, len(x)):
            bad = b[o] != b[o - 1]
            if not bad and b[o] >= 0 and o - start >= 2:
                bad = x[o] - x[o - 1] != x[o - 1] - x[o - 2]
            if bad:
                out.add(o)
                start = o
    return out


def _digits(s: int, sizes: Sequence[int], out: list[set], base: int) -> None:
    """Split points of the dims `sizes` (row-major) that separate flat indices < s from >= s."""
    if len(sizes) == 1:
        out[base].add(s)
        return
    inner = prod(sizes[1:])
    q, r = divmod(s, inner)
    out[base].add(q)
    if r:
        out[base].add(q + 1)
        _digits(r, sizes[1:], out, base + 1)


def reshape_groups(xs, ys) -> list[tuple[list[int], list[int]]]:
    """The finest pairing of consecutive input dims with consecutive output dims of equal size
    (size-1 dims left out: they have no splits)."""
    xi = [k for k, d in enumerate(xs) if d != 1]
    yi = [k for k, d in enumerate(ys) if d != 1]
    cin = np.cumprod([1] + [xs[k] for k in xi])
    cout = np.cumprod([1] + [ys[k] for k in yi])
    common = sorted(set(cin.tolist()) & set(cout.tolist()))
    groups = []
    for c0, c1 in pairwise(common):
        gi = [xi[k] for k in range(len(xi)) if c0 <= cin[k] and cin[k + 1] <= c1]
        gj = [yi[k] for k in range(len(yi)) if c0 <= cout[k] and cout[k + 1] <= c1]
        groups.append((gi, gj))
    return groups


def reshape_splits(xs, ys, splits: Splits) -> Splits:
    """Merge each group's input dims (splits at every block of the innermost one), then split the
    merged dim into the group's output dims (`_digits`)."""
    out: list[set] = [set() for _ in ys]
    if 0 in xs:
        return none(ys)
    for gi, gj in reshape_groups(xs, ys):
        size, last = prod(xs[d] for d in gi), gi[-1]
        if len(gi) == 1:
            merged = set(splits[last])
        else:
            merged = {q * xs[last] + s for q in range(size // xs[last]) for s in (0,) + splits[last]}
        for s in merged:
            if 0 < s < size:
                _place(s, gj, ys, out)
    return norm(out, ys)


def _place(s: int, gj: list[int], ys, out: list[set]) -> None:
    parts: list[set] = [set() for _ in gj]
    _digits(s, [ys[d] for d in gj], parts, 0)
    for d, p in zip(gj, parts):
        out[d] |= p


def broadcast_splits(splits: Splits, xs, ys) -> list[set]:
    """An input's splits seen from a broadcast output (size-1 dims contribute none)."""
    out = [set() for _ in ys]
    off = len(ys) - len(xs)
    for d, (ss, n) in enumerate(zip(splits, xs)):
        if n != 1:
            out[off + d] |= set(ss)
    return out


def union(*sets_lists) -> list[set]:
    out = [set() for _ in sets_lists[0]]
    for sl in sets_lists:
        for k, s in enumerate(sl):
            out[k] |= set(s)
    return out


def cells(splits: Splits, shape) -> tuple[np.ndarray, np.ndarray]:
    """All boxes of a grid: (B, rank) starts and ends."""
    edges = [np.array((0,) + tuple(ss) + (d,)) for ss, d in zip(splits, shape)]
    if not shape:
        return np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64)
    lo = np.stack(np.meshgrid(*[e[:-1] for e in edges], indexing="ij"), -1).reshape(-1, len(shape))
    hi = np.stack(np.meshgrid(*[e[1:] for e in edges], indexing="ij"), -1).reshape(-1, len(shape))
    return lo, hi


def count_cells(splits: Splits) -> int:
    return prod(len(s) + 1 for s in splits)
