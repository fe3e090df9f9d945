"""What every field rule is built from: the `Rule` interface and position arithmetic.

A rule gives one op's field semantics at requested positions only: `pull` maps the flat output
positions asked for to the input positions they read, `compute` computes the outputs there from
the inputs' known values (`field.evaluate.Known`), `degree` is the output's polynomial degree in the
random variables. Positions are flat row-major indices; `unravel` / `ravel` convert them to and
from coordinates (-1 for a coordinate outside the tensor), `digit_map` evaluates an affine map of
the coordinates, `broadcast_flat` follows NumPy broadcasting back to an input.
"""

from __future__ import annotations

from math import prod
from typing import Callable

import numpy as np

from einsat.ir.registry import Op


def unravel(flat: np.ndarray, shape) -> np.ndarray:
    """(K,) flat indices -> (rank, K) coordinates."""
    if not shape:
        return np.zeros((0, len(flat)), np.int64)
    return np.stack(np.unravel_index(flat, shape)).astype(np.int64)


def ravel(coords: np.ndarray, shape) -> np.ndarray:
    """(rank, ...) coordinates -> flat indices; any coordinate out of range gives -1."""
    coords = np.asarray(coords, dtype=np.int64)
    if not shape:
        return np.zeros(coords.shape[1:], np.int64)
    flat = np.ravel_multi_index(tuple(coords), shape, mode="clip").astype(np.int64)
    bad = np.zeros(coords.shape[1:], dtype=bool)
    for c, d in zip(coords, shape):
        bad |= (c < 0) | (c >= d)
    if bad.any():
        flat[bad] = -1
    return flat


def digit_map(flat: np.ndarray, shape, coefs, offset: int = 0) -> np.ndarray:
    """offset + Σ_i coefs[i]·c_i for the coordinates c of flat indices in `shape`.

    Splits the dims into a leading and a trailing group and looks both parts up in small tables
    (two gathers instead of one division per dim) when the tables are smaller than `flat`."""
    flat = np.asarray(flat, dtype=np.int64)
    rank = len(shape)
    split = min(range(rank + 1), key=lambda k: max(prod(shape[:k]), prod(shape[k:])))
    lead, trail = prod(shape[:split]), prod(shape[split:])
    if max(lead, trail) > len(flat) or rank == 0:
        c = unravel(flat, shape)
        return offset + sum((ci * int(w) for ci, w in zip(c, coefs)), np.zeros(len(flat), np.int64))

    def table(dims, ws):
        t = np.zeros((), np.int64)
        for d, w in zip(dims, ws):
            t = t[..., None] + np.arange(d, dtype=np.int64) * int(w)
        return t.reshape(-1)

    hi, lo = np.divmod(flat, trail)
    return table(shape[:split], coefs[:split])[hi] + (table(shape[split:], coefs[split:]) + offset)[lo]


def broadcast_flat(out_flat: np.ndarray, out_shape, in_shape) -> np.ndarray:
    """The flat index of the input element that NumPy broadcasting reads for each output element."""
    c = unravel(out_flat, out_shape)[len(out_shape) - len(in_shape):]
    c = np.stack([ci if d != 1 else np.zeros_like(ci) for ci, d in zip(c, in_shape)]) if len(in_shape) else c
    return ravel(c, in_shape)


class Rule:
    def degree(self, node, degs, env) -> int:
        return max(degs, default=0)

    def pull(self, node, ctx, out_flat):
        raise NotImplementedError

    def compute(self, node, ctx, out_flat, ins):
        raise NotImplementedError


def node_shapes(node, ctx):
    """(input shapes, None for an absent input; output shapes) of `node` in the rule's graph."""
    g = ctx.graph
    return [g.types[i].shape if i else None for i in node.inputs], [g.types[o].shape for o in node.outputs]


# -- the field rules, each registered beside its code (as gpu's `@implements`) --------------------

RULES: dict[Op, Rule] = {}
# op -> why it is exact over the field though not multi-linear in the registry's sense (linear in
# each input separately): affine maps whose parameters come from weights only, and a select
AFFINE: dict[Op, str] = {}
# op -> why an op flagged multi-linear has no field rule yet (the verifier refuses it)
NOT_YET_EVALUABLE: dict[Op, str] = {}


def field_rule(*ops: Op, affine: str = "") -> Callable:
    """Register a field rule for `ops`: decorate a `Rule` class (made with no arguments), or call
    the result on an instance (`field_rule(Op.ADD)(Elementwise(F.add))`). `affine`: the reason the
    ops are exact over the field though the registry does not flag them multi-linear."""
    def register(rule):
        instance = rule() if isinstance(rule, type) else rule
        for op in ops:
            if op in RULES:
                raise RuntimeError(f"{op.value} has two field rules: {RULES[op]} and {instance}")
            RULES[op] = instance
            if affine:
                AFFINE[op] = affine
        return rule
    return register
