"""Field semantics of eOperators (`eop`): an expression evaluated over the integers mod p.

An eop's value at an output position is a sum over its summation grid of products of input
elements (EinNet's expressions are sums of products of reads; `add`, `sub`, `neg`, `mul`,
constants and guards are exact over the field). `pull` maps the requested output positions
through the subscripts to the input positions they read (0 outside a tensor: no position);
`compute` gathers those values and sums mod p. A scope the body reads is evaluated over its
whole grid first. Any other function (relu, max reductions) has no meaning over the field: the
node is refused, naming it. Imports only `ir` (and the field itself).
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.errors import describe_node
from einsat.ir.expr.nodes import Call, Const, Expr, Guard, Read, products, reads, scopes
from einsat.ir.ops.eop import expression_of
from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field import NotMultilinearError
from einsat.verify.field.base import Rule, field_rule, node_shapes, ravel, unravel

FIELD_FNS = {"add": F.add, "sub": F.sub, "mul": F.mul, "neg": lambda a: F.sub(0, a)}


def _grid(e: Expr, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Iterator values at the traversal points `flat` (column vectors) and at every summation
    point (row vectors)."""
    values = {}
    coords = unravel(flat, e.shape) if e.shape else np.zeros((0, len(flat)), np.int64)
    for c, it in zip(coords, e.loops):
        values[it.name] = (c + it.lo)[:, None]
    sums = np.arange(e.sum_points(), dtype=np.int64)
    for c, it in zip(unravel(sums, tuple(it.size for it in e.sums)), e.sums):
        values[it.name] = (c + it.lo)[None, :]
    return values


def _positions(r: Read, shape, lows, values) -> np.ndarray:
    """The flat positions a read touches over the grid `values` (-1 outside the tensor), as a
    2-d array broadcasting against (traversal points, summation points)."""
    if not r.idx:
        return np.zeros((1, 1), np.int64)
    coords = np.broadcast_arrays(*[np.asarray(i.evaluate(values) - lo, dtype=np.int64)
                                   for i, lo in zip(r.idx, lows)])
    pos = ravel(np.stack(coords), shape)
    return pos.reshape((1,) * (2 - pos.ndim) + pos.shape)


@field_rule(Op.EOP, affine="an expression that is a sum of products of reads and constants (its rule refuses "
                            "any other)")
class Eop(Rule):
    def expr(self, node) -> Expr:
        return expression_of(node.attrs["expr"])

    def degree(self, node, degs, env):
        return self._degree(node, self.expr(node), degs)

    def _degree(self, node, e: Expr, degs) -> int:
        terms = products(e.body) if e.reduce == "sum" else None
        if terms is None:
            raise NotMultilinearError(f"{describe_node(node)} computes {e.body!r:.80}, which is not a sum of "
                                      "products: it has no exact meaning over the field")
        best = 0
        for factors in terms:
            d = 0
            for f in factors:
                if isinstance(f, Read):
                    d += degs[f.src] if isinstance(f.src, int) else self._degree(node, f.src, degs)
            best = max(best, d)
        return best

    # -- pull ------------------------------------------------------------------------------
    def pull(self, node, ctx, out_flat):
        ins, _ = node_shapes(node, ctx)
        need: list[list[np.ndarray]] = [[] for _ in node.inputs]
        self._pull(self.expr(node), out_flat[0], ins, need)
        return [np.concatenate([n.reshape(-1) for n in parts]) if parts else np.zeros(0, np.int64)
                for parts in need]

    def _pull(self, e: Expr, flat, ins, need) -> None:
        values = _grid(e, flat)
        for s in scopes(e):
            self._pull(s, np.arange(prod(s.shape), dtype=np.int64), ins, need)
        for r in reads(e.body):
            if isinstance(r.src, int):
                need[r.src].append(_positions(r, ins[r.src], (0,) * len(r.idx), values))

    # -- compute ---------------------------------------------------------------------------
    def compute(self, node, ctx, out_flat, ins):
        shapes, _ = node_shapes(node, ctx)
        return [self._value(node, self.expr(node), out_flat[0], ins, shapes, ctx.env.tests, {})]

    def _value(self, node, e: Expr, flat, ins, shapes, tests, done) -> np.ndarray:
        """(tests, len(flat)) field values of `e` at its traversal points `flat`."""
        for s in scopes(e):
            if s not in done:
                done[s] = self._value(node, s, np.arange(prod(s.shape), dtype=np.int64), ins, shapes, tests, done)
        values = _grid(e, flat)
        body = self._body(node, e.body, values, ins, shapes, done)
        body = np.broadcast_to(body, (tests, len(flat), max(e.sum_points(), 1) if e.sums else 1))
        if e.sums and e.sum_points() == 0:
            return np.zeros((tests, len(flat)), np.int64)
        return F.sum_mod(body, axis=-1)

    def _body(self, node, b, values, ins, shapes, done) -> np.ndarray:
        if isinstance(b, Const):  # a folded 1/n is the fraction it rounds from, as the reference's exact
            return F.embed_constant(np.float64(b.value))  # division by n and its constants are (`embed_constant`)
        if isinstance(b, Guard):
            i = np.asarray(b.idx.evaluate(values))
            inner = self._body(node, b.value, values, ins, shapes, done)
            return np.where(((i >= b.lo) & (i < b.hi))[None], inner, 0)
        if isinstance(b, Call):
            if b.fn not in FIELD_FNS:
                raise NotMultilinearError(f"{describe_node(node)} applies {b.fn}, which has no exact meaning "
                                          "over the field")
            return FIELD_FNS[b.fn](*[self._body(node, a, values, ins, shapes, done) for a in b.args])
        if isinstance(b.src, int):
            return ins[b.src].read(_positions(b, shapes[b.src], (0,) * len(b.idx), values))
        dense = done[b.src]
        pos = _positions(b, b.src.shape, b.src.lows, values)
        return np.where((pos >= 0)[None], dense[:, np.maximum(pos, 0)], 0)
