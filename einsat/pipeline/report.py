"""The report `einsat.optimize` returns: what changed, what was searched, what was checked.

`str(report)` is the summary the CLI prints; every figure is also a field, and the report is
plain data: `dataclasses.asdict(report)`, `report.to_dict()` and `report.to_json()` keep it
(the saturation's phases and per-rule statistics go in whole, whatever fields they carry).
In a notebook the report draws itself (`_repr_html_`: tables, the e-graph's growth, per-op cost
bars, time per phase; see `einsat.viz`).

Every cost is a program's modeled cost in `unit`: `cost_before` is the input's, `cost_after`
the result's, and the extraction's `starts` are the programs each start would rebuild (with
weight-only subprograms computed once at compile time, which is why the input's start may
cost less than the input).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the extractor (and HiGHS behind it) loads only when optimize runs
    from einsat.extract.extraction import ExtractionSummary


TIME_UNITS = {"µs": 1e3, "us": 1e3, "ms": 1.0, "s": 1e-3}  # a cost unit that is a time: per millisecond


@dataclass
class Verification:
    """The numeric check of the optimized program against the input (see `verify_equivalent`).

    `status` is "proved" (every output agreed and varied between the input draws, itself or
    through the values feeding its last op), "identical" (the result is the input program op for
    op, wired alike, with equal weights: nothing to run; `optimize.identical_program`) or
    "inconclusive" (every output agreed, but some could not have failed: constant or saturated;
    `notes` says which and why). A failed check is a `VerificationError`, never a report."""

    trials: int
    max_error: float      # the worst |optimized - input| / (|input| + max|input|); passes <= tolerance
    tolerance: float      # the relative tolerance
    output: str           # the output where `max_error` was found
    method: str = "einsat.verify.numeric.equivalent on random inputs (NumPy)"
    status: str = "proved"
    notes: list[str] = field(default_factory=list)             # why inconclusive, one line per output
    varying: dict[str, float | None] = field(default_factory=dict)  # per output: fraction of elements that varied
    feeding: dict[str, list[str]] = field(default_factory=dict)     # outputs checked through the values feeding them
    feeding_differs: list[str] = field(default_factory=list)  # outputs that agree where the values feeding them do not

    @property
    def proved(self) -> bool:
        return self.status in ("proved", "identical")

    def __str__(self) -> str:
        if self.status == "identical":
            return "identical: the result is the input program, op for op with equal weights (nothing to run)"
        error = (f"worst relative error {self.max_error:.2g} (output {self.output!r}, "
                 f"tolerance {self.tolerance:.2g})")
        if not self.proved:
            return (f"INCONCLUSIVE: the outputs agree on {self.trials} input set(s), {error}, but the "
                    "comparison could not have failed: " + "; ".join(self.notes))
        known = {k: v for k, v in self.varying.items() if v is not None}
        least = min(known, key=known.get) if known else None
        varies = f", outputs vary (least: {least!r} in {known[least]:.0%} of elements)" if least else ""
        behind = "".join(f", {k!r} checked through {', '.join(map(repr, v))}" for k, v in self.feeding.items())
        return f"proved: {self.trials} input set(s) compared{varies}{behind}, {error}"


@dataclass
class SaturationSummary:
    """The e-graph search: size, why it stopped, its phases and the rules that matched."""

    enodes: int
    eclasses: int
    stop_reason: str
    iterations: int | None = None
    seconds: float | None = None
    node_limit: int | None = None
    egglog_nodes: int | None = None   # the session's count (list cells and Get included), what the limit bounds
    rule_matches: dict[str, int] = field(default_factory=dict)
    stop_text: str = ""               # the stop reason in words, with the limit that stopped it
    phases: list[dict[str, Any]] = field(default_factory=list)       # one per phase run, in order
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)   # per rule: matches, time_s, ...
    rounds: list[dict] = field(default_factory=list)  # generator rounds: step, generator, counts, seconds

    @staticmethod
    def of(report, data, limits) -> SaturationSummary:
        """From a session's `SaturationReport`, the exported e-graph and the session's limits."""
        return SaturationSummary(enodes=data.num_nodes(), eclasses=len(data.classes),
                                 stop_reason=report.stop_reason.value, iterations=report.iterations,
                                 seconds=report.time_s, node_limit=report.node_limit,
                                 egglog_nodes=report.nodes,
                                 rule_matches={k: v.matches for k, v in report.rules.items()},
                                 stop_text=report.stop_text(limits),
                                 phases=[dataclasses.asdict(p) for p in report.phases],
                                 rules={k: dataclasses.asdict(v) for k, v in report.rules.items()},
                                 rounds=[{"step": r.step, "generator": r.generator, "counts": dict(r.counts),
                                          "seconds": r.time_s} for r in report.rounds])

    def busiest(self, n: int = 5) -> list[tuple[str, int]]:
        """The `n` rules with the most matches; rules that never matched are left out."""
        matched = [(k, v) for k, v in self.rule_matches.items() if v > 0]
        return sorted(matched, key=lambda kv: (-kv[1], kv[0]))[:n]

    def round_lines(self) -> list[str]:
        """One line per generator round that found something to work on (a round whose counts
        are all zero is left out, as rules that never matched are; `rounds` keeps every one)."""
        return [f"{r['generator']} step {r['step'] + 1}: "
                + ", ".join(f"{v} {k}" for k, v in r["counts"].items()) + f" ({r['seconds']:.2f} s)"
                for r in self.rounds if any(r["counts"].values())]

    def __str__(self) -> str:
        text = f"{self.enodes:,} e-nodes in {self.eclasses:,} e-classes"
        if self.iterations is not None:
            text += f" after {self.iterations} rewrite step(s)"
        return text + f"; stopped: {self.stop_text or self.stop_reason}"


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
    extraction: ExtractionSummary
    verification: Verification | None
    times: dict[str, float]
    cost_by_op_before: dict[str, float] = field(default_factory=dict)
    cost_by_op_after: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False  # the run was cancelled (Ctrl-C, memory limit): the best program found so far
    stop: str | None = None    # why it was cancelled: "interrupted" (Ctrl-C), "memory limit"
    memory: dict[str, Any] = field(default_factory=dict)  # `einsat.pipeline.memory.MemoryWatch.summary()`: bytes
    # a model that measures its target (cost="cpu"): how its figures were profiled (`measure.ProfileSummary`),
    # the input and the result timed side by side (`runtime.profiler.Comparison.to_dict`), and why
    # the input was returned instead of the result (None: the result was returned)
    profile: dict[str, Any] | None = None
    measured: dict[str, Any] | None = None
    kept_input: str | None = None
    partition: Any = None      # a partitioned run's `einsat.partition.PartitionSummary`: pieces, cuts, reuse
    model_label: str = ""      # the cost model in a few words (`CostModel.label`): what the cost labels name
    # a run at a half precision: the returned program against the fp32 input, output by output
    # (`einsat.verify.precision.PrecisionReport`: error distribution, bound)
    precision: Any = None
    # a run at a half precision: the modeled cost of the user's fp32 input, before its conversion (the
    # table's "input" is the converted program), or None
    cost_fp32: float | None = None
    # a symbolic program (issue #40, `einsat.pipeline.symbolic`): the probe sizes it was optimized at (the
    # table's costs are there), and per size {"sizes", "named", "cost_before", "cost_after", "verification"
    # or "error"}: the sizes the user named (or the defaults) and those it was also verified at
    probe: dict[str, int] | None = None
    sizes: list[dict[str, Any]] | None = None
    costed_over_sizes: bool = False  # the table's costs are sums over the named sizes (else at the probe)
    # cost "cpu" on an ONNX file: einsat's writing timed against the file as given (`einsat.pipeline.given`):
    # {"compared": False, "why"} or {"compared": True, "kept", "file", "per_size": [{"sizes", "speedup",
    # "given_faster", "comparison"}], "seconds"}; None when not compared
    given: dict[str, Any] | None = None
    # cost "cpu" (issue #37): the e-graph extracted again under the default modeled cost model, a second
    # candidate beside the measured choice (`einsat.pipeline.phases.Alternative.to_dict`): "model", "status",
    # "why", "returned" ("alternative", "measured choice" or "input"), "modeled" (costs of the input, the
    # choice and the alternative under both models), "verification", "verdict" (its side-by-side comparison
    # with the input), "kept_input", "choice" (the measured choice's comparison), "ops"; None: not extracted
    alternative: dict[str, Any] | None = None
    # cost "cpu", unpartitioned: the whole program optimized again under the default modeled cost model (the
    # program `einsat.optimize` returns without `cost=`), a third candidate timed after the two above, its record
    # as `alternative`'s ("returned" "modeled run" where it is returned; a partitioned run's `alternative` is
    # this run of its whole); None: not tried
    modeled_run: dict[str, Any] | None = None

    @property
    def speedup(self) -> float:
        """Modeled cost before / after (1.0: no change)."""
        return self.cost_before / self.cost_after if self.cost_after > 0 else float("inf")

    @property
    def reduction(self) -> float:
        """The fraction of the modeled cost removed."""
        return 1 - self.cost_after / self.cost_before if self.cost_before > 0 else 0.0

    @property
    def measured_speedup(self) -> float | None:
        """The input's measured time over the returned program's (1.0 when the input is returned),
        None when nothing was measured."""
        if self.measured is None:
            return 1.0 if self.kept_input else None
        return 1.0 if self.kept_input else self.measured["speedup"]

    @property
    def verified(self) -> bool:
        """The result was checked and agreed (see `proved` for whether that check could have failed)."""
        return self.verification is not None

    @property
    def proved(self) -> bool:
        """The check agreed on outputs that vary with the inputs: it could have failed."""
        return self.verification is not None and self.verification.proved

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: its fields, and speedup, reduction and verified."""
        out = dataclasses.asdict(self)
        out.update(speedup=self.speedup, reduction=self.reduction, verified=self.verified, proved=self.proved,
                   measured_speedup=self.measured_speedup)
        return _finite(out)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def table(self) -> list[tuple[str, str, str]]:
        nodes = (str(sum(self.ops_before.values())), str(sum(self.ops_after.values())))
        # the second column is the program returned: the input itself when it was kept (`kept_input`)
        first = "input" if self.cost_fp32 is None else "input (converted)"
        return [("", first, "returned (the input)" if self.kept_input else "optimized"),
                (f"modeled cost ({self.model_label or self.model}, {self.unit})", f"{self.cost_before:,.2f}",
                 f"{self.cost_after:,.2f}"),
                ("nodes", *nodes)] + \
               [(f"  {op}", str(self.ops_before.get(op, 0)), str(self.ops_after.get(op, 0)))
                for op in sorted(set(self.ops_before) | set(self.ops_after),
                                 key=lambda o: (-max(self.ops_before.get(o, 0), self.ops_after.get(o, 0)), o))
                if self.ops_before.get(op, 0) != self.ops_after.get(op, 0)]

    def memory_text(self) -> str:
        m, gb = self.memory, 2**30
        limit = "unbounded" if m.get("limit_bytes") is None else f"limit {m['limit_bytes'] / gb:.3g} GB"
        text = f"peak {m['peak_bytes'] / gb:.2f} GB resident, {m['added_bytes'] / gb:.2f} GB added by the run ({limit})"
        return text + ("; LIMIT REACHED: the search stopped early" if m.get("exceeded") else "")

    def clock_ended(self) -> list[str]:
        """The search phases a clock ended ("saturation", "extraction"): a time limit or the budget,
        not their work bounds (issue #39: the defaults end by work, the clocks are safety nets)."""
        ended = []
        if self.saturation is not None and "time limit" in str(self.saturation.stop_reason):
            ended.append("saturation")
        if self.extraction is not None and "time limit" in str(getattr(self.extraction, "status", "")):
            ended.append("extraction")
        return ended

    def extraction_text(self) -> str:
        x = self.extraction
        gap = "" if x.gap is None else f", gap {x.gap:.1%}"
        starts = ", ".join(f"{k} {v:,.2f}" + (" (weight-only ops precomputed)" if k == "input" and
                                               v < self.cost_before - 1e-9 * abs(self.cost_before) else "")
                           for k, v in x.starts.items())
        # a partitioned run's starts are its pieces' (each piece's report): none for the whole program
        starts = f"; starts ({self.unit}): {starts}" if starts else ""
        return f"{x.method}, {x.status}{gap}; {x.candidates:,} candidates in {x.classes:,} e-classes{starts}"

    def __str__(self) -> str:
        rows = self.table()
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        w2 = max(len(r[2]) for r in rows)
        lines = [f"einsat optimize: {self.name}" + (f"  ({self.stop or 'interrupted'}: the best program found "
                                                    "so far)" if self.interrupted else "")]
        lines += [f"  {a:<{w0}}  {b:>{w1}}  {c:>{w2}}" for a, b, c in rows]
        lines.append(f"  speedup (modeled): {self.speedup:.3f}x  ({self.reduction:+.1%} cost removed)")
        lines += self.size_lines()
        lines += self.fp32_lines()
        lines += self.measured_lines()
        if self.saturation is not None:
            lines.append(f"  e-graph: {self.saturation}")
            top = self.saturation.busiest()
            lines.append("  busiest rules: " + (", ".join(f"{k} ({v:,})" for k, v in top) if top
                                                else "none matched"))
            lines += [f"  {line}" for line in self.saturation.round_lines()]
        lines.append(f"  extraction: {self.extraction_text()}")
        clocks = self.clock_ended()
        if clocks:
            lines.append(f"  clock: {' and '.join(clocks)} ended on a clock, not by work: on another machine or load "
                         "the run may stop elsewhere and return another program")
        if self.verification is None:
            lines.append("  verification: NOT RUN (verify=False): the result is unchecked")
        else:
            lines.append(f"  verification: {self.verification}")
        if self.precision is not None:
            lines += [f"  precision: {line}" for line in str(self.precision).splitlines()]
        if self.partition is not None:
            lines += ["  partition: " + "\n  ".join(str(self.partition).splitlines())]
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items()))
        if self.memory:
            lines.append(f"  memory: {self.memory_text()}")
        return "\n".join(lines)

    def size_lines(self) -> list[str]:
        """A symbolic program: the probe sizes the table's costs are at, and the costs and checks per size."""
        if self.probe is None:
            return []
        at = ", ".join(f"{k} = {v}" for k, v in self.probe.items())
        costs = "the costs above: summed over the named sizes" if self.costed_over_sizes else "the costs above"
        lines = [f"  symbolic: optimized once at the probe sizes {at} ({costs}), for every size:"]
        for r in self.sizes or []:
            at = ", ".join(f"{k} {v}" for k, v in r["sizes"].items())
            if "error" in r:
                lines.append(f"    at {at}: the input does not run there ({r['error']})")
                continue
            text = f"    at {at}: "
            if "cost_before" in r:
                b, a = r["cost_before"], r["cost_after"]
                text += f"{b:,.2f} -> {a:,.2f} {self.unit}, speedup (modeled) {b / a if a > 0 else float('inf'):.3f}x"
            else:
                text = f"    at {at} (drawn beside them): "
            if r.get("measured_speedup"):
                text += f"; measured {r['measured_speedup']:.3f}x"
            if "verification" in r:
                text += f"{'; ' if 'cost_before' in r else ''}verified: {r['verification']}"
            lines.append(text)
        return lines

    def fp32_lines(self) -> list[str]:
        """A half-precision run against the user's fp32 program: the table compares the converted one."""
        if self.cost_fp32 is None or self.cost_after <= 0:
            return []
        ratio = self.cost_fp32 / self.cost_after
        line = (f"  against the fp32 input ({self.cost_fp32:,.2f} {self.unit}; the table's input is its "
                f"conversion): speedup (modeled) {ratio:.3f}x")
        if ratio < 1:
            line += ": the half-precision program is modeled SLOWER than the fp32 one"
        return [line]

    def alternative_lines(self) -> list[str]:
        """The modeled alternative (issue #37) and an unpartitioned run's modeled run: what each
        was, its verdict beside the one it was weighed against, and which candidate was returned."""
        return [line for a in (self.alternative, self.modeled_run) if a is not None for line in candidate_lines(a)]

    def measured_lines(self) -> list[str]:
        """The profile and the side-by-side measurement, for a model that measures its target."""
        lines = []
        if self.profile is not None:
            p = self.profile
            pieces = f" over {p['pieces']} piece{'s' if p['pieces'] > 1 else ''}" if p.get("pieces") else ""
            text = (f"  profile: {p['needed']} signatures on {p['target']}{threads_text(p.get('threads'))}{pieces}: "
                    f"{p['cached']} from the cache, {p['measured']} measured now in {p['seconds']:.1f} s")
            text += f", {p['failed']} failed" if p["failed"] else ""
            text += f", {p['left']} left to the calibrated roofline" if p["left"] else ""
            lines.append(text + f" ({p['path']})")
        if self.measured is not None:
            # one unit in one report: the measured times in the costs' unit (when it is a time), and
            # the modeled costs beside them are the table's (the input's) and the extracted program's
            m = self.measured
            scale = TIME_UNITS.get(self.unit)
            unit, digits = (self.unit, 1) if scale else ("ms", 3)
            ms = (lambda v: f"{v * scale:,.{digits}f}") if scale else (lambda v: f"{v:,.{digits}f}")  # noqa: E731
            (b0, b1), (c0, c1) = m["baseline_spread_ms"], m["candidate_spread_ms"]
            p0, p1 = [v * 1e3 for v in m["predicted_ms"]] if m.get("predicted_ms") else (self.cost_before,
                                                                                         self.cost_after)
            lines.append(f"  measured on {m['backend']}{threads_text(m.get('threads'))}: "
                         f"input {ms(m['baseline_ms'])} {unit} [p10 {ms(b0)}, "
                         f"p90 {ms(b1)}], optimized {ms(m['candidate_ms'])} {unit} [p10 {ms(c0)}, p90 {ms(c1)}]: "
                         f"{m['speedup']:.3f}x measured (faster in {m['wins']}/{m['rounds']} interleaved rounds); "
                         f"modeled: input {p0:,.2f} -> extracted {p1:,.2f} {self.unit} "
                         f"({p0 / p1 if p1 else float('inf'):.3f}x)"
                         + other_threads_text(m)
                         + (f"; verdict kept from {m['measured_at']} (--recheck measures again)"
                            if m.get("measured_at") else ""))
        lines += self.alternative_lines()
        if self.kept_input:
            lines.append(f"  returned: the INPUT program ({self.kept_input})")
        from einsat.pipeline.given import given_lines
        lines.extend(given_lines(self, other_threads_text))
        return lines

    def _repr_html_(self) -> str:
        from einsat.viz.report import report_html
        return report_html(self, standalone=False)


