"""Optimizing a program with symbolic dims (issue #40; docs/dynamic-shapes.md, "Optimizing at a probe").

A program imported with its `dim_param`s (`batch`, `sequence`, `past_sequence + 1`) is optimized
once for every size:

1. **Probe.** Each symbol gets a distinct prime size that divides no static number of the program
   (its dims, its attributes' integers, its weights' dims): `batch = 13, sequence = 17`. The
   program is instantiated there (`ir.symbolic.instantiate`) and optimized as any static program.
   At a prime probe the guards that need a size fact hold only where the fact holds for every
   size or by coincidence of products and sums of primes: a probe is divisible by no 2, 4 or 8,
   equals no static dim and no other symbol, so a rewrite that needs `batch % 8 == 0` or
   `sequence == 64` is not taken (no silent specialization).
2. **Generalize.** Every integer of the result that a probe divides (a dim, a Reshape target, a
   Slice bound) is read back as a polynomial of the symbols: first the dims the input program
   holds (`past_sequence + 1`), else by factoring out the probe primes (`batch * sequence * 12`).
   The result is rebuilt with the input's symbolic input types, its types re-inferred
   symbolically (every shape rule proves or refuses, `ir.dims`), and checked to give the static
   result back at the probe. A result that holds a size nowhere readable (a folded constant whose
   shape is a probe, an eOperator's index expression) is not generalized: the input is returned,
   and the report says why.
3. **Verify at sizes.** The generalized result is checked against the input at every size the
   user named (`Load(sizes=)`, `--dim sequence=1,128,512`; else `DEFAULT_SIZES` per known name), and
   at all symbols 1 and at an odd size, each instantiated and verified as a static run is; the
   verdict is the weakest. A mismatch at any size returns the input.
4. **Cost per size.** The search costs a candidate by its modeled cost summed over the named
   sizes (`OverSizes`: each e-node's types read back and evaluated at each size), so the one
   program chosen is the cheapest over them; the report's table has those sums, and
   `Report.sizes` the cost of the input and of the result at each named size. A result modeled
   slower over them in all is not returned. A model that measures its target (cost "cpu")
   profiles and chooses at the probe; the input and the result are then timed side by side at
   every named size, and a result the input beats beyond noise at any of them is not returned.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from typing import Any, Mapping

import numpy as np

from einsat.cost.model import CostModel
from einsat.errors import EinsatError, InputError, ShapeError
from einsat.ir.dims import SymDim, evaluate, sym
from einsat.ir.graph import Graph, Node
from einsat.ir.symbolic import concrete_value, graph_symbols, instantiate
from einsat.ir.types import TensorType

log = logging.getLogger("einsat.symbolic")

# candidate probe sizes: primes, not 7, 73, 127 or 337 (they divide int64's max, the "to the end"
# of a Slice), small first (the program is searched and verified there), tried in this order
PRIMES = (13, 17, 19, 23, 11, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 79, 83, 89, 97)
# the sizes a symbol is costed and verified at when the user names none (documented in
# docs/dynamic-shapes.md); any other symbol: OTHER_SIZES. A legacy decode export's
# `total_sequence` (its mask's length) is `past_sequence + 1` wherever both are symbols.
DEFAULT_SIZES = {"batch": (1, 4), "sequence": (1, 128, 512), "past_sequence": (1, 128, 512)}
OTHER_SIZES = (1, 64)
MAX_ASSIGNMENTS = 8
FOLLOWS = {"total_sequence": ("past_sequence", 1)}  # symbol -> (symbol, offset) it equals


class NotGeneral(EinsatError):
    """The optimized program holds a size that cannot be read back as a polynomial of the symbols."""


def assignments(symbols: list[str], shapes: Mapping[str, Any] | None) -> list[dict[str, int]]:
    """The sizes to cost and verify at: each symbol's sizes (`shapes`, else the defaults) crossed,
    at most `MAX_ASSIGNMENTS` (the first ones, in order); followers (`FOLLOWS`) set from their leader."""
    shapes = dict(shapes or {})
    unknown = set(shapes) - set(symbols)
    if unknown:
        raise EinsatError(f"Load(sizes=) names {sorted(unknown)}, which the program does not have as symbols "
                          f"(it has {', '.join(symbols) or 'none'})")
    free = [s for s in symbols if not (s in FOLLOWS and FOLLOWS[s][0] in symbols and s not in shapes)]
    values = []
    for s in free:
        v = shapes.get(s, DEFAULT_SIZES.get(s, OTHER_SIZES))
        v = (v,) if isinstance(v, int) else tuple(v)
        if not v or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in v):
            raise EinsatError(f"Load(sizes={{{s!r}: {v!r}}}): sizes are integers >= 1")
        values.append(tuple(int(x) for x in v))
    out = []
    for combo in itertools.islice(itertools.product(*values), MAX_ASSIGNMENTS):
        a = dict(zip(free, combo))
        for s in symbols:
            if s not in a:
                leader, offset = FOLLOWS[s]
                a[s] = a[leader] + offset
        out.append(a)
    return out


def _static_ints(graph: Graph) -> set[int]:
    """Every static number of `graph` a probe must not divide: dims of its values and weights, and
    the integers of its attributes."""
    out: set[int] = set()
    for t in graph.types.values():
        out.update(d for d in t.shape if isinstance(d, int))
    for w in graph.weights.values():
        out.update(int(d) for d in np.shape(w))
    for n in graph.nodes:
        for v in n.attrs.values():
            out.update(_ints_of(v))
    return {abs(x) for x in out if x}


def _ints_of(v) -> list[int]:
    if isinstance(v, bool):
        return []
    if isinstance(v, (int, np.integer)):
        return [int(v)]
    if isinstance(v, (tuple, list)):
        return [x for e in v for x in _ints_of(e)]
    if isinstance(v, TensorType):
        return [d for d in v.shape if isinstance(d, int)]
    return []


def probes(graph: Graph) -> dict[str, int]:
    """A distinct prime per symbol dividing no static number of `graph`, at which it instantiates;
    followers (`FOLLOWS`) set from their leader. An EinsatError when no such sizes are found."""
    symbols = graph_symbols(graph)
    numbers = _static_ints(graph)
    primes = [p for p in PRIMES if not any(x % p == 0 for x in numbers)]
    free = [s for s in symbols if not (s in FOLLOWS and FOLLOWS[s][0] in symbols)]
    if len(primes) < len(free):
        raise EinsatError(f"graph {graph.name!r}: no probe sizes for {', '.join(free)}: the program's static "
                          "numbers are divisible by too many small primes")
    dims = {d for t in graph.types.values() for d in t.shape if isinstance(d, SymDim)}
    dims |= {d for n in graph.nodes for v in n.attrs.values() for d in _dims_of(v)}
    last = None
    for start in range(len(primes) - len(free) + 1):
        sizes = dict(zip(free, primes[start:start + len(free)]))
        for s in symbols:
            if s not in sizes:
                leader, offset = FOLLOWS[s]
                sizes[s] = sizes[leader] + offset
        if any(evaluate(d, sizes) in numbers for d in dims):  # `past_sequence + 1` would read as an opset 18
            continue
        try:
            instantiate(graph, sizes)
            return sizes
        except (InputError, ShapeError) as e:
            last = e
    why = f": {last}" if last else ": each set of primes gives a symbolic dim the value of a static number"
    raise EinsatError(f"graph {graph.name!r} instantiates at no probe sizes for {', '.join(free)}{why}")


class Generalizer:
    """Reads the integers of a program optimized at `sizes` back as dims of the symbols."""

    def __init__(self, source: Graph, sizes: Mapping[str, int]):
        self.sizes = dict(sizes)
        self.primes = {p: s for s, p in sizes.items() if s not in FOLLOWS}
        known: dict[int, set] = {}
        for t in source.types.values():
            for d in t.shape:
                if isinstance(d, SymDim):
                    known.setdefault(evaluate(d, sizes), set()).add(d)
        for n in source.nodes:
            for v in n.attrs.values():
                for d in _dims_of(v):
                    known.setdefault(evaluate(d, sizes), set()).add(d)
        self.known = known

    def symbolic(self, v: int) -> bool:
        """Whether `v` carries a probe (a multiple of one, or a known symbolic dim's value)."""
        return v in self.known or (v != 0 and any(v % p == 0 for p in self.primes))

    def dim(self, v: int, where: str):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            return v
        v = int(v)
        if v in self.known:
            options = sorted(self.known[v], key=str)
            if len(options) > 1:  # past_sequence, not total_sequence - 1: a follower is its leader plus an offset
                options = [d for d in options if not d.symbols & set(FOLLOWS)] or options
            if len(options) > 1:
                raise NotGeneral(f"{where}: the size {v} is {' and '.join(map(str, options))} at the probe sizes")
            return options[0]
        if v <= 0 or not any(v % p == 0 for p in self.primes):
            return v
        rest, out = v, None
        for p, s in self.primes.items():
            while rest % p == 0:
                rest //= p
                out = sym(s) if out is None else out * sym(s)
        return out * rest

    def value(self, v: Any, where: str):
        """An attribute value with its probe-carrying integers read back as dims."""
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, (int, np.integer)):
            return self.dim(v, where)
        if isinstance(v, tuple):
            return tuple(self.value(x, where) for x in v)
        if isinstance(v, list):
            return [self.value(x, where) for x in v]
        if isinstance(v, TensorType):
            return TensorType([self.dim(d, where) for d in v.shape], v.dtype)
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu" and any(self.symbolic(int(x)) for x in v.ravel()[:4096]):
            raise NotGeneral(f"{where}: a constant array holds a size of the probe")
        if isinstance(v, str) and any(self.symbolic(int(x)) for x in re.findall(r"\d+", v)):
            raise NotGeneral(f"{where}: its expression {v[:80]!r} holds a size of the probe")
        if isinstance(v, Graph):
            raise NotGeneral(f"{where}: a subgraph attribute cannot be generalized")
        return v


