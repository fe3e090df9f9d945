"""Numeric equivalence: two programs on the same random inputs, within a derived tolerance.

    report = equivalent(g1, g2)          # truthy when every output agrees
    print(report)                        # the worst element, its values and the nodes behind it

Tolerance: for floats, |a − b| ≤ tol · (|b| + max|b|) with tol = eps(dtype) · 8 · (ops + √L), where
ops counts the nodes of both programs and L is the longest accumulation (a conv's C·k·k, a
matmul's K): rounding error grows with the number of rounded operations and as √L for sums
computed in different orders. Integers and booleans must be equal.

When the two programs share value names (an ONNX round trip, a renaming pass), the report also
names the first shared value whose values differ: where the transformation went wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil, sqrt

import numpy as np

from einsat.ir.graph import Graph
from einsat.runtime import random_inputs, run
from einsat.verify.corrector import check_pair


@dataclass
class OutputReport:
    name: str
    ok: bool
    error: float           # worst |a - b| / allowed (<= 1 passes)
    index: tuple[int, ...]
    expected: float
    got: float


@dataclass
class NumericReport:
    equivalent: bool
    outputs: list[OutputReport]
    tolerance: float
    chain: list[str] = field(default_factory=list)
    first_divergence: str | None = None

    def __bool__(self) -> bool:
        return self.equivalent

    def __str__(self) -> str:
        head = "equivalent" if self.equivalent else "NOT equivalent"
        lines = [f"{head} (tolerance {self.tolerance:.2e})"]
        for o in self.outputs:
            lines.append(f"  {o.name}: worst {list(o.index)} expected {o.expected:.6g} got {o.got:.6g} "
                         f"({o.error:.3g} x allowed){'' if o.ok else '  <-- differs'}")
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


def tolerance(g1: Graph, g2: Graph, dtype) -> float:
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    ops = len(g1.nodes) + len(g2.nodes)
    return float(np.finfo(dtype).eps) * 8 * (ops + sqrt(max(_accumulation(g1), _accumulation(g2))))


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


def equivalent(g1: Graph, g2: Graph, inputs=None, *, trials: int = 2, seed: int = 0,
               tol: float | None = None) -> NumericReport:
    """Do `g1` (the reference) and `g2` compute the same outputs on random inputs?

    `inputs` fixes the inputs (then `trials` is 1); otherwise `trials` random draws are tried.
    Outputs are paired by position. The report is truthy when all agree.
    """
    pairs = check_pair(g1, g2)
    draws = [inputs] if inputs is not None else [random_inputs(g1, seed + k) for k in range(trials)]
    shared = [n for n in g2.types if n in g1.types and g1.producer(n) is not None
              and g2.producer(n) is not None and g1.types[n] == g2.types[n]]
    report = None
    for draw in draws:
        r1 = run(g1, draw, keep=tuple(shared))
        r2 = run(g2, draw, keep=tuple(shared))
        outs, ok_all, t_used = [], True, 0.0
        for a, b in pairs:
            t = tol if tol is not None else tolerance(g1, g2, g1.types[a].dtype)
            t_used = max(t_used, t)
            ok, worst, idx = _compare(r1[a], r2[b], t)
            ok_all &= ok
            e = r1[a][idx] if r1[a].size else np.nan
            gv = r2[b][idx] if r2[b].size else np.nan
            outs.append(OutputReport(a, ok, worst, tuple(int(i) for i in idx), float(e), float(gv)))
        report = NumericReport(ok_all, outs, t_used)
        if not ok_all:
            bad = next((o for (a, b), o in zip(pairs, outs) if not o.ok))
            b_name = dict(pairs)[bad.name]
            report.chain = ancestors(g2, b_name)
            for n in g2.nodes:
                for o in n.outputs:
                    if o in r1 and o in r2 and o not in g2.outputs:
                        t = tol if tol is not None else tolerance(g1, g2, g1.types[o].dtype)
                        if not _compare(r1[o], r2[o], t)[0]:
                            report.first_divergence = f"{o} (node {n.name!r}, {n.op_name})"
                            break
                if report.first_divergence:
                    break
            return report
    return report
