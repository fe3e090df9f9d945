"""Hypothesis strategies of tensor-algebra expressions, for testing derivations.

  op_expressions(ops)   (expression, input shapes) of a registry op drawn with valid shapes and
                        attributes: strided, dilated, padded and grouped convolutions, transposed
                        convolutions, matmuls, band products, pooling
  expression_inputs(shapes, seed)  seeded standard-normal float64 inputs (a plain function)

A derivation rule is sound when `evaluate(rule(e), xs) == evaluate(e, xs)` for every drawn `e`
and inputs (see `tests/rewrites/derive/`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from hypothesis import strategies as st

from einsat.ir.expr.nodes import Expr
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType
from einsat.testing.strategies import conv_cases, conv_transpose_cases, pool_cases

# op -> the strategy of its (input shapes, attributes), registered per op (`@case`); `OPS` is their
# names, in registration order (shrinking moves to the first)
CASES: dict[Op, Callable] = {}


def case(op: Op) -> Callable:
    def register(fn):
        CASES[op] = fn
        return fn
    return register


@case(Op.CONV)
def _conv(draw):
    c = draw(conv_cases(1, 2))
    return [c["x"], c["w"]] + ([(c["w"][0],)] if c["bias"] else []), c["attrs"]


@case(Op.CONV_TRANSPOSE)
def _conv_transpose(draw):
    c = draw(conv_transpose_cases(1, 2))
    return [c["x"], c["w"]], c["attrs"]


@case(Op.MATMUL)
def _matmul(draw):
    dim = st.integers(1, 6)
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    m, k, n = draw(dim), draw(dim), draw(dim)
    return [batch + (m, k), (k, n)], {}


def _band(draw):
    return draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 6)), \
        draw(st.integers(0, 3)), draw(st.integers(1, 3))


@case(Op.G2BMM)
def _g2bmm(draw):
    z, m, k, width, dil = _band(draw)
    return [(z, m, k), (z, m, k)], {"width": width, "dilation": dil}


@case(Op.GBMM)
def _gbmm(draw):
    z, m, k, width, dil = _band(draw)
    return [(z, m, 2 * width + 1), (z, m, k)], {"dilation": dil}


@case(Op.AVGPOOL)
def _avgpool(draw):
    c = draw(pool_cases("avg"))
    return [c["x"]], dict(c["attrs"], count_include_pad=1, ceil_mode=0)


OPS = tuple(op.value for op in CASES)


@st.composite
def op_expressions(draw, ops=OPS) -> tuple[Expr, list[tuple[int, ...]]]:
    op = Op(draw(st.sampled_from(ops)))
    shapes, attrs = CASES[op](draw)
    types = [TensorType(s, np.float64) for s in shapes]
    attrs = normalize_attrs(op, attrs, types)
    return opdef(op).expression(types, attrs), shapes


def expression_inputs(shapes, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]