class OverSizes(CostModel):
    """The cost model of a symbolic run's search: an application of an op at the probe sizes costs
    what `inner` charges for it summed over the named sizes, its types and attributes read back
    as symbolic (`Generalizer`) and evaluated at each. So the one program the search chooses is
    the cheapest over those sizes (issue #40 item 2), not at the probe, whose small primes weigh
    a sequence's quadratic terms less than sequence 512 does. An attribute that cannot be read
    back (a constant array holding a probe size) is charged as it is."""

    def __init__(self, inner: CostModel, source: Graph, probe: Mapping[str, int], named: list[dict[str, int]]):
        self.inner, self.named = inner, [dict(s) for s in named]
        self.generalizer = Generalizer(source, probe)
        self.name, self.unit = inner.name, inner.unit
        self.folds_weights_at_load, self.views_run = inner.folds_weights_at_load, inner.views_run
        self.contrib_ops = inner.contrib_ops
        self._memo: dict = {}

    @property
    def label(self) -> str:
        return f"{self.inner.label}, summed over {len(self.named)} sizes"

    def __getattr__(self, name):  # what else the search asks of a model (its machine, kernels' fusion units)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _read(self, v, where: str):
        try:
            return self.generalizer.value(v, where)
        except NotGeneral:
            return v

    def node_cost(self, op, attrs, ins, outs) -> float:
        try:
            key = (op, tuple(ins), tuple(outs), tuple(sorted((k, repr(v)) for k, v in attrs.items())))
            hash(key)
        except TypeError:
            key = None
        if key is not None and key in self._memo:
            return self._memo[key]
        where = f"the cost of {getattr(op, 'value', op)}"
        g_ins = [None if t is None else self._read(t, where) for t in ins]
        g_outs = [self._read(t, where) for t in outs]
        g_attrs = {k: self._read(v, where) for k, v in attrs.items()}
        total = 0.0
        for sizes in self.named:
            try:
                total += self.inner.node_cost(op, {k: concrete_value(v, sizes) for k, v in g_attrs.items()},
                                              [None if t is None else concrete_value(t, sizes) for t in g_ins],
                                              [concrete_value(t, sizes) for t in g_outs])
            except (EinsatError, ValueError, ZeroDivisionError):  # not a program at that size: its probe cost
                total += self.inner.node_cost(op, attrs, ins, outs)
        if key is not None:
            self._memo[key] = total
        return total


