"""Numeric equivalence: two programs on the same random inputs, within a derived tolerance.

    report = equivalent(g1, g2)          # truthy when every output agrees
    print(report)                        # the worst element, its values and the nodes behind it

Tolerance: for floats, |a − b| ≤ tol · (|b| + max|b|) with tol = eps(dtype) · 8 · (ops + √L), where
ops counts the nodes of both programs and L is the longest accumulation (a conv's C·k·k, a
matmul's K): rounding error grows with the number of rounded operations and as √L for sums
computed in different orders. Where either program stores a value in half (fp16, bf16; its outputs
may be fp32), eps is the half's and the arithmetic fp32: each program is within 4·u·√ops of the
exact result (u = eps/2, `einsat.verify.precision`'s probabilistic bound), so tol = 2 · 4 · u · √ops.
Integers and booleans must be equal.

When the two programs share value names (an ONNX round trip, a renaming pass), the report also
names the first shared value whose values differ: where the transformation went wrong.

Agreement proves something only when the comparison could have failed: each output must vary
between two input draws (`einsat.verify.informative`); where one does not (constant, or a
saturated softmax), the values feeding its last computing op are compared as well (those of a
commutative op in whichever order of its operands they agree: extraction may have exchanged
them); where they differ while the output agrees, the output is inconclusive, not failed (the
programs may compute those values otherwise: x - x is 0 whatever x is). The report's
`status` says which: "proved" (every output agreed and varied, itself or through the values
feeding it), "inconclusive" (all agreed, but some output could not have failed) or "failed".

The reference's runs can be taken ahead of time and kept (`ReferenceRuns`): a run with a time
budget runs the input program on the verification's draws while it loads, so that the time they
take is known before the search starts (and left for the candidate's runs), and the
verification at the end runs only the candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from math import ceil, sqrt

import ml_dtypes
import numpy as np

from einsat.ir.graph import Graph
from einsat.runtime import random_inputs, run
from einsat.verify.corrector import check_pair, content_key
from einsat.verify.informative import MIN_VARYING, feeding_orders, informative, last_computing_node, varying


@dataclass
class OutputReport:
    name: str
    ok: bool
    error: float           # worst |a - b| / allowed (<= 1 passes)
    index: tuple[int, ...]
    expected: float
    got: float
    varying: float | None = None   # fraction of elements that moved between two input draws (None: one draw)
    feeding: list[OutputReport] = field(default_factory=list)  # the values feeding its last op, when compared
    # both programs compute it from their weights alone (no input reaches it): its value is the same
    # on every input, so one comparison is the whole proof (a partition's piece passing on a mask
    # made from a weight); it never varies, and need not
    of_weights: bool = False

    @property
    def informative(self) -> bool:
        """Could this comparison have failed: the output varies, or the values feeding it do, or
        it is a constant of both programs' weights (compared once, compared for every input)?"""
        return self.of_weights or informative(self.varying) or \
            (bool(self.feeding) and all(f.ok and f.informative for f in self.feeding))

    @property
    def feeding_differs(self) -> bool:
        """The output agrees but the values feeding its last op do not: the programs may differ
        where this op is not saturated, or compute those values otherwise and agree (x - x is 0
        whatever x is). No verdict either way: inconclusive, never "failed"."""
        return self.ok and bool(self.feeding) and not all(f.ok for f in self.feeding)

    def line(self) -> str:
        varies = "" if self.varying is None else f", varies in {self.varying:.0%} of elements"
        varies += ", a constant of the weights" if self.of_weights else ""
        return (f"{self.name}: worst {list(self.index)} expected {self.expected:.6g} got {self.got:.6g} "
                f"({self.error:.3g} x allowed{varies}){'' if self.ok else '  <-- differs'}")


