"""einsum: NumPy's and ONNX's Einsum, a sum of products over labelled dims.

    einsum("bij,bjk->bik", a, b) = batched matmul;  "ii->i" a diagonal;  "...ij->...ji" a transpose

The equation is normalized once (spaces removed, the output made explicit: for an implicit one,
'...' first when any input has it, then the labels used exactly once, sorted). A label names
equal dims wherever it appears; the dims under '...' (as many in every input, as ONNX requires)
broadcast like NumPy's. It is linear in
each input but not flagged multi-linear: the corrector (`einsat/verify`) has no rule for it.
`einsum_labels` gives every dim one label (the '...' dims get digits '0', '1', ...), the form
the GPU kernel reads.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

import numpy as np

from einsat.ir.registry import Attr, Op, OpDef, ShapeError, register, same_dtype
from einsat.ir.types import TensorType


def _split(equation: str) -> tuple[list[str], str | None]:
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    for t in terms + ([rhs] if "->" in eq else []):
        if not all(c.isalpha() for c in t.replace("...", "")) or t.count("...") > 1:
            raise ShapeError(f"einsum term {t!r} must be letters with at most one '...'")
    return terms, (rhs if "->" in eq else None)


def normalize_equation(equation: str) -> str:
    """The equation without spaces and with its output written out."""
    terms, out = _split(equation)
    if out is None:
        letters = "".join(t.replace("...", "") for t in terms)
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        out = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    return f"{','.join(terms)}->{out}"


def einsum_labels(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """(one label per dim of each input, one per output dim) of a normalized equation."""
    terms, out = _split(equation)
    if len(terms) != len(ranks):
        raise ShapeError(f"equation {equation!r} has {len(terms)} inputs, got {len(ranks)}")
    spans = []
    for t, r in zip(terms, ranks):
        n = r - len(t.replace("...", ""))
        if n < 0 or (n and "..." not in t):
            raise ShapeError(f"einsum term {t!r} does not fit an input of rank {r}")
        spans.append(n)
    width = max(spans, default=0)
    if any(n != width for t, n in zip(terms, spans) if "..." in t):
        raise ShapeError(f"the '...' of every input must cover the same number of dims (ONNX), here {spans}")

    def expand(term: str, n: int) -> str:
        return term.replace("...", "".join(str(width - n + k) for k in range(n)))

    return [expand(t, n) for t, n in zip(terms, spans)], expand(out, width)


def label_sizes(labels: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
    """The size of every label: letters equal wherever they appear, '...' digits broadcast."""
    sizes: dict[str, int] = {}
    for term, shape in zip(labels, shapes):
        for c, d in zip(term, shape):
            seen = sizes.setdefault(c, d)
            if seen != d and not (c.isdigit() and 1 in (seen, d)):
                raise ShapeError(f"einsum label {c!r} is {seen} in one place and {d} in another")
            sizes[c] = max(seen, d) if c.isdigit() else d
    return sizes


@register
class Einsum(OpDef):
    op = Op.EINSUM
    arity = (1, None)
    onnx_type = "Einsum"
    attrs = {"equation": Attr("str", doc="NumPy/ONNX einsum notation; normalized with an explicit output")}
    doc = "einsum(equation, *inputs), as np.einsum"

    def normalize(self, attrs, types):
        attrs["equation"] = normalize_equation(attrs["equation"])
        return attrs

    def infer(self, types, attrs):
        labels, out = einsum_labels(attrs["equation"], [t.rank for t in types])
        sizes = label_sizes(labels, [t.shape for t in types])
        if len(set(out)) != len(out) or not set(out) <= set(sizes):
            raise ShapeError(f"einsum output {out!r} repeats a label or names one no input has")
        return [TensorType(tuple(sizes[c] for c in out), same_dtype(types))]

    def numpy(self, args, attrs):
        return [np.asarray(np.einsum(attrs["equation"], *args)).astype(args[0].dtype, copy=False)]

    def flops(self, ins, outs, attrs):
        """A multiply per input beyond the first and an add, for every combination of labels."""
        labels, _ = einsum_labels(attrs["equation"], [t.rank for t in ins])
        sizes = label_sizes(labels, [t.shape for t in ins])
        return max(len(ins), 2) * prod(sizes.values())