def _dims_of(v) -> list:
    if isinstance(v, SymDim):
        return [v]
    if isinstance(v, (tuple, list)):
        return [d for e in v for d in _dims_of(e)]
    if isinstance(v, TensorType):
        return [d for d in v.shape if isinstance(d, SymDim)]
    return []


def unfold(result: Graph, source: Graph, recipe: Graph | None, g: Generalizer) -> tuple[list[Node], dict]:
    """The nodes computing `result`'s weights whose shapes carry a probe (a slice of a position
    table folded at the probe's length), taken from the run's weight recipe (`Result.recipe`: the
    result's weights as a program over the input's), and the weights the program then reads."""
    weights = dict(result.weights)
    folded = [w for w, a in weights.items() if any(g.symbolic(int(d)) for d in np.shape(a))]
    if not folded:
        return [], weights
    made = {o: n for n in (recipe.nodes if recipe is not None else []) for o in n.outputs}
    missing = [w for w in folded if w not in made]
    if missing:
        w = missing[0]
        raise NotGeneral(f"the weight {w!r} {list(np.shape(weights[w]))} was folded at the probe sizes and the "
                         "run's weight recipe does not compute it")
    # a recipe value the result holds as a weight (folded for every size: `identity(v) -> weight`) is read, not
    # computed again
    names: dict[str, str] = {n.inputs[0]: n.outputs[0] for n in recipe.nodes
                             if n.op.value == "identity" and n.outputs[0] in weights and n.outputs[0] not in folded}
    nodes: list[Node] = []
    seen: set[str] = set()

    def name(v: str) -> str:
        if v in folded or v in recipe.inputs or not v:
            return v
        return names.setdefault(v, f"unfold.{v}")

    def visit(v: str) -> None:
        if (v in weights and v not in folded) or names.get(v) in weights:
            return
        if v in seen or v not in made:
            if v in recipe.inputs:
                weights[v] = source.weights[v]
            elif v in recipe.weights:
                weights[name(v)] = recipe.weights[v]
            return
        seen.add(v)
        node = made[v]
        for i in node.inputs:
            if i:
                visit(i)
        seen.update(node.outputs)
        nodes.append(Node(node.op, [name(i) for i in node.inputs], [name(o) for o in node.outputs], dict(node.attrs)))

    for w in folded:
        visit(w)
        del weights[w]
    return nodes, weights