@dataclass
class NumericReport:
    equivalent: bool
    outputs: list[OutputReport]
    tolerance: float
    chain: list[str] = field(default_factory=list)
    first_divergence: str | None = None
    draws: int = 1

    def __bool__(self) -> bool:
        return self.equivalent

    @property
    def status(self) -> str:
        """"failed" (an output differs), "inconclusive" (all agree, but some output could not have
        failed: constant or saturated, and nothing behind it that varies and agrees) or "proved"."""
        if not self.equivalent:
            return "failed"
        return "proved" if all(o.informative for o in self.outputs) else "inconclusive"

    def inconclusive(self) -> list[str]:
        """Why each output that could not have failed could not: one line each."""
        why = []
        for o in self.outputs:
            if o.informative:
                continue
            moved = "was compared on one input draw only" if o.varying is None else \
                f"varies in {o.varying:.1%} of its elements between input draws (< {MIN_VARYING:.0%})"
            if o.feeding_differs:
                why.append(f"output {o.name!r} agrees, but the values feeding its last op differ ("
                           + ", ".join(f.name for f in o.feeding if not f.ok) + "): the programs may differ where "
                           "that op is not saturated, or compute those values otherwise; no verdict either way")
                continue
            behind = "; the values feeding its last op: " + ", ".join(
                f"{f.name} varies in {f.varying:.1%}" if f.varying is not None else f.name for f in o.feeding) \
                if o.feeding else "; its last op differs between the programs or has no computed input"
            why.append(f"output {o.name!r} {moved}{behind}")
        return why

    def __str__(self) -> str:
        head = "equivalent" if self.equivalent else "NOT equivalent"
        lines = [f"{head}, {self.status} (tolerance {self.tolerance:.2e}, {self.draws} input draw(s))"]
        for o in self.outputs:
            lines.append("  " + o.line())
            lines += [f"    feeding {f.line()}" for f in o.feeding]
        lines += [f"  inconclusive: {w}" for w in self.inconclusive()] if self.equivalent else []
        if self.first_divergence:
            lines.append(f"  first shared value that differs: {self.first_divergence}")
        if self.chain:
            lines.append("  nodes behind the worst element (input to output):")
            lines += [f"    {c}" for c in self.chain]
        return "\n".join(lines)


def _accumulation(graph: Graph) -> int:
    longest = 1
    for node in graph.nodes:
        ins, outs = graph.node_types(node)
        size = sum(t.size for t in outs)
        try:
            flops = node.definition.flops(ins, outs, node.attrs)
        except NotImplementedError:  # an op without a flop count accumulates nothing we know of
            continue
        if size:
            longest = max(longest, ceil(flops / (2 * size)))
    return longest


def _halves(g: Graph) -> set[np.dtype]:
    """The half dtypes `g` stores values in (a half program rounds at half's eps, whatever its
    outputs' dtype)."""
    return {t.dtype for t in g.types.values() if t.dtype == np.float16 or t.dtype.name == "bfloat16"}


def tolerance(g1: Graph, g2: Graph, dtype) -> float:
    dtype = np.dtype(dtype)
    if not (np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"):
        return 0.0
    ops = len(g1.nodes) + len(g2.nodes)
    eps = max(float(ml_dtypes.finfo(d).eps) for d in {dtype, *_halves(g1), *_halves(g2)})
    if eps > float(np.finfo(np.float32).eps):  # half storage, fp32 arithmetic: each within 4·u·√ops of exact
        return 2 * 4 * (eps / 2) * sqrt(ops)   # (`einsat.verify.precision`), so within twice that of each other
    return eps * 8 * (ops + sqrt(max(_accumulation(g1), _accumulation(g2))))


def _compare(a: np.ndarray, b: np.ndarray, tol: float):
    """(ok, worst ratio, worst index) of got `b` against expected `a`."""
    if a.size == 0:
        return True, 0.0, ()
    if tol == 0.0:
        bad = a != b
        k = int(np.argmax(bad)) if bad.any() else 0
        return not bad.any(), float(bad.any()), np.unravel_index(k, a.shape)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan = np.isnan(a64) != np.isnan(b64)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.nanmax(np.abs(a64)) if np.isfinite(a64).any() else 0.0
        allowed = tol * (np.abs(a64) + scale) + np.finfo(np.float64).tiny
        ratio = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64) / allowed)
        ratio = np.where(nan | (np.isinf(a64) != np.isinf(b64)) | (np.isinf(a64) & (a64 != b64)), np.inf, ratio)
        ratio = np.where(np.isinf(a64) & (a64 == b64), 0.0, ratio)
    k = int(np.nanargmax(ratio))
    worst = float(ratio.reshape(-1)[k])
    return worst <= 1.0, worst, np.unravel_index(k, a.shape)


def ancestors(graph: Graph, value: str) -> list[str]:
    """The nodes `value` depends on, inputs first, as 'name = op(inputs)  # type'."""
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        node = graph.producer(v)
        if node is not None and node.name not in seen:
            seen.add(node.name)
            stack.extend(i for i in node.inputs if i)
    return [f"{', '.join(n.outputs)} = {n.op_name}({', '.join(n.inputs)})  # "
            f"{', '.join(str(graph.types[o]) for o in n.outputs)}" for n in graph.nodes if n.name in seen]


