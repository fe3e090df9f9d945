"""Shape guards for rule text: egglog facts over the shape analysis (`einsat.egraph.analysis`).

A guarded rule matches only terms whose shapes the analysis knows and that satisfy the guard:
an unknown shape never lets a rule fire.
"""

from __future__ import annotations


def shape(x: str, s: str) -> str:
    """Bind the shape of `x` to `s`."""
    return f"(= {s} (shape {x}))"


def same_shape(*xs: str) -> str:
    return " ".join(f"(= (shape {xs[0]}) (shape {x}))" for x in xs[1:])


def rank(x: str, n: int | str) -> str:
    return f"(= {n} (vec-length (shape {x})))"


def scalar(x: str) -> str:
    """`x` has rank 0 (a scalar: it broadcasts against anything without changing its shape)."""
    return f"(= (shape {x}) (vec-empty))"


def dtype(x: str, d: str) -> str:
    return f"(= {d} (dtype {x}))"

