"""Verifying a precision conversion: the half program against the fp32 program it came from.

    report = check_conversion(fp32_graph, half_graph, "bf16")   # the error distribution, per output
    verify_conversion(fp32_graph, half_graph, "bf16")           # raises PrecisionError past the bound

Both programs run on the same random inputs (standard normal floats; the half program's half
inputs are those inputs rounded) in the NumPy reference, where half is NumPy's float16 and
ml_dtypes' bfloat16. Each value the two programs share by name (the conversion keeps names,
`einsat.ir.precision`) is compared, element by element, as

    e = |half − fp32| / (|fp32| + max|fp32|)

(the error relative to the element and to the value's scale, as `verify.numeric` measures it;
NaN or inf where the other has a finite value is an infinite error; an fp32 value beyond the
half's range is expected clamped to its largest finite value, as the conversion clamps
weights). The draws are `verify.numeric.draws`': the given inputs (or random ones) and a
second draw (a shuffle of them) on which the fp32 program runs, to show which outputs vary.

The bound. One rounding to half is off by at most u = 2^-p (bf16 2^-8 ≈ 3.9e-3, fp16
2^-11 ≈ 4.9e-4). A value computed through d roundings carries at most d·u of relative error to
first order (the worst case, every rounding the same way); rounding errors of independent
sign add as a random walk instead, and with probability at least 1 − 2·exp(−λ²/2) the error
stays below λ·√d·u (Higham and Mary, "A new approach to probabilistic rounding error
analysis", SIAM J. Sci. Comput. 41(5), 2019). The bound is that one, with λ = κ = 4
(failure probability 6.7e-4 per value):

    e ≤ κ · u · √d,   κ = 4

where d, the value's depth, counts the roundings on its longest path from an input: a weight
or input rounded to half counts 1, each op whose result is rounded to half 1, each op computed
in fp32 from half operands 1 (its conditioning: a normalization divides by a deviation, a
softmax amplifies logit errors), while exact ops (layout, views, gathers, max/min, relu,
negation, a widening cast) count 0. fp32 accumulation keeps a product's or a sum's own error
at fp32's level, so its length adds nothing. Ill-conditioned arithmetic in half (a variance
as E[x²] − E[x]² of values far from zero, a logit overflowing fp16's 65504) exceeds it: that is
what the check is for. docs/precision.md has the figures measured on the bundled models.

A conversion whose worst output error exceeds its bound is refused (`PrecisionError`), naming
the worst output and the first value, in program order, whose own error exceeds its own bound:
where the error grows.

The comparison proves something only when the outputs vary with the input, as in
`verify.numeric`; the report says which outputs did (`varying`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import sqrt

import ml_dtypes
import numpy as np

from einsat.errors import VerificationError
from einsat.ir.graph import Graph
from einsat.ir.precision import FP32, half_dtype, is_half, unit_roundoff
from einsat.ir.registry import Op
from einsat.runtime import run
from einsat.verify.informative import informative, varying
from einsat.verify.numeric import draws

KAPPA = 4.0


class PrecisionError(VerificationError):
    """A precision conversion whose error exceeds its bound."""


@dataclass
class ErrorDistribution:
    """The error distribution of one value: max, 99th percentile and median of e."""

    name: str
    max: float
    p99: float
    median: float
    bound: float
    depth: int
    index: tuple[int, ...] = ()
    expected: float = 0.0
    got: float = 0.0
    varying: float | None = None

    @property
    def ok(self) -> bool:
        return self.max <= self.bound

    def line(self) -> str:
        varies = "" if self.varying is None else f", varies in {self.varying:.0%}"
        return (f"{self.name}: max {self.max:.3g} (at {list(self.index)}: fp32 {self.expected:.6g}, "
                f"half {self.got:.6g}), p99 {self.p99:.3g}, median {self.median:.3g}; bound {self.bound:.3g} "
                f"(depth {self.depth}){varies}{'' if self.ok else '  <-- exceeds'}")


@dataclass
class PrecisionReport:
    precision: str
    unit_roundoff: float
    outputs: list[ErrorDistribution]
    first_growth: ErrorDistribution | None = None
    first_growth_op: str = ""
    values: list[ErrorDistribution] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def worst(self) -> ErrorDistribution:
        return max(self.outputs, key=lambda o: o.max / o.bound if o.bound else np.inf)

    @property
    def informative(self) -> bool:
        return all(informative(o.varying) for o in self.outputs)

    def __str__(self) -> str:
        head = "within" if self.ok else "EXCEEDS"
        lines = [f"{self.precision} conversion {head} its bound (u = {self.unit_roundoff:.3g}, "
                 f"bound = {KAPPA:g}·u·√depth)"]
        lines += ["  " + o.line() for o in self.outputs]
        if self.first_growth is not None:
            lines.append(f"  the error first exceeds its bound at {self.first_growth.name!r} "
                         f"({self.first_growth_op}): {self.first_growth.line()}")
        return "\n".join(lines)


def depths(graph: Graph, rounded_inputs: set[str]) -> dict[str, int]:
    """Each value's depth in half roundings (module docstring)."""
    d = {name: int(name in rounded_inputs) for name in (*graph.inputs, *graph.weights)}
    for node in graph.nodes:
        ins = [d.get(i, 0) for i in node.inputs if i]
        base = max(ins, default=0)
        for o in node.outputs:
            out = graph.types[o].dtype
            if node.op is Op.CAST:
                src = graph.types[node.inputs[0]].dtype
                step = int(np.dtype(src).itemsize > out.itemsize or (is_half(out) and not is_half(src)))
            elif node.definition.exact_in_half or not _floating(out) and not any(
                    _floating(graph.types[i].dtype) for i in node.inputs if i):
                step = 0
            else:
                step = 1
            d[o] = base + step
    return d


