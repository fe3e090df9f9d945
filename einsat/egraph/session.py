"""A saturation session: one egglog e-graph, programs in, bounded rewriting, plain data out.

    s = Session(Limits(nodes=20_000, time_s=5))
    s.add_graph(graph)                 # the program; its outputs are the export's roots
    report = s.run(default_schedule())
    data = s.export()                  # EGraphData for extraction

Limits. egglog has no node limit and cannot be interrupted, so the session steps the schedule
from Python: one *phase* is one egglog iteration of one ruleset (after the shape analysis is
saturated) or one generator round, and the limits are checked between phases:

- node limit: the e-graph never holds more than `Limits.nodes` e-nodes (unless the input program
  alone does). Each rule's actions create at most a known number of e-nodes per match (its
  *fan-out*, counted from its text), so a ruleset phase runs under a back-off scheduler whose
  match limit is the remaining budget over the ruleset's total fan-out: a rule matching more
  often than that applies no match at all this phase (egglog's back-off is all or nothing).
  Associativity and commutativity keep their back-off flavour: their match limit doubles each
  step, still under the budget. A generator's unions are applied in order while their terms
  fit the budget. When not even one match fits, the run stops with `NODE_LIMIT`;
- time limit: a phase does not start when its previous duration would cross `Limits.time_s`;
  the run may end late by one phase's time at most (plus the export that counts e-classes);
- iteration limit: at most `Limits.iterations` steps (a step runs every phase once);
- generators: each round is bounded by work (PET's mutation generator takes at most
  `Limits.subprograms` subprograms a round, `Limits.mutants` mutants of each and verifies
  `Limits.verifications` of them; EinNet's derivation `Limits.derive_states` states): the same
  input gives the same e-graph whatever the load. A round also has a deadline
  (`Session.deadline`: the time limit, the run's budget, and `Limits.generator_s` from its start
  when one is set) that only stops it early: the round's counts say "cut short" (and when the
  time limit or the budget ran out, the run stops with TIME_LIMIT at the next phase).

Generators that must tell a cheaper program from a costlier one read `Session.cost` (a cost
model: `node_cost(op, attrs, ins, outs)`), and those that work on the current best program read
`Session.best(data)` ({e-class: e-node}, e.g. a greedy extraction); `einsat.optimize` sets both
from its cost model. A generator round may report counts of its own (`Round`): they are kept
per round in the report (`SaturationReport.rounds`).

E-nodes are counted as egglog's constructor rows (tensor ops, leaves, list cells, `Get`),
analysis tables excluded. The same input, schedule and limits give the same e-graph and the
same export (one thread, deterministic ids), except for time-limited runs.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from egglog import bindings

from einsat.budget import Budget
from einsat.egraph import analysis, terms
from einsat.egraph.data import EGraphData
from einsat.egraph.encoding import CONSTRUCTORS_EXTRA, AttrRefs, declarations, signatures
from einsat.egraph.export import serialize_json, to_data
from einsat.egraph.handles import Handles
from einsat.egraph.rules import Generator, Round, Ruleset, Schedule, fanout, split_commands
from einsat.egraph.terms import Encoder, Ref, Term, graph_commands, var
from einsat.errors import EinsatError, GraphError
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType


class StopReason(enum.Enum):
    SATURATED = "saturated"
    NODE_LIMIT = "node limit"
    TIME_LIMIT = "time limit"
    ITERATION_LIMIT = "iteration limit"
    INTERRUPTED = "interrupted"   # the run's budget was cancelled (Ctrl-C) or its deadline passed
    MEMORY_LIMIT = "memory limit"  # the run's memory watch cancelled its budget (`einsat.pipeline.memory`)


STOP_REASONS = {  # in words, with the limit: what `SaturationReport.stop_text` says
    StopReason.SATURATED: "saturated: no rule adds anything new",
    StopReason.NODE_LIMIT: "node limit: {used:,} of {nodes:,} e-nodes (attribute lists and tuples counted), "
                           "the next rewrite step would not fit",
    StopReason.TIME_LIMIT: "time limit: the next rewrite step would pass {time_s:g} s",
    StopReason.ITERATION_LIMIT: "iteration limit: {iterations} rewrite steps done",
    StopReason.INTERRUPTED: "interrupted: stopped early, the e-graph so far is kept",
    StopReason.MEMORY_LIMIT: "memory limit: the run added more than {memory_gb:g} GB of resident memory; "
                             "stopped early, the e-graph so far is kept",
}


@dataclass(frozen=True)
class Limits:
    """The search's work: bounds on one `Session.run`, whether the export filters cycles, and how the
    e-graph is extracted (`einsat.optimize(limits=...)`: `extractor`, `extract_s`, `ilp_candidates`).

    The defaults end a run by work (issue #39: the same program on any machine and load): the node,
    round and generator bounds end saturation, and the ILP's own work bounds (`extract.ilp`) and its
    size bound `ilp_candidates` end extraction, sized on the speed benchmark
    (benchmarks/results/speed.md) so that its models optimize in seconds on two cores. The clocks
    (`time_s`, `extract_s`) are safety nets far above what that work takes; a run one of them
    ends says so (its stop reason "time limit"), and may return another program elsewhere."""

    nodes: int = 20_000
    iterations: int = 10
    time_s: float = 60.0  # a safety net: the node and round limits end saturation first
    acyclic: bool = True  # export: drop e-nodes that close a cycle (Tensat's cycle filtering)
    generator_s: float = float("inf")  # a deadline for one generator round (none: rounds are bounded by work)
    subprograms: int = 32     # PET: subprograms mutated per round
    mutants: int = 64         # PET: mutants tried per subprogram
    verifications: int = 16   # PET: mutants verified (admission proofs) per round
    derive_depth: int = 4  # EinNet's MaxDepth: explorative derivations per expression (rewrites.derive)
    derive_states: int = 600  # EinNet in the default schedule: no new search once a round derived this many states
    memory_gb: float | None = 4.0  # `einsat.optimize`: resident memory the run may add (None: unbounded)
    extractor: str = "ilp"  # `einsat.optimize`'s extraction: "ilp" (HiGHS, warm-started) or "greedy"
    extract_s: float = 60.0  # `einsat.optimize`: one ILP solve's most seconds (a safety net; a `budget` may give fewer)
    ilp_candidates: int = 3_000  # more candidate e-nodes: no ILP, the best start (greedy, local search) kept


@dataclass
class RuleStats:
    matches: int = 0
    time_s: float = 0.0


@dataclass(frozen=True)
class PhaseStats:
    step: int
    phase: str
    nodes: int          # e-nodes after the phase
    growth: int
    time_s: float
    changed: bool
    starved: bool = False  # rules went unapplied only because the node budget could not hold them


@dataclass(frozen=True)
class GeneratorRound:
    step: int
    generator: str
    counts: dict[str, int]  # what the round did, by the generator's own names
    time_s: float


@dataclass
class SaturationReport:
    stop_reason: StopReason
    iterations: int                 # steps started
    nodes: int                      # e-nodes at the end
    classes: int                    # tensor e-classes at the end
    time_s: float
    node_limit: int
    rules: dict[str, RuleStats] = field(default_factory=dict)
    phases: list[PhaseStats] = field(default_factory=list)
    rounds: list[GeneratorRound] = field(default_factory=list)

    def stop_text(self, limits: Limits) -> str:
        """Why the run stopped, in words, with the limit that stopped it."""
        return STOP_REASONS[self.stop_reason].format(nodes=limits.nodes, time_s=limits.time_s,
                                                     iterations=limits.iterations, used=self.nodes,
                                                     memory_gb=limits.memory_gb or 0)

    def summary(self) -> str:
        top = sorted(self.rules.items(), key=lambda kv: -kv[1].matches)[:8]
        rules = ", ".join(f"{k} {v.matches}" for k, v in top if v.matches)
        return (f"{self.stop_reason.value} after {self.iterations} steps, {self.time_s:.2f} s: "
                f"{self.nodes} e-nodes, {self.classes} e-classes; top rules: {rules or 'none'}")


Progress = Callable[[int, int, float], None]


class Session:
    def __init__(self, limits: Limits | None = None, cost=None,
                 best: Callable[[EGraphData], Mapping[int, object]] | None = None):
        self.limits = limits or Limits()
        self.cost = cost    # a cost model for generators (see the module doc), or None
        self.best = best    # export -> the current best program ({e-class: e-node}), or None
        self.deadline = float("inf")  # the end of the running generator round
        self.sources: list[Graph] = []  # the programs added as roots
        self.egraph = bindings.EGraph()
        self.sigs = signatures()
        self._by_name = {s.name: s for s in self.sigs.values()}
        self.refs = AttrRefs()
        self.encoder = Encoder(self.sigs, self.refs)
        self.weights: dict = {}
        self.input_types: dict[str, TensorType] = {}
        self.roots: list[str] = []           # let names of the export's roots
        self.output_names: list[str] = []
        self.let_names: dict[str, str] = {}  # let name -> source value name
        self._graphs = 0
        self._constructors = {s.name for s in self.sigs.values()} | set(CONSTRUCTORS_EXTRA)
        self._rulesets: dict[str, Ruleset] = {}
        self._fanout: dict[str, int] = {}   # ruleset -> e-nodes its rules may create per match, summed
        self._solo: dict[str, list[str]] = {}  # ruleset -> a one-rule ruleset per rule
        self._schedulers = 0
        self._export: EGraphData | None = None
        self._queue: list = []  # commands of generators' unions, run in one batch
        self._pending = False   # the queue holds unions (rows of the pending-union table)
        self.handles = Handles(self)
        self._program(declarations(self.sigs) + analysis.TABLES + f"(ruleset {analysis.RULESET})\n"
                      + terms.PENDING_DECLARATIONS)
        self._program(_in_ruleset(analysis.shape_rules(self.sigs), analysis.RULESET))

    # -- programs in --------------------------------------------------------------------------
    def add_graph(self, graph: Graph, root: bool = True) -> list[Ref]:
        """Insert `graph`; returns a `Ref` per output. With `root`, its outputs become export roots."""
        for n in graph.inputs:
            if self.input_types.setdefault(n, graph.types[n]) != graph.types[n]:
                raise GraphError(f"input {n!r} is {graph.types[n]} here, {self.input_types[n]} before")
        for n, a in graph.weights.items():
            old = self.weights.setdefault(n, a)
            if old is not a and (old.shape != a.shape or old.dtype != a.dtype or not (old == a).all()):
                raise GraphError(f"weight {n!r} differs from the weight of that name added before")
        cmds, lets = graph_commands(graph, self.encoder, f"g{self._graphs}", start=len(self.let_names))
        self._graphs += 1
        self._flush()
        self.egraph.run_program(*cmds)
        for value, name in lets.items():
            self.let_names.setdefault(name, value)
            self.handles.types[name] = graph.types[value]
        refs = [Ref(lets[o]) for o in graph.outputs]
        if root:
            self.roots += [r.name for r in refs]
            self.output_names += list(graph.outputs)
            self.sources.append(graph)
        self._changed()
        return refs

    def add(self, term: Term | Ref | int) -> Ref:
        """A new (or existing) term as a `Ref`; ints are e-class ids of the latest export."""
        return self.handles.ref(term)

    def union(self, a: Term | Ref | int, b: Term | Ref | int) -> None:
        """Assert that `a` and `b` are equal (fully equivalent: the invariant of the e-graph)."""
        ea, eb = self.handles.expr(a), self.handles.expr(b)
        self.emit(terms.pending_union(ea, eb))
        self._pending = True
        self._changed()

    def add_weight(self, array, hint: str = "w") -> Term:
        return self.handles.weight(array, hint)

    def add_subgraph(self, graph: Graph, inputs: Mapping[str, Term | Ref | int],
                     outputs: Sequence[Term | Ref | int] | None = None) -> list[Ref]:
        """Insert `graph` over existing e-classes; returns a `Ref` per output of `graph`.

        What generators use to put a whole program in (a PET corrected mutant, an EinNet
        instantiation): `inputs` binds every graph input to an e-class (an export id, a `Ref` or
        a `Term`) of the same type; the graph's weights enter as content-named weights (so equal
        arrays meet in one leaf). With `outputs` (one e-class per graph output, in order), each
        output is unioned with it: the caller asserts the subgraph computes those values
        exactly. Nothing becomes a root and nothing gets an `ord`: the values are not source
        program values. Like `union`, the commands are queued (and a generator's queue is cut
        to the node budget, whole commands at a time).
        """
        missing = [n for n in graph.inputs if n not in inputs]
        unknown = [n for n in inputs if n not in graph.inputs]
        if missing or unknown:
            raise GraphError(f"add_subgraph({graph.name!r}): inputs {missing} are not bound"
                             if missing else f"add_subgraph({graph.name!r}): {unknown} are not inputs of it")
        if outputs is not None and len(outputs) != len(graph.outputs):
            raise GraphError(f"add_subgraph({graph.name!r}): {len(outputs)} e-classes for "
                             f"{len(graph.outputs)} outputs")
        env: dict[str, Ref] = {}
        for name in graph.inputs:
            ref = self.add(inputs[name])
            have = self.handles.type_of(ref)
            if have != graph.types[name]:
                raise GraphError(f"add_subgraph({graph.name!r}): input {name!r} is {graph.types[name]}, "
                                 f"the e-class bound to it is {have}")
            env[name] = ref
        for name, array in graph.weights.items():
            env[name] = self.add(self.add_weight(array, hint=name.split("_")[0] or "w"))
        for node in graph.nodes:
            children = tuple(env[i] if i else None for i in node.inputs)
            for k, out in enumerate(node.outputs):
                env[out] = self.add(Term(node.op, children, node.attrs, output=k))
        refs = [env[o] for o in graph.outputs]
        for ref, target in zip(refs, outputs or ()):
            self.union(ref, target)
        self._changed()
        return refs

    def equivalent(self, a: Ref | Term | int, b: Ref | Term | int) -> bool:
        """Whether `a` and `b` are in one e-class now."""
        ea, eb = self.handles.expr(a), self.handles.expr(b)
        self._flush()
        try:
            # a failing check formats its span: a PanicSpan panics there (a pyo3 PanicException)
            span = bindings.RustSpan(__file__, 0, 0)
            self.egraph.run_program(bindings.Check(span, [bindings.Eq(span, ea, eb)]))
        except bindings.EggSmolError:
            return False
        return True

    # -- rewriting ----------------------------------------------------------------------------
    def run(self, schedule: Schedule, progress: Progress | None = None, budget: Budget | None = None
            ) -> SaturationReport:
        """Repeat `schedule`'s phases until saturation or a limit (the default rules are
        `einsat.rewrites.schedule.default_schedule()`: rewrites come after the e-graph). With a
        `budget` (the whole run's), a phase also does not start once it is exhausted or when its
        previous duration would exhaust it: INTERRUPTED when it was cancelled, else TIME_LIMIT.
        The time limit counts the rules' registration (a quarter of a second for the default rules)."""
        lim, t0 = self.limits, time.perf_counter()
        for phase in schedule.phases:
            if isinstance(phase, Ruleset):
                self._register(phase)
        report = SaturationReport(StopReason.ITERATION_LIMIT, 0, self.num_nodes(), 0, 0.0, lim.nodes)
        last: dict[str, PhaseStats] = {}
        stop = None
        for step in range(lim.iterations):
            report.iterations = step + 1
            changed = False
            for phase in schedule.phases:
                if not _due(phase, step):
                    continue
                nodes, elapsed = self.num_nodes(), time.perf_counter() - t0
                prev = last.get(phase.name)
                room = lim.nodes - nodes
                if budget is not None and budget.cancelled:
                    stop = StopReason.MEMORY_LIMIT if budget.reason == "memory limit" else StopReason.INTERRUPTED
                elif room < (self._fanout[phase.name] if isinstance(phase, Ruleset) else 1):
                    stop = StopReason.NODE_LIMIT
                elif elapsed >= lim.time_s or (prev and elapsed + prev.time_s > lim.time_s) or \
                        (budget is not None and budget.remaining() <= (prev.time_s if prev else 0)):
                    stop = StopReason.TIME_LIMIT
                if stop:
                    break
                deadline = min(lim.generator_s, max(lim.time_s - elapsed, 0.0))
                if budget is not None:
                    deadline = min(deadline, budget.remaining())
                self.deadline = time.perf_counter() + deadline
                stats = self._run_phase(phase, step, nodes, room, report)
                last[phase.name] = stats
                report.phases.append(stats)
                changed |= stats.changed
                if progress:
                    progress(step, stats.nodes, time.perf_counter() - t0)
                if stats.starved:
                    stop = StopReason.NODE_LIMIT
                    break
            if stop:
                break
            if not changed:
                stop = StopReason.SATURATED
                break
        report.stop_reason = stop or StopReason.ITERATION_LIMIT
        report.nodes = self.num_nodes()
        report.classes = len(self.export().classes)
        report.time_s = time.perf_counter() - t0
        return report

    def _run_phase(self, phase, step: int, nodes: int, budget: int, report: SaturationReport) -> PhaseStats:
        t = time.perf_counter()
        starved = False
        if isinstance(phase, Generator):
            out = phase.fn(self, self.export())
            unions = out.unions if isinstance(out, Round) else out
            if isinstance(out, Round):
                report.rounds.append(GeneratorRound(step, phase.name, dict(out.counts), time.perf_counter() - t))
            self._fit_queue(budget)
            changed = unions > 0
            stats = report.rules.setdefault(phase.name, RuleStats())
            stats.matches += unions
            stats.time_s += time.perf_counter() - t
            self._saturate_analysis()
        else:
            # the match limit that keeps this phase's growth within the budget (see the module doc)
            cap = budget // self._fanout[phase.name]
            limit = min(cap, phase.backoff.match_limit << step) if phase.backoff else cap
            self._saturate_analysis()
            out = self._run_ruleset(phase.name, limit, report)
            changed = out.updated or not out.can_stop
            if not out.can_stop and limit == cap:
                # a rule matched more often than the shared cap allows: give each rule in turn
                # the whole remaining budget over its own fan-out. The phase is starved when a
                # rule does not fit even so; when every rule ran and none added anything, the
                # ruleset is saturated (its matches were of terms already there)
                updated, banned = out.updated, False
                for solo in self._solo[phase.name]:
                    room = self.limits.nodes - self.num_nodes()
                    if room < self._fanout[solo]:
                        banned = True
                        continue
                    alone = self._run_ruleset(solo, room // self._fanout[solo], report)
                    updated |= alone.updated
                    banned |= not alone.can_stop
                starved = banned and not updated
                changed = updated or banned
        after = self.num_nodes()
        return PhaseStats(step, phase.name, after, after - nodes, time.perf_counter() - t, changed,
                          isinstance(phase, Ruleset) and starved)

    def _run_ruleset(self, name: str, match_limit: int, report: SaturationReport):
        """One iteration of ruleset `name`; a rule with more than `match_limit` matches applies
        none (egglog's back-off scheduler, fresh for this run)."""
        self._schedulers += 1
        sched = f"cap_{self._schedulers}"
        try:
            out = self._program(f"(let-scheduler {sched} (back-off :match-limit {match_limit} :ban-length 1))\n"
                                f"(run-schedule (run-with {sched} {name}))")[-1].report
        except bindings.EggSmolError as e:  # egglog checks rule bodies when they first run
            raise EinsatError(f"ruleset {name!r} failed to run: {e}") from None
        for rule, n in out.num_matches_per_rule.items():
            key = rule.split("#")[0] if not rule.startswith("(") else analysis.RULESET
            stats = report.rules.setdefault(key, RuleStats())
            stats.matches += n
            stats.time_s += out.search_and_apply_time_per_rule[rule].total_seconds()
        if out.updated:
            self._changed()
        return out

    def _fit_queue(self, budget: int) -> None:
        """Keep the longest prefix of queued commands whose terms fit in `budget` e-nodes (a
        command only refers to lets before it, so any prefix is a valid program)."""
        used = 0
        for k, command in enumerate(self._queue):
            used += fanout(command, self._constructors)
            if used > budget:
                del self._queue[k:]
                return

    def _saturate_analysis(self) -> None:
        self._program(f"(run-schedule (saturate (run {analysis.RULESET})))")

    def _register(self, rs: Ruleset) -> None:
        if rs.name in self._rulesets:
            if self._rulesets[rs.name] != rs:
                raise EinsatError(f"a different ruleset named {rs.name!r} already runs in this session")
            return
        self._rulesets[rs.name] = rs
        rules = [c for r in rs.rules for c in r.commands(rs.name, rs.varying)]
        self._fanout[rs.name] = max(1, sum(fanout(c, self._constructors) for c in rules))
        cmds = [f"(ruleset {rs.name})"] + rules
        # each rule also alone, for phases where the shared cap starves the rules (`_run_phase`)
        self._solo[rs.name] = []
        for k, r in enumerate(rs.rules):
            solo = f"{rs.name}__{k}"
            own = [c[:-2] + '#solo")' for c in r.commands(solo, rs.varying)]  # `:name "tag#solo")`
            self._fanout[solo] = max(1, sum(fanout(c, self._constructors) for c in own))
            self._solo[rs.name].append(solo)
            cmds += [f"(ruleset {solo})"] + own
        try:
            self._program("\n".join(cmds))
        except bindings.EggSmolError as e:
            raise EinsatError(f"ruleset {rs.name!r} does not compile: {e}") from None

    # -- data out -----------------------------------------------------------------------------
    def num_nodes(self) -> int:
        sizes = self._program("(print-size)")[0].sizes
        return sum(n for name, n in sizes if name in self._constructors)

    def export(self) -> EGraphData:
        """The whole e-graph as `EGraphData` (cached until the e-graph changes)."""
        if self._export is None:
            if not self.roots:
                raise EinsatError("the session has no program: call add_graph first")
            self._saturate_analysis()
            self._flush()
            js = serialize_json(self.egraph, [var(r) for r in self.roots])
            data, class_lets, fills = to_data(
                js, self._by_name, self.refs, output_names=self.output_names,
                input_types=self.input_types, weights=self.weights, let_names=self.let_names)
            self.handles.reset(data, class_lets, fills)
            if self.limits.acyclic:
                from einsat.egraph.cycles import filter_cycles
                data = filter_cycles(data)
            self._export = data
        return self._export

    def _repr_svg_(self) -> str:
        """The current e-graph as a picture in a notebook (drawn by `einsat.viz.egraph`, registered
        from above: `einsat.ir.display`)."""
        from einsat.ir.display import draw
        return draw("egraph", self)

    # -- internals ----------------------------------------------------------------------------
    def emit(self, *commands) -> None:
        """Queue egglog commands (run in order before anything else reads or runs the e-graph)."""
        self._queue.extend(commands)

    def _flush(self) -> None:
        """Run the queued commands. A top-level `union` rebuilds the e-graph at once, at a cost
        that grows with the number of global `let`s (every value of the input program and every
        term a generator added has one): wav2vec2's 3,005 queued commands of one round took 9.6 s
        one union at a time. So `union` queues a row of the pending-union table, and one run of
        its rule applies them all, with one rebuild (the same e-classes: union is order-free)."""
        if self._queue:
            cmds, self._queue = self._queue, []
            self.egraph.run_program(*cmds)
        if self._pending:
            self._pending = False
            self.egraph.parse_and_run_program(f"(run-schedule (run {terms.PENDING_RULESET}))")

    def _program(self, text: str) -> list:
        self._flush()
        return self.egraph.parse_and_run_program(text)

    def _changed(self) -> None:
        self._export = None


def _due(phase, step: int) -> bool:
    if isinstance(phase, Generator) and (step + 1) % phase.every:
        return False
    return phase.first_steps is None or step < phase.first_steps


def _in_ruleset(text: str, ruleset: str) -> str:
    return "\n".join(f"{c[:-1]} :ruleset {ruleset})" for c in split_commands(text))
