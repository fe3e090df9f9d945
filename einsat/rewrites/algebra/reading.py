"""Reading exported forms in an exported e-graph (`EGraphData`): what the recognition generators
(`norms`, `gelu`) share.

Exports write an op's constants as one-element weights (GELU's 0.5, an epsilon, RMSNorm's 2 in
`Pow(x, 2)`), and some wrap values in casts to their own dtype (the legacy exports' `Cast(x,
float32)` of a float32 x). The reader gives a class's scalar value, the classes equal to it through
such casts, and the ways a class is a product of factors.
"""

from __future__ import annotations

import itertools

import numpy as np

from einsat.egraph.data import EGraphData
from einsat.ir.registry import Op
from einsat.ir.types import is_float

MAX_FACTORINGS = 16  # factor lists per class (a product of n factors has Catalan(n-1) trees)


class Reader:
    """Reads one export; what it finds is kept for the reader's life (one generator round):
    a class's nodes by op, and any result a recognizer keeps with `cached` (a class's normalized
    forms are asked once for each product it is a factor of)."""

    def __init__(self, data: EGraphData):
        self.data = data
        self._same: dict[int, frozenset[int]] = {}
        self._by_op: dict[int, dict[Op, tuple]] = {}
        self._cache: dict = {}

    def type(self, cid):
        return self.data.classes[cid].type

    def nodes(self, cid, op: Op) -> tuple:
        by_op = self._by_op.get(cid)
        if by_op is None:
            by_op = {}
            for n in self.data.classes[cid].nodes:
                by_op.setdefault(n.op, []).append(n)
            by_op = self._by_op[cid] = {k: tuple(v) for k, v in by_op.items()}
        return by_op.get(op, ())

    def cached(self, key, compute):
        """`compute()` once per `key` for this reader (a list or tuple: the caller must not change it)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def scalar(self, cid) -> float | None:
        """The value of a one-element finite float constant weight in the class, else None."""
        t = self.type(cid)
        if t is None or t.size != 1 or not is_float(t.dtype):
            return None
        for n in self.data.classes[cid].nodes:
            if n.leaf is not None and n.leaf[0] == "weight" and n.leaf[1] in self.data.weights:
                v = float(np.asarray(self.data.weights[n.leaf[1]], np.float64).reshape(-1)[0])
                return v if np.isfinite(v) else None
        return None

    def near(self, cid, value: float, dtype) -> bool:
        """The class is a scalar constant equal to `value` as far as its program's float type
        tells (float32 rounding: a relative 1e-6; float64: 1e-12)."""
        v = self.scalar(cid)
        if v is None:
            return False
        tol = 1e-12 if np.dtype(dtype) == np.float64 else 1e-6
        return abs(v - value) <= tol * abs(value)

    def same(self, cid) -> frozenset[int]:
        """The class and those equal to it through casts to their own dtype, either way."""
        if cid not in self._same:
            out, todo = {cid}, [cid]
            while todo:
                c = todo.pop()
                t = self.type(c)
                for n in self.nodes(c, Op.CAST):
                    k = n.children[0]
                    if k not in out and t is not None and self.type(k) is not None and self.type(k).dtype == t.dtype:
                        out.add(k)
                        todo.append(k)
            self._same[cid] = frozenset(out)
        return self._same[cid]

    def equal(self, a, b) -> bool:
        return a == b or b in self.same(a) or a in self.same(b)

    def factorings(self, cid, depth: int = 2) -> list[tuple[int, ...]]:
        """Lists of classes whose product (`mul`, as broadcast) is the class, the class alone first;
        products nested up to `depth` deep."""
        out = [(cid,)]
        if depth == 0:
            return out
        for c in self.same(cid):
            for n in self.nodes(c, Op.MUL):
                a, b = n.children
                for fa, fb in itertools.product(self.factorings(a, depth - 1), self.factorings(b, depth - 1)):
                    f = tuple(sorted(fa + fb))
                    if f not in out:
                        out.append(f)
                    if len(out) >= MAX_FACTORINGS:
                        return out
        return out

    def products(self, cid):
        """(a, b) for every product a · b in the class, in both orders."""
        for c in self.same(cid):
            for n in self.nodes(c, Op.MUL):
                a, b = n.children
                yield a, b
                yield b, a

    def sums(self, cid):
        """(a, b) for every sum a + b in the class, in both orders."""
        for c in self.same(cid):
            for n in self.nodes(c, Op.ADD):
                a, b = n.children
                yield a, b
                yield b, a


def float32_attr(value: float, dt) -> float | None:
    """The float32 attribute for `value`, or None when a float64 program would see it rounded."""
    f = float(np.float32(value))
    if np.dtype(dt) == np.float64 and f != value:
        return None
    return f


def trailing_axis(axes, rank: int) -> int | None:
    """The first axis when `axes` are exactly the trailing dims from it on, else None."""
    axes = tuple(sorted(a % rank for a in axes)) if rank else ()
    if not axes or axes != tuple(range(axes[0], rank)):
        return None
    return axes[0]


def broadcasts_within(shape, target) -> bool:
    """`shape` broadcasts to `target` (unidirectionally)."""
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(shape[::-1], target[::-1]))