def _permuted(inputs: dict, seed: int) -> dict:
    """Another draw from given inputs: each input's elements shuffled, so every value (an
    index, a mask bit) is still one the caller gave."""
    rng = np.random.default_rng(seed)
    return {k: rng.permutation(np.asarray(v).reshape(-1)).reshape(np.shape(v)) for k, v in inputs.items()}


def draws(g1: Graph, inputs=None, *, trials: int = 2, seed: int = 0) -> list[dict]:
    """The input draws `equivalent(g1, ..., inputs, trials=trials, seed=seed)` runs on, in order."""
    if inputs is not None:
        return [inputs, _permuted(inputs, seed + 1)]
    return [random_inputs(g1, seed + k) for k in range(max(trials, 2))]


class ReferenceRuns:
    """The reference program's runs, kept by draw: each draw runs once, whichever comparison
    asks for it first (`prepare` runs them ahead of time and says how long one took). A run
    keeps the reference's outputs and the values feeding their last computing ops, which is
    all a comparison reads; the first shared value that differs, for the error message of a
    failed one, comes from a fresh run."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.keep = tuple(dict.fromkeys(i for o in graph.outputs if (n := last_computing_node(graph, o)) is not None
                                        for i in n.inputs if i and graph.producer(i) is not None))
        self.seconds: list[float] = []  # the time of each run taken
        self._runs: dict[tuple, dict[str, np.ndarray]] = {}

    @staticmethod
    def _key(draw: dict) -> tuple:
        return tuple((name, content_key(draw[name])) for name in sorted(draw))

    def run(self, draw: dict, keep: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """The reference's values on `draw`: its outputs, the kept values and `keep`."""
        key = self._key(draw)
        hit = self._runs.get(key)
        if hit is not None and all(k in hit for k in keep):
            return hit
        t0 = time.perf_counter()
        values = run(self.graph, draw, keep=tuple(dict.fromkeys((*self.keep, *keep))))
        self.seconds.append(time.perf_counter() - t0)
        self._runs[key] = values
        return values

    def prepare(self, inputs: list[dict]) -> None:
        """Run the reference on each of `inputs` now. A draw it cannot run on is left for the
        comparison, which reports it (or, for shuffled examples, leaves it out) as it would."""
        for draw in inputs:
            try:
                self.run(draw)
            except Exception:  # noqa: BLE001 - the comparison meets the same error and handles it
                continue

    @property
    def typical_seconds(self) -> float:
        """The median time of one run taken so far (0 before any)."""
        return float(np.median(self.seconds)) if self.seconds else 0.0