def generalize(result: Graph, source: Graph, sizes: Mapping[str, int], recipe: Graph | None = None) -> Graph:
    """`result` (a static program optimized at `sizes`) as a program over `source`'s symbolic
    inputs, its weights folded at the probe computed again from `recipe`; a `NotGeneral` error
    where it cannot be, or where it does not give `result` back at `sizes`."""
    g = Generalizer(source, sizes)
    unfolded, weights = unfold(result, source, recipe, g)
    nodes = []
    for n in unfolded + list(result.nodes):
        where = f"node {n.name or n.outputs[0]!r} ({n.op.value})"
        nodes.append(Node(n.op, n.inputs, n.outputs, {k: g.value(v, f"{where}, attribute {k!r}")
                                                      for k, v in n.attrs.items()}, n.name))
    try:
        out = Graph(nodes, {n: source.types[n] for n in source.inputs}, list(result.outputs), weights,
                    name=result.name, stripped_weights=result.stripped_weights)
    except ShapeError as e:
        raise NotGeneral(f"its shapes do not hold for every size: {e}") from None
    back = instantiate(out, sizes)
    for v, t in result.types.items():
        if v in back.types and back.types[v] != t:
            raise NotGeneral(f"the value {v!r} is {back.types.get(v)} when generalized, {t} as optimized")
    for o in out.outputs:
        if out.types[o] != source.types[o]:
            raise NotGeneral(f"the output {o!r} is {out.types[o]} when generalized, {source.types[o]} in the input")
    return out


def _measured_per_size(model, graph: Graph, out: Graph, rows: list[dict], options) -> str | None:
    """With a model that measures its target (cost "cpu"): the input and the result timed side by
    side at every named size (the static run judged them at the probe only); why the input is
    returned when the input is measured faster beyond noise at one of them, else None."""
    from einsat.pipeline import measure

    if not measure.measured(model):
        return None
    reps = options.measuring.check_reps or measure.CHECK_REPS
    for row in rows:
        if not row["named"] or "error" in row:
            continue
        before, after = instantiate(graph, row["sizes"]), instantiate(out, row["sizes"])
        try:
            # the reversed comparison: is the input faster than the result beyond noise here?
            comparison, _ = measure.checked(model, after, before, reps, options.measuring.recheck)
        except Exception as e:  # noqa: BLE001 - a program the target cannot run is not returned
            return f"at {shown(row['sizes'])} the programs could not be measured on {model.target}: {e}"
        row["measured_speedup"] = 1 / comparison.speedup if comparison.speedup else None
        if comparison.faster:
            return (f"at {shown(row['sizes'])} the input was measured faster than the result beyond noise "
                    f"({comparison}, the input as the candidate)")
        for threads in options.measuring.not_slower_at:  # the other counts the file will run at
            if threads == model.threads:
                continue
            try:
                there, _ = measure.checked(measure.at_threads(model, threads), after, before, reps,
                                           options.measuring.recheck)
            except Exception as e:  # noqa: BLE001 - as above
                return (f"at {shown(row['sizes'])} the programs could not be measured on {model.target} at {threads} "
                        f"intra-op thread(s): {e}")
            if there.faster:
                return (f"at {shown(row['sizes'])} the input was measured faster than the result beyond noise at "
                        f"{threads} intra-op thread(s) ({there}, the input as the candidate), a count the file must "
                        "not be slower at (Measure(not_slower_at=))")
    return None