def other_threads_text(m: dict) -> str:
    """"; at 1 intra-op thread: 0.990x, not slower (7/15 rounds)" for each other thread count a
    measured result was timed at (`Measure(not_slower_at=)`), "" for none."""
    return "".join(f";{threads_text(o['threads'])}: {o['speedup']:.3f}x, "
                   f"{'SLOWER' if o['slower'] else 'not slower'} ({o['wins']}/{o['rounds']} rounds)"
                   for o in m.get("other_threads") or ())


def threads_text(threads) -> str:
    """" at N intra-op thread(s)" for a CPU measurement (`Measure(threads=)`), "" for none."""
    return f" at {threads} intra-op thread{'' if threads == 1 else 's'}" if threads else ""


def _finite(value):
    """JSON has no inf or NaN: they become None; tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def candidate_lines(a: dict) -> list[str]:
    """One modeled candidate's record (`Report.alternative`, `Report.modeled_run`) as the report's line."""
    kind = a.get("kind", "alternative")
    before = "measured choice" if kind == "alternative" else "before it"  # the verdict it was weighed against
    cost = (a.get("modeled") or {}).get("modeled")
    modeled = (f"; modeled ({cost['model']}, {cost['unit']}): input {cost['input']:,.2f}, {before} "
               f"{cost['choice']:,.2f}, {kind} {cost['alternative']:,.2f}" if cost else "")
    if a["status"] != "compared":
        return [f"  {kind} ({a['model']} cost model): {a['status']}: {a['why']}{modeled}"]

    def verdict(v):
        if v is None:
            return "not timed"
        faster = "faster" if v["faster"] else "not faster"
        return f"{v['speedup']:.3f}x, {faster} ({v['wins']}/{v['rounds']} rounds){other_threads_text(v)}"
    return [f"  {kind} ({a['model']} cost model): measured {verdict(a['verdict'])}; {before} "
            f"{verdict(a['choice'])}; returned: the {a['returned'].upper()}{modeled}"]
