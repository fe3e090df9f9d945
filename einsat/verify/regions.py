"""Regions: boxes of an output tensor, and covers of sets of cells or positions by few boxes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, order=True)
class Region:
    """A box of a tensor: starts (inclusive) and ends (exclusive) per dimension."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "starts", tuple(int(s) for s in self.starts))
        object.__setattr__(self, "ends", tuple(int(e) for e in self.ends))

    @property
    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(s, e) for s, e in zip(self.starts, self.ends))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(e - s for s, e in zip(self.starts, self.ends))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def attr(self) -> tuple[int, ...]:
        """The `region` attribute of a correct node: starts, then ends."""
        return self.starts + self.ends

    def __str__(self) -> str:
        return "[" + ", ".join(f"{s}:{e}" for s, e in zip(self.starts, self.ends)) + "]"


def mask_of(regions, shape) -> np.ndarray:
    """The boolean mask of the union of `regions`."""
    m = np.zeros(shape, dtype=bool)
    for r in regions:
        m[r.slices] = True
    return m


def merge_cells(failing: np.ndarray, edges: list[np.ndarray]) -> list[Region]:
    """Cover failing grid cells ((B, rank) cell coordinates) by boxes: adjacent cells with equal
    extents in the other dimensions merge, one dimension after the other."""
    rank = len(edges)
    if rank == 0:
        return [Region((), ())] if len(failing) else []
    rects = {(tuple(c), tuple(c + 1)) for c in np.asarray(failing, dtype=np.int64).reshape(-1, rank)}
    for d in reversed(range(rank)):
        groups: dict[tuple, list] = {}
        for lo, hi in rects:
            key = (lo[:d] + lo[d + 1:], hi[:d] + hi[d + 1:])
            groups.setdefault(key, []).append((lo, hi))
        merged = set()
        for members in groups.values():
            members.sort(key=lambda r: r[0][d])
            cur_lo, cur_hi = members[0]
            for lo, hi in members[1:]:
                if lo[d] == cur_hi[d]:
                    cur_hi = cur_hi[:d] + (hi[d],) + cur_hi[d + 1:]
                else:
                    merged.add((cur_lo, cur_hi))
                    cur_lo, cur_hi = lo, hi
            merged.add((cur_lo, cur_hi))
        rects = merged
    out = [Region(tuple(edges[k][lo[k]] for k in range(rank)), tuple(edges[k][hi[k]] for k in range(rank)))
           for lo, hi in rects]
    return sorted(out)


def cover_mask(mask: np.ndarray, offset=None) -> list[Region]:
    """Exact cover of the True positions of `mask` by boxes: the bounding box when it is full,
    else the two halves of its longest side."""
    offset = np.zeros(mask.ndim, np.int64) if offset is None else offset
    if not mask.any():
        return []
    if mask.ndim == 0:
        return [Region((), ())]
    nz = np.nonzero(mask)
    lo = np.array([a.min() for a in nz])
    hi = np.array([a.max() + 1 for a in nz])
    box = mask[tuple(slice(a, b) for a, b in zip(lo, hi))]
    if box.all():
        return [Region(tuple(offset + lo), tuple(offset + hi))]
    d = int(np.argmax(hi - lo))
    mid = (hi[d] - lo[d]) // 2
    first = tuple(slice(None) if k != d else slice(0, mid) for k in range(mask.ndim))
    second = tuple(slice(None) if k != d else slice(mid, None) for k in range(mask.ndim))
    shift = np.zeros(mask.ndim, np.int64)
    shift[d] = lo[d] + mid
    base = offset + lo
    base_shift = np.where(np.arange(mask.ndim) == d, base + mid, base)
    return cover_mask(box[first], base) + cover_mask(box[second], base_shift)