def shown(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def optimize_symbolic(graph: Graph, example_inputs, options, run_static) -> Any:
    """Optimize the symbolic `graph` (see the module docstring); `run_static(graph, examples,
    options)` optimizes a static program (the pipeline). Returns a `Result` whose graph is symbolic."""
    from einsat.ir.precision import convert, half_dtype
    from einsat.pipeline.runner import Result
    from einsat.pipeline.verification import precision_verification, verify_equivalent
    from einsat.verify.precision import verify_conversion

    start = time.perf_counter()
    symbols = graph_symbols(graph)
    named = assignments(symbols, options.loading.sizes)
    probe = probes(graph)
    static = instantiate(graph, probe)
    log.info("%s: optimizing at the probe sizes %s", graph.name, shown(probe))
    budget = options.budget_s
    from einsat.pipeline import measure
    from einsat.rewrites.schedule import symbolic_schedule

    model = options.model()
    # the search costs a candidate over the named sizes (a model that measures its target profiles and
    # checks at the probe, and side by side at each size below)
    search_cost = options.cost
    if named and not measure.measured(model) and options.precision != "tf32":
        search_cost = OverSizes(model, graph, probe, named)
    # the default schedule less the generators that write sizes into expressions (eOperators, PET's regions)
    inner = options.replace(load=None, budget=None if budget is None else 0.7 * budget, cost=search_cost,
                            rules=symbolic_schedule() if options.rules is None else options.rules, recipe=True)
    result = run_static(static, example_inputs if isinstance(example_inputs, dict) else None, inner)
    searched = time.perf_counter()
    report = result.report
    report.probe = dict(probe)
    report.costed_over_sizes = isinstance(search_cost, OverSizes)
    # the input as the run takes it: at a half precision its conversion (the static run's "input
    # (converted)"), which a half run returns where it returns its input; checked against the fp32
    # program within the precision's bound (`verify.precision`), as the static run is
    half = half_dtype(options.precision) is not None
    taken = convert(graph, options.precision, options.half_io) if half else graph
    out, reason = taken, report.kept_input
    if not reason:
        try:
            out = generalize(result.graph, taken, probe, result.recipe)
        except NotGeneral as e:
            reason = f"the program optimized at the probe sizes ({shown(probe)}) is not one for every size: {e}"
    extra = [{s: 1 for s in symbols}, {s: (3 if s == "batch" else 13) for s in symbols}]
    for s in extra:
        for f, (leader, offset) in FOLLOWS.items():
            if f in s and leader in s:
                s[f] = s[leader] + offset
    rows = []
    for k, sizes in enumerate(named + [s for s in extra if s not in named]):
        row: dict[str, Any] = {"sizes": sizes, "named": k < len(named)}
        try:
            before = instantiate(graph, sizes)
        except InputError as e:
            row["error"] = str(e)
            rows.append(row)
            continue
        start_at = instantiate(taken, sizes) if half else before
        after = instantiate(out, sizes) if out is not taken else start_at
        if row["named"]:
            row["cost_before"], row["cost_after"] = model.graph_cost(start_at), model.graph_cost(after)
        if out is not taken and options.verify:
            try:
                if half:
                    conversion = verify_conversion(before, after, options.precision, seed=k)
                    v = precision_verification(conversion, options.verify)
                else:
                    v = verify_equivalent(before, after, seed=k, require_proof=options.verify == "prove")
                row["verification"] = v.status
            except EinsatError as e:
                reason = f"at {shown(sizes)} the generalized program does not match the input: {e}"
                row["verification"] = "MISMATCH"
        rows.append(row)
        if reason and out is not taken:
            break
    if not reason and out is not taken:
        reason = _measured_per_size(model, taken, out, rows, options)
    costed = [r for r in rows if "cost_before" in r]
    before_sum, after_sum = sum(r["cost_before"] for r in costed), sum(r["cost_after"] for r in costed)
    if not reason and out is not taken and after_sum > before_sum * (1 + 1e-9):  # not the sums' rounding
        # one program for all sizes, chosen by its cost over them: the probe's choice must not lose there
        reason = (f"the program optimized at the probe sizes is modeled slower than the input over the named sizes "
                  f"({after_sum:,.2f} against {before_sum:,.2f} {model.unit} in all)")
    if reason and out is not taken:
        out = taken
        for r in rows:
            r.pop("verification", None)
            if "cost_before" in r:
                r["cost_after"] = r["cost_before"]
    if reason:
        report.kept_input = reason
        report.cost_after, report.ops_after = report.cost_before, report.ops_before
        report.cost_by_op_after = report.cost_by_op_before
    report.sizes = rows
    report.times["sizes"] = time.perf_counter() - searched  # generalizing, and the costs and checks per size
    report.times["total"] = time.perf_counter() - start
    return Result(out, report, graph, None, opset=result.opset, contrib=result.contrib)
