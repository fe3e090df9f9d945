"""Regions: boxes of an output tensor, and covers of sets of cells or positions by few boxes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, order=True)
class Region:
    """A box of a tensor: starts (inclusive) and ends (exclusive) per dimension, and optionally
    steps (a strided box: s, s + step, ... below e; ends are kept at the last position + 1).
    The corrector reports plain boxes; restrictions pass strided ones on (the even rows of a
    parity reordering are one strided box of the original)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    steps: tuple[int, ...] | None = None

    def __post_init__(self):
        starts, ends = tuple(int(s) for s in self.starts), tuple(int(e) for e in self.ends)
        steps = (1,) * len(starts) if self.steps is None else tuple(int(k) for k in self.steps)
        ends = tuple(s + (max(e - s, 0) - 1) // k * k + 1 if e > s else e for s, e, k in zip(starts, ends, steps))
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "ends", ends)
        object.__setattr__(self, "steps", steps)

    @property
    def unit(self) -> bool:
        return all(k == 1 for k in self.steps)

    def bounds(self) -> "Region":
        """The plain box around this one."""
        return Region(self.starts, self.ends)

    @property
    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(s, e, k) for s, e, k in zip(self.starts, self.ends, self.steps))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(-(-(e - s) // k) for s, e, k in zip(self.starts, self.ends, self.steps))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def attr(self) -> tuple[int, ...]:
        """The `region` attribute of a correct node: starts, then ends (a plain box)."""
        assert self.unit, f"a correct node's region is a plain box, not {self}"
        return self.starts + self.ends

    def __str__(self) -> str:
        return "[" + ", ".join(f"{s}:{e}" + (f":{k}" if k != 1 else "")
                               for s, e, k in zip(self.starts, self.ends, self.steps)) + "]"


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
