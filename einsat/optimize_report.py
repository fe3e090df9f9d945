"""The report `einsat.optimize` returns: what changed, what was searched, what was checked.

`str(report)` is the summary the CLI prints; every figure is also a field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verification:
    """The numeric check of the optimized program against the input (see `verify_equivalent`)."""

    trials: int
    max_error: float      # the worst |optimized - input| / (|input| + max|input|); passes <= tolerance
    tolerance: float      # the relative tolerance
    output: str           # the output where `max_error` was found
    method: str = "einsat.verify.numeric.equivalent on random inputs (NumPy)"

    def __str__(self) -> str:
        return (f"passed: {self.trials} random input set(s), worst relative error {self.max_error:.2g} "
                f"(output {self.output!r}, tolerance {self.tolerance:.2g})")


@dataclass
class SaturationSummary:
    """The e-graph search: size, why it stopped, and the busiest rules."""

    enodes: int
    eclasses: int
    stop_reason: str
    iterations: int | None = None
    seconds: float | None = None
    node_limit: int | None = None
    egglog_nodes: int | None = None   # egglog's rows (list cells and Get included), what the limit bounds
    rule_matches: dict[str, int] = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)  # generator rounds: step, generator, counts, seconds

    @staticmethod
    def of(report, data) -> SaturationSummary:
        """From a session's `SaturationReport` and the exported e-graph."""
        return SaturationSummary(enodes=data.num_nodes(), eclasses=len(data.classes),
                                 stop_reason=report.stop_reason.value, iterations=report.iterations,
                                 seconds=report.time_s, node_limit=report.node_limit,
                                 egglog_nodes=report.nodes,
                                 rule_matches={k: v.matches for k, v in report.rules.items()},
                                 rounds=[{"step": r.step, "generator": r.generator, "counts": dict(r.counts),
                                          "seconds": r.time_s} for r in report.rounds])

    def round_lines(self) -> list[str]:
        """One line per generator round that reported counts."""
        return [f"{r['generator']} step {r['step'] + 1}: "
                + ", ".join(f"{v} {k}" for k, v in r["counts"].items()) + f" ({r['seconds']:.2f} s)"
                for r in self.rounds]

    def __str__(self) -> str:
        text = f"{self.enodes:,} e-nodes in {self.eclasses:,} e-classes, stopped: {self.stop_reason}"
        if self.iterations is not None:
            text += f" after {self.iterations} iteration(s)"
        if self.node_limit is not None and self.egglog_nodes is not None:
            text += f" ({self.egglog_nodes:,} of {self.node_limit:,} egglog rows)"
        return text


@dataclass
class Report:
    """Everything `optimize` measured. Costs are modeled by `model`, in `unit`."""

    name: str
    model: str
    unit: str
    cost_before: float
    cost_after: float
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    saturation: SaturationSummary | None
    extraction: Any  # einsat.extract.Extraction
    verification: Verification | None
    times: dict[str, float]

    @property
    def speedup(self) -> float:
        """Modeled cost before / after (1.0: no change)."""
        return self.cost_before / self.cost_after if self.cost_after > 0 else float("inf")

    @property
    def reduction(self) -> float:
        """The fraction of the modeled cost removed."""
        return 1 - self.cost_after / self.cost_before if self.cost_before > 0 else 0.0

    @property
    def verified(self) -> bool:
        return self.verification is not None

    def table(self) -> list[tuple[str, str, str]]:
        nodes = (str(sum(self.ops_before.values())), str(sum(self.ops_after.values())))
        return [("", "input", "optimized"),
                (f"modeled cost ({self.model}, {self.unit})", f"{self.cost_before:,.2f}",
                 f"{self.cost_after:,.2f}"),
                ("nodes", *nodes)] + \
               [(f"  {op}", str(self.ops_before.get(op, 0)), str(self.ops_after.get(op, 0)))
                for op in sorted(set(self.ops_before) | set(self.ops_after),
                                 key=lambda o: (-max(self.ops_before.get(o, 0), self.ops_after.get(o, 0)), o))
                if self.ops_before.get(op, 0) != self.ops_after.get(op, 0)]

    def __str__(self) -> str:
        rows = self.table()
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        w2 = max(len(r[2]) for r in rows)
        lines = [f"einsat optimize: {self.name}"]
        lines += [f"  {a:<{w0}}  {b:>{w1}}  {c:>{w2}}" for a, b, c in rows]
        lines.append(f"  speedup (modeled): {self.speedup:.3f}x  ({self.reduction:+.1%} cost removed)")
        if self.saturation is not None:
            lines.append(f"  e-graph: {self.saturation}")
            top = sorted(self.saturation.rule_matches.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            if top:
                lines.append("  busiest rules: " + ", ".join(f"{k} ({v:,})" for k, v in top))
            lines += [f"  {line}" for line in self.saturation.round_lines()]
        x = self.extraction
        gap = "" if x.gap is None else f", gap {x.gap:.1%}"
        starts = ", ".join(f"{k} {v:,.2f}" for k, v in x.starts.items())
        lines.append(f"  extraction: {x.method}, {x.status}{gap}; {x.candidates:,} candidates in "
                     f"{x.classes:,} e-classes; starts: {starts}")
        if self.verification is None:
            lines.append("  verification: NOT RUN (verify=False): the result is unchecked")
        else:
            lines.append(f"  verification: {self.verification}")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items()))
        return "\n".join(lines)