def check_conversion(reference: Graph, converted: Graph, precision: str, inputs: dict | None = None,
                     seed: int = 0) -> PrecisionReport:
    """The error of `converted` (a `precision` program) against `reference` (its fp32 original)
    on `inputs` (default: random ones, seeded), value by shared value."""
    half = half_dtype(precision)
    u = unit_roundoff(half if half is not None else FP32)
    big = float(ml_dtypes.finfo(half if half is not None else FP32).max)
    inputs, second = draws(reference, inputs, trials=2, seed=seed)[:2]
    shared = [o for n in reference.nodes for o in n.outputs
              if o in converted.types and _floating(reference.types[o].dtype)
              and reference.types[o].shape == converted.types[o].shape]
    with np.errstate(all="ignore"):
        ref = run(reference, inputs, keep=tuple(shared))
        got = run(converted, _retyped(converted, inputs), keep=tuple(shared))
        other = run(reference, second)
    rounded = {n for n in (*converted.inputs, *converted.weights)
               if is_half(converted.types[n].dtype) and reference.types.get(n) is not None
               and reference.types[n].dtype == FP32}
    depth = depths(converted, rounded)

    def measure(name: str) -> ErrorDistribution:
        return _distribution(name, ref[name], got[name], KAPPA * u * sqrt(max(depth.get(name, 1), 1)),
                             depth.get(name, 1), big)

    outputs = []
    for name in reference.outputs:
        if not _floating(reference.types[name].dtype):
            continue
        e = measure(name)
        e.varying = varying(ref[name], other[name], u)
        outputs.append(e)
    report = PrecisionReport(precision, u, outputs)
    producer = {o: n for n in reference.nodes for o in n.outputs}
    for name in shared:
        e = measure(name)
        report.values.append(e)
        if not e.ok and report.first_growth is None:
            report.first_growth, report.first_growth_op = e, producer[name].op_name
    return report


def verify_conversion(reference: Graph, converted: Graph, precision: str, inputs: dict | None = None,
                      seed: int = 0) -> PrecisionReport:
    """`check_conversion`, raising `PrecisionError` when an output's error exceeds its bound."""
    report = check_conversion(reference, converted, precision, inputs, seed)
    if not report.ok:
        worst = report.worst
        where = (f"; the error first exceeds its bound at {report.first_growth.name!r} ({report.first_growth_op})"
                 if report.first_growth is not None else "")
        raise PrecisionError(f"the {precision} conversion of {reference.name!r} loses too much precision: "
                             f"output {worst.name!r} is off by {worst.max:.3g} (bound {worst.bound:.3g}){where}."
                             f"\n{report}", report=report)
    return report


def _retyped(graph: Graph, inputs: dict) -> dict:
    return {n: np.asarray(inputs[n]).astype(graph.types[n].dtype) for n in graph.inputs}


def _distribution(name: str, expected: np.ndarray, got: np.ndarray, bound: float, depth: int,
                  big: float) -> ErrorDistribution:
    """e over the elements; an fp32 value beyond the half's range is expected as clamped to it
    (`ir.precision.to_half`), an infinity in the half program where fp32 is finite is an
    infinite error."""
    a = np.asarray(expected, dtype=np.float64)
    a = np.where(np.isfinite(a), np.clip(a, -big, big), a)
    b = np.asarray(got).astype(np.float64)
    if a.size == 0:
        return ErrorDistribution(name, 0.0, 0.0, 0.0, bound, depth)
    finite = np.isfinite(a)
    scale = float(np.max(np.abs(a[finite]))) if finite.any() else 0.0
    with np.errstate(all="ignore"):
        e = np.abs(a - b) / (np.abs(a) + scale + np.finfo(np.float64).tiny)
    e = np.where(np.isnan(a) & np.isnan(b), 0.0, e)
    e = np.where(np.isinf(a) & (a == b), 0.0, e)
    e = np.where(np.isnan(e) | np.isinf(e), np.inf, e)
    flat = e.reshape(-1)
    k = int(np.argmax(flat))
    with np.errstate(all="ignore"):  # quantiles among infinite errors
        p99, median = float(np.quantile(flat, 0.99)), float(np.median(flat))
    return ErrorDistribution(name, float(flat[k]), p99, median, bound,
                       depth, tuple(int(i) for i in np.unravel_index(k, a.shape)), float(a.reshape(-1)[k]),
                       float(b.reshape(-1)[k]))


def _floating(dtype) -> bool:
    return np.dtype(dtype) == FP32 or is_half(dtype) or np.dtype(dtype) == np.float64