def equivalent(g1: Graph, g2: Graph, inputs=None, *, trials: int = 2, seed: int = 0,
               tol: float | None = None, reference: ReferenceRuns | None = None) -> NumericReport:
    """Do `g1` (the reference) and `g2` compute the same outputs on random inputs?

    Both programs run on `trials` random draws and are compared on each; the reference also
    runs on a second draw when `trials` is 1, to see whether its outputs vary. `inputs` fixes
    the first draw instead, and a shuffle of their elements is the second (compared too when
    `trials` >= 2; if a program cannot run on it, it is left out and the outputs' variation
    stays unknown). Outputs are paired by position. The report is truthy when all agree; its
    `status` says whether the comparison could have failed. `reference`: the runs of `g1`,
    kept (and reused) there.
    """
    pairs = check_pair(g1, g2)
    if reference is not None and reference.graph is not g1:
        raise ValueError(f"the reference runs are of {reference.graph.name!r}, not of {g1.name!r}")
    shared = [n for n in g2.types if n in g1.types and g1.producer(n) is not None
              and g2.producer(n) is not None and g1.types[n] == g2.types[n]]
    feeds = {a: feeding_orders(g1, g2, a, b) for a, b in pairs}  # each way to pair them
    fed = list(dict.fromkeys(p for options in feeds.values() for fp in options for p in fp))
    keep1 = tuple(dict.fromkeys([*shared, *(f for f, _ in fed)]))
    keep2 = tuple(dict.fromkeys([*shared, *(f for _, f in fed)]))
    tols: dict[np.dtype, float] = {}

    def tol_of(name: str) -> float:
        dtype = np.dtype(g1.types[name].dtype)
        if dtype not in tols:
            tols[dtype] = tol if tol is not None else tolerance(g1, g2, dtype)
        return tols[dtype]

    first: dict[str, tuple[int, np.ndarray]] = {}  # a value on the first draw it was seen
    worst: dict[tuple[str, str], OutputReport] = {}  # by (reference value, candidate value)
    variation: dict[str, float] = {}

    def observe(a: str, value: np.ndarray, k: int) -> None:
        if a not in first:
            first[a] = (k, value)
        elif first[a][0] != k:
            variation[a] = min(variation.get(a, 1.0), varying(first[a][1], value, tol_of(a)))

    def compare(a: str, b: str, r1, r2, k: int) -> OutputReport:
        ok, err, idx = _compare(r1[a], r2[b], tol_of(a))
        e = r1[a][idx] if r1[a].size else np.nan
        gv = r2[b][idx] if r2[b].size else np.nan
        out = OutputReport(a, ok, err, tuple(int(i) for i in idx), float(e), float(gv))
        observe(a, r1[a], k)
        w = worst.get((a, b))
        if w is None or not ok or (w.ok and err > w.error):
            worst[a, b] = out
        return out

    def run1(draw: dict) -> dict:
        if reference is None:
            return run(g1, draw, keep=keep1)
        return reference.run(draw, tuple(f for f, _ in fed))

    used, t_used = 0, max((tol_of(a) for a, _ in pairs), default=0.0)
    r1 = r2 = {}
    last = None
    for k, draw in enumerate(draws(g1, inputs, trials=trials, seed=seed)):
        try:
            s1 = run1(draw)
            s2 = run(g2, draw, keep=keep2) if k < trials else None
        except Exception:
            if k == 0 or inputs is None:
                raise
            break  # the shuffled examples are not valid inputs: the variation stays unknown
        if s2 is None:  # a draw only to see the reference's outputs vary
            for a, _ in pairs:
                observe(a, s1[a], k)
            for fa, _ in fed:
                observe(fa, s1[fa], k)
            continue
        r1, r2, used, last = s1, s2, used + 1, draw
        outputs_ok = True
        for a, b in pairs:
            outputs_ok &= compare(a, b, r1, r2, k).ok
        for fa, fb in fed:
            compare(fa, fb, r1, r2, k)
        if not outputs_ok:
            break
    report = _report(pairs, feeds, worst, variation, t_used, used)
    fixed1, fixed2 = of_weights(g1), of_weights(g2)
    for (a, b), o in zip(pairs, report.outputs):
        o.of_weights = a in fixed1 and b in fixed2
    if not report.equivalent:
        if reference is not None:  # kept runs hold what the comparison reads; the explanation reads more
            r1 = run(g1, last, keep=keep1)
        _explain(report, g1, g2, pairs, r1, r2, tol_of)
    return report


def of_weights(graph: Graph) -> set[str]:
    """The values of `graph` that no input reaches: computed from its weights alone (or weights)."""
    reached = set(graph.inputs)
    for node in graph.nodes:
        if any(i in reached for i in node.inputs if i):
            reached.update(node.outputs)
    return set(graph.types) - reached


def _report(pairs, feeds, worst, variation, t_used, used) -> NumericReport:
    """Each output's worst comparison, with the values feeding its last op where it does not
    vary (paired in whichever order of a commutative op's operands they agree). Only an output
    that differs fails. Values feeding an agreeing output that differ prove nothing either way:
    the programs may compute them otherwise and agree wherever it matters (relu(relu(z)) and
    relu(z) with z <= 0 on every draw feed the last relu 0 and z; x - x is 0 whatever x is), or
    differ where a saturated op does not hide it. That output is inconclusive
    (`OutputReport.feeding_differs`), and `einsat.optimize` keeps the input program then."""
    outs = []
    for a, b in pairs:
        o = worst[a, b]
        o.varying = variation.get(a)
        if not informative(o.varying) and feeds[a]:
            options = [[worst[p] for p in fp] for fp in feeds[a]]
            chosen = next((fs for fs in options if all(f.ok for f in fs)), options[0])
            for f in chosen:
                f.varying = variation.get(f.name)
            o.feeding = chosen
        outs.append(o)
    return NumericReport(all(o.ok for o in outs), outs, t_used, draws=used)


def _explain(report: NumericReport, g1: Graph, g2: Graph, pairs, r1, r2, tol_of) -> None:
    """The nodes behind the first differing output, and the first shared value that differs."""
    bad = next(o for o in report.outputs if not o.ok)
    report.chain = ancestors(g2, dict(pairs)[bad.name])
    for n in g2.nodes:
        for o in n.outputs:
            if o in r1 and o in r2 and o not in g2.outputs and not _compare(r1[o], r2[o], tol_of(o))[0]:
                report.first_divergence = f"{o} (node {n.name!r}, {n.op_name})"
                return
