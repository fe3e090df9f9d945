"""Could a comparison have failed? Outputs that vary, and the values behind saturated ones.

Two programs agreeing on an output proves something only when that output depends on the
inputs: a constant output (a classifier with constant weights answers 0.001 everywhere) or a
saturated one (a softmax that is one-hot on every input) agrees with many wrong programs. So
each compared output is measured on two input draws of the reference program:

    varying(a0, a1, tol)   the fraction of elements that moved between the draws by more than
                           the comparison's allowed error, tol * (|a0| + max|a0|); for integers
                           and booleans, the fraction that changed

An output is *informative* when at least `MIN_VARYING` of its elements vary: a program that
computed the wrong thing for those elements on either draw would have been caught. A ReLU output
keeps most of its elements varying; a one-hot softmax over 1000 classes varies in 2 of them.

An output that is not informative is looked behind: `feeding_pairs` walks back from it through
ops that only move data (reshape, transpose, flatten, ...) to its last computing op, in both
programs; when that op is the same (same op and attributes, as for the final softmax of a
classifier), the values feeding it (the logits) are compared too, and the output counts as
proved when they are informative and agree. Otherwise the verification is inconclusive.

A commutative op's operands may end up in either order (extraction picks `mul(b, a)` for
`mul(a, b)` as readily as not): `feeding_orders` gives every way to pair them, and the values
match when they agree under any one of them.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np

from einsat.ir.graph import Graph, Node
from einsat.ir.types import is_float

MIN_VARYING = 0.1  # of an output's elements, varying between two input draws


def varying(a0: np.ndarray, a1: np.ndarray, tol: float) -> float:
    """The fraction of elements of `a0` and `a1` (one value on two input draws) that differ by
    more than the allowed error `tol * (|a0| + max|a0|)` (exactly, for `tol == 0`)."""
    if a0.size == 0 or a0.shape != a1.shape:
        return 0.0
    if tol == 0.0 or not is_float(a0.dtype):
        return float(np.mean(a0 != a1))
    x, y = a0.astype(np.float64), a1.astype(np.float64)
    finite = np.isfinite(x) & np.isfinite(y)
    if not finite.any():
        return 0.0
    scale = float(np.max(np.abs(x[finite])))
    with np.errstate(invalid="ignore", over="ignore"):
        moved = finite & (np.abs(x - y) > tol * (np.abs(x) + scale))
    return float(np.mean(moved))


def informative(fraction: float | None) -> bool:
    return fraction is not None and fraction >= MIN_VARYING


def last_computing_node(graph: Graph, value: str) -> Node | None:
    """The node that computes `value`, looking through ops that only move data; None when
    `value` comes from an input or a weight that way."""
    node = graph.producer(value)
    while node is not None and node.definition.layout_only and node.inputs and node.inputs[0]:
        node = graph.producer(node.inputs[0])
    return node


def _same_attrs(a: Node, b: Node) -> bool:
    if a.attrs.keys() != b.attrs.keys():
        return False
    for k, x in a.attrs.items():
        y = b.attrs[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y:
            return False
    return True


def _comparable(reference: Graph, candidate: Graph, a: str, b: str) -> bool:
    return bool(a) and bool(b) and reference.producer(a) is not None and candidate.producer(b) is not None \
        and reference.types[a] == candidate.types[b] and is_float(reference.types[a].dtype)


def feeding_orders(reference: Graph, candidate: Graph, out_ref: str, out_cand: str) -> list[list[tuple[str, str]]]:
    """The ways to pair the values feeding the last computing op of `out_ref` in `reference` with
    those feeding the last computing op of `out_cand` in `candidate`, when that op is the same in
    both (same op, same attributes): operand by operand first, then, for a commutative op, each
    other order of the candidate's operands that pairs values of the same type. Only computed
    floating values (not inputs or weights) are paired. Empty when there is nothing to pair."""
    n1, n2 = last_computing_node(reference, out_ref), last_computing_node(candidate, out_cand)
    if n1 is None or n2 is None or n1.op is not n2.op or len(n1.inputs) != len(n2.inputs) or not _same_attrs(n1, n2):
        return []
    orders = [tuple(n2.inputs)]
    if n1.definition.commutative and len(n1.inputs) <= 4:
        orders += [p for p in permutations(n2.inputs) if p != orders[0]]
    options = []
    for order in orders:
        if order is not orders[0] and not all(  # another order must pair values of the same types
                reference.types[a] == candidate.types[b] for a, b in zip(n1.inputs, order) if a and b):
            continue
        pairs = [(a, b) for a, b in zip(n1.inputs, order) if _comparable(reference, candidate, a, b)]
        if pairs and pairs not in options:
            options.append(pairs)
    return options


def feeding_pairs(reference: Graph, candidate: Graph, out_ref: str, out_cand: str) -> list[tuple[str, str]]:
    """The values feeding the last computing op of `out_ref` in `reference` and of `out_cand`
    in `candidate`, paired operand by operand, when that op is the same in both (same op, same
    attributes); only computed floating values (not inputs or weights), of the same type. Empty
    when none. (`feeding_orders` gives the other orders of a commutative op's operands too.)"""
    options = feeding_orders(reference, candidate, out_ref, out_cand)
    return options[0] if options else []
