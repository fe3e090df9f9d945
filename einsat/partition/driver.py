"""The partitioned optimization: cut, optimize each distinct piece once, rebind, stitch, verify.

    result = einsat.optimize(model)                                   # partitions above 256 nodes
    result = einsat.optimize(model, partition=Partitioning(workers=4, executor="ray"))
    print(result.report.partition)                                    # pieces, cuts, cache hits

1. `partition` cuts the program (`partition.cut`) into pieces of at most `piece_nodes` nodes,
   one per repetition where the program repeats (transformer layers);
2. pieces with one structural fingerprint (`partition.fingerprint`) are optimized once (with
   `reuse`), by the executor (`partition.executors`: a process pool by default), each with the
   full rule set and its own saturation limits: a layer's e-graph is not starved by the others';
3. every other copy gets the template's optimized program with its own names and weights
   (`partition.rebind`, weights folded by the optimizer recomputed from the copy's weights) and
   is verified against its input piece on random inputs; a copy that fails is optimized on its
   own (and the report says why);
4. the pieces are stitched back in order, and the whole program is verified against the input,
   as `optimize` always does;
5. under a model that measures its target (`cost="cpu"`), each piece's result is kept unless
   its own check measures it slower beyond noise (`Measure(keep="not slower")`: a fused Gelu
   gains a piece a few percent, within one piece's noise), and the stitched program is timed
   against the input side by side, as `optimize` times any result: a whole not measured faster
   beyond noise is not returned. Then the pieces measured faster alone, stitched, are timed as
   a second candidate (`strict_whole`). The whole program optimized under the default modeled
   cost model is timed too (`modeled_whole`), and of the candidates measured faster the one
   with the better measured ratio is returned; where none is faster the input is returned, and
   `report.kept_input` says why.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np

from einsat.errors import EinsatError
from einsat.ir.graph import Graph, Node, fresh_name
from einsat.partition.cut import Cut, Piece, align, atoms, candidates, crossings, cut_at, group, subgraph
from einsat.partition.executors import run_jobs, spawn_safe
from einsat.partition.fingerprint import canonical
from einsat.partition.rebind import rebind
from einsat.partition.report import CutSummary, PartitionSummary, PieceSummary
from einsat.pipeline import measure, phases
from einsat.pipeline import verification as checks
from einsat.pipeline.events import ProgressEvent
from einsat.pipeline.measure import ProfileSummary
from einsat.pipeline.options import Options, Partitioning
from einsat.pipeline.plan import VERIFY_MARGIN
from einsat.pipeline.report import Report
from einsat.pipeline.runner import Result

log = logging.getLogger(__name__)


def partition(graph: Graph, settings: Partitioning = Partitioning()) -> tuple[list[Piece], list[Cut]]:
    """`graph` cut into pieces (in order) and the cuts between them (see `partition.cut`)."""
    if len(graph.nodes) == 0:
        return [], []
    crossing = crossings(graph)
    ok = candidates(graph, crossing, settings.max_crossing)
    spans, forced = atoms(graph, ok, crossing, settings.piece_nodes)
    keys = [canonical(subgraph(graph, a, b, "atom")).key for a, b in spans]
    ranges, repeat = align(graph, group(spans, keys, settings.piece_nodes, settings.min_unit))
    pieces = [Piece(k, a, b, subgraph(graph, a, b, f"{graph.name}.piece{k}")) for k, (a, b) in enumerate(ranges)]
    cuts = [cut_at(graph, b - 1, crossing, b - 1 in forced, b - 1 in repeat) for _, b in ranges[:-1]]
    return pieces, cuts


def crossing_cost(cost, nbytes: int) -> float | None:
    """The modeled cost (µs) of writing `nbytes` at a cut and reading them back: at the bandwidth
    fitted to the model's measurements (a calibrated roofline's element-wise kernels; a measured
    model's fallback), else its device's datasheet bandwidth (the CuPy model's device is the GPU
    itself, without one); None when neither model has either."""
    for model in (cost, getattr(cost, "fallback", None)):
        fitted = getattr(model, "families", {}).get("kernel")
        if fitted is not None:
            return 2 * nbytes / fitted.bytes_per_us
        bandwidth = getattr(getattr(model, "device", None), "bandwidth", None)
        if bandwidth:
            return 2 * nbytes / bandwidth * 1e6
    return None


def optimize_partitioned(graph: Graph, options: Options, state: phases.State) -> Result:
    """The partitioned run of `graph` (loaded by the pipeline: `state`, whose planner gives the
    pieces their seconds), with `options` (`options.partition`: how it is cut; see the module
    docstring). Every piece is a run of the pipeline with the caller's options, a measured
    model's included (its `Measure`). With `recipe`, the result's
    `recipe` makes every new weight of the stitched program from the input's weights: the
    pieces' recipes joined (`joined_recipe`)."""

    settings, cost, run, verify = options.partition, state.model, state.budget, options.verify
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    notify = state.notify

    pieces, cuts = partition(graph, settings)
    canon = [canonical(p.graph) for p in pieces]
    template: list[int] = []
    first: dict[str, int] = {}
    for k, c in enumerate(canon):
        template.append(first.setdefault(c.key, k) if settings.reuse else k)
    own = sorted({t for k, t in enumerate(template) if pieces[k].graph.outputs})  # a piece nobody reads is dropped
    times["partition"] = time.perf_counter() - t0
    notify(ProgressEvent("partition", f"{len(pieces)} pieces, {len(own)} to optimize"))

    workers = settings.workers or _cpus()
    # `cost` is the model at its threads; a piece's result is kept unless measured slower, and the whole judges
    measuring = dataclasses.replace(options.measuring, threads=None, keep="not slower")
    piece_options = options.replace(cost=cost, measure=measuring, partition=False, recipe=True, progress=None,
                                    budget=None, load=None, precision="fp32", half_io=False)
    executor = settings.executor
    if executor != "serial" and not (_picklable(options.rules) and _picklable(cost)):
        log.warning("the pieces run in this process: the rule schedule or the cost model cannot be pickled "
                    "for a worker")
        executor = "serial"
    if executor == "process":
        safe, why = spawn_safe()
        if not safe:
            log.warning("the pieces run in this process: %s", why)
            executor = "serial"
    if executor == "serial":
        workers = 1
    end = None  # when the pieces' share ends (time.time()): no piece runs past it, wherever it starts
    if state.planner.bounded:  # the copies' checks held back (`rebind_estimate`), then the pieces share what is
        # left, a fifth kept for stitching and checks
        state.planner.hold("rebind", rebind_estimate(graph, pieces, template, state.reference if verify else None))
        rounds = math.ceil(len(own) / workers)
        each = state.planner.seconds("pieces", rounds=rounds)
        piece_options = piece_options.replace(budget=each)
        end = time.time() + each * rounds
    jobs = [(pieces[k].graph, piece_options, end) for k in own]
    t = time.perf_counter()
    done = [0]

    def piece_done(j: int, r) -> None:  # the live line: pieces done of those to optimize, the last one's e-graph
        done[0] += 1
        s = getattr(getattr(r, "report", None), "saturation", None)
        notify(ProgressEvent("optimize", f"{done[0]} of {len(own)} pieces done (piece {own[j]}: {r.seconds:.1f} s)",
                             step=done[0], nodes=s.enodes if s else None, elapsed=time.perf_counter() - t))

    notify(ProgressEvent("optimize", f"{len(own)} pieces, {executor} with {workers} worker(s)"))
    results = dict(zip(own, run_jobs(jobs, executor, workers, settings.address, on_done=piece_done)))
    times["optimize"] = time.perf_counter() - t
    if executor != "serial" and hasattr(cost, "refresh"):  # a measured model: what the workers timed
        cost.refresh()

    state.planner.release("rebind")
    t = time.perf_counter()
    programs: list[Graph] = []
    strict: list[Graph] = []  # each piece's result where its own check measured it faster, else the piece
    summaries: list[PieceSummary] = []
    recipes: dict[int, tuple[Graph, dict[str, str], dict[str, str]]] = {}  # piece: recipe, its inputs', outputs' names
    for k, piece in enumerate(pieces):
        if not piece.graph.outputs:  # dead code: nothing after it reads its values
            programs.append(Graph([], piece.graph.input_types(), [], {}, piece.graph.name))
            strict.append(programs[-1])
            summaries.append(PieceSummary(index=k, start=piece.start, stop=piece.stop, nodes=len(piece.graph.nodes),
                                          fingerprint=canon[k].key[:12], template=k,
                                          cost_before=cost.graph_cost(piece.graph), cost_after=0.0, seconds=0.0,
                                          fallback="dropped: none of its values is used"))
            continue
        src = template[k]
        res = results[src]
        unchanged = None  # why the piece stays as it was, if it does
        if res is None:
            unchanged = "not optimized: the run was interrupted"  # before this piece's template started
        elif src != k and verify and run.seconds is not None and not run.cancelled and run.remaining() <= 0:
            unchanged = "not rebound: the budget left no time to check the copy"  # (the verification held apart)
        if unchanged is not None:
            programs.append(piece.graph)
            strict.append(piece.graph)
            summaries.append(PieceSummary(index=k, start=piece.start, stop=piece.stop, nodes=len(piece.graph.nodes),
                                          fingerprint=canon[k].key[:12], template=k,
                                          cost_before=cost.graph_cost(piece.graph),
                                          cost_after=cost.graph_cost(piece.graph), seconds=0.0, fallback=unchanged))
            continue
        t1 = time.perf_counter()
        fallback = ""
        if src == k:
            program, seconds = res.graph, res.seconds
        else:
            names: dict[str, str] = {}
            try:
                program = rebind(res.graph, res.recipe, canon[src], canon[k], piece.graph, f"p{k}", names)
                if verify:
                    check_copy(piece.graph, program)
            except EinsatError as e:  # a rewrite that depended on the template's weights: optimize it alone
                fallback = f"optimized alone: the template did not apply ({str(e).splitlines()[0]})"
                res = run_jobs([(pieces[k].graph, piece_options, end)], "serial")[0]
                program, src = res.graph, k
            seconds = time.perf_counter() - t1 + (res.seconds if fallback else 0.0)
        if res.recipe is not None and res.recipe.outputs:
            if src == k:
                recipes[k] = (res.recipe, {i: i for i in res.recipe.inputs}, {o: o for o in res.recipe.outputs})
            else:
                recipes[k] = (res.recipe, {i: names[i] for i in res.recipe.inputs},
                              {o: names[o] for o in res.recipe.outputs})
        programs.append(program)
        rep = res.report
        strict.append(program if (rep.measured or {}).get("faster") else piece.graph)
        summaries.append(PieceSummary(
            index=k, start=piece.start, stop=piece.stop, nodes=len(piece.graph.nodes), fingerprint=canon[k].key[:12],
            template=src, cost_before=cost.graph_cost(piece.graph), cost_after=cost.graph_cost(program),
            seconds=seconds, stop_reason=rep.saturation.stop_reason if src == k and rep.saturation else None,
            enodes=rep.saturation.enodes if src == k and rep.saturation else None,
            verified=verify, fallback=fallback))
    times["rebind"] = time.perf_counter() - t

    t = time.perf_counter()
    renames: list[dict[str, str]] = []
    stitched = stitch(graph, pieces, programs, renames)
    made = joined_recipe(graph, recipes, renames) if options.recipe else None
    times["stitch"] = time.perf_counter() - t
    phases.verify(state, stitched, identical=False)
    if verify:
        times["verify"] = state.times["verify"]
    phases.check(state, stitched, "the stitched result")
    tried = [stitched]
    stitched, made = strict_whole(state, graph, pieces, programs, strict, stitched, made, recipes, options.recipe)
    stitched, made, alternative = modeled_whole(state, graph, options, stitched, made, tried + [stitched])
    if "measure" in state.times:
        times["measure"] = state.times["measure"]
    verification, returned, measured, kept_input = state.verification, state.result, state.measured, state.kept_input
    profiled = ProfileSummary.of_pieces([results[k].report.profile for k in own
                                         if results[k] is not None and results[k].report.profile])
    if state.checked_profile is not None:  # the stitched result's fused groups, timed for the check
        profiled = state.checked_profile if profiled is None else profiled.also(state.checked_profile)
    times["total"] = time.perf_counter() - t0

    cut_rows = [CutSummary(c.after, c.node, list(c.values), list(c.producers), c.bytes,
                           crossing_cost(cost, c.bytes), c.forced, c.repeat)
                for c in cuts]
    summary = PartitionSummary(summaries, cut_rows, executor, workers,
                               settings.reuse, dict(times))
    reports = [results[k].report for k in own if results[k] is not None]
    interrupted = run.cancelled or any(r.interrupted for r in reports) or any(results[k] is None for k in own)
    before, after = cost.graph_cost(graph), cost.graph_cost(returned)
    if measured is not None:  # the modeled figures of the two programs measured, beside the measurement
        measured = {**measure.verdict_record(measured), "threads": cost.machine.get("threads"),
                    "predicted_ms": [before / 1e3, cost.graph_cost(stitched) / 1e3]}
    report = Report(name=graph.name, model=cost.name, model_label=cost.label, unit=cost.unit,
                    cost_before=before, cost_after=after,
                    ops_before=graph.op_counts(), ops_after=returned.op_counts(),
                    saturation=_saturation(reports), extraction=_extraction(reports, cost.graph_cost(stitched)),
                    verification=verification, times=times, cost_by_op_before=cost.cost_by_op(graph),
                    cost_by_op_after=cost.cost_by_op(returned), interrupted=interrupted,
                    stop=run.reason or next((r.stop for r in reports if r.stop), None), partition=summary,
                    profile={**profiled.to_dict(), "threads": cost.machine.get("threads")} if profiled else None,
                    measured=measured, kept_input=kept_input,
                    alternative=None if alternative is None else alternative.to_dict())
    notify(ProgressEvent("done", f"modeled cost {before:,.1f} -> {after:,.1f} {cost.unit}"))
    return Result(returned, report, graph, made if returned is stitched else None, opset=options.opset,
                  contrib=bool(getattr(cost, "contrib_ops", False)))


def strict_whole(state: phases.State, graph: Graph, pieces: list[Piece], programs: list[Graph], strict: list[Graph],
                 stitched: Graph, made: Graph | None, recipes: dict, recipe: bool) -> tuple[Graph, Graph | None]:
    """Where the stitched whole of every piece's kept result was measured not faster than the input,
    the whole of only the pieces each measured faster (`strict`), verified and timed against the
    input the same way, as a second candidate (a piece kept as not slower may be slower within its
    noise, and the whole of them with it). Returns the stitched program the run's verdict is about
    and its recipe. Skipped where the budget has no room for another check."""
    if (not measure.measured(state.model) or state.result is not state.graph or state.measured is None
            or all(a is b for a, b in zip(programs, strict))):
        return stitched, made
    if state.planner.bounded and state.budget.remaining() < phases.measured_check_estimate(
            state.model, state.options, state.model.graph_cost(graph)):
        return stitched, made
    renames: list[dict[str, str]] = []
    whole = stitch(graph, pieces, strict, renames)
    if checks.identical_program(graph, whole):
        return stitched, made
    first = state.kept_input
    phases.verify(state, whole, identical=False)
    phases.check(state, whole, "the stitched result of the pieces measured faster")
    if state.kept_input is not None:
        state.kept_input = f"{first}; nor was the whole of the pieces each measured faster: {state.kept_input}"
    kept = {k: v for k, v in recipes.items() if strict[k] is programs[k]}
    return whole, joined_recipe(graph, kept, renames) if recipe else None


def modeled_whole(state: phases.State, graph: Graph, options: Options, stitched: Graph, made: Graph | None,
                  tried: list[Graph]) -> tuple[Graph, Graph | None, phases.Alternative | None]:
    """The whole program optimized again under the default modeled cost model (`modeled_run`),
    timed against the input as the run's modeled alternative (`phases.modeled_whole`, which an
    unpartitioned measured run calls too). hf_gpt2's default-cost file ran 1.04x its export on
    onnxruntime at 2 threads where the pieces' whole, measured not faster, wrote the export;
    convnext_dynamo's 1.085x where the pieces' whole ran 1.048x. `tried`: the stitched wholes
    already timed. Returns the stitched program the run returns, its recipe and the alternative."""
    return phases.modeled_whole(state, graph, options, stitched, made, tried, modeled_run, "the stitched result")


def modeled_run(graph: Graph, examples: dict | None, options: Options) -> Result:
    """The whole program's run under `options` (the default modeled cost's, `modeled_whole`),
    partitioned as `optimize` partitions it (tests replace this)."""
    from einsat.pipeline.runner import run as pipeline_run
    return pipeline_run(graph, examples, options, split=optimize_partitioned)


def joined_recipe(graph: Graph, recipes: dict[int, tuple[Graph, dict[str, str], dict[str, str]]],
                  renames: list[dict[str, str]]) -> Graph:
    """One recipe for the stitched program: each piece's recipe (its template's, for a copy) with
    its inputs named as the copy's weights, its outputs as the stitched program names them
    (`renames`, from `stitch`) and its own values and constants prefixed `r<piece>.`. Its inputs
    are the input program's weights it reads, sorted, as `weight_recipe` makes them."""
    nodes: list[Node] = []
    inputs: dict[str, object] = {}
    constants: dict[str, np.ndarray] = {}
    outputs: list[str] = []
    for k, (rec, ins, outs) in sorted(recipes.items()):
        names = {i: ins[i] for i in rec.inputs}
        for i in rec.inputs:
            inputs[ins[i]] = graph.types[ins[i]]
        for w, array in rec.weights.items():
            names[w] = f"r{k}.{w}"
            constants[names[w]] = array
        for node in rec.nodes:
            for o in node.outputs:
                names[o] = renames[k][outs[o]] if o in outs else f"r{k}.{o}"
        for node in rec.nodes:
            nodes.append(Node(node.op, [names.get(i, i) if i else i for i in node.inputs],
                              [names[o] for o in node.outputs], dict(node.attrs)))
        outputs += [renames[k][outs[o]] for o in rec.outputs]
    return Graph(nodes, dict(sorted(inputs.items())), sorted(outputs), constants, f"{graph.name}_recipe")


CHECK_RUNS = 3  # a copy's check runs its piece on two draws (to see its outputs vary) and its program on one


def rebind_estimate(graph: Graph, pieces: list[Piece], template: list[int], reference) -> float:
    """Seconds the copies' checks (`check_copy`) will take, roughly: each runs its piece twice
    and its program once (`CHECK_RUNS`), as long as the piece's share of `graph`'s nodes of one run of the whole input
    (`reference`: its verification runs taken ahead, `ReferenceRuns`; None: nothing is checked),
    with the verification's margin."""
    if reference is None:
        return 0.0
    copied = sum(len(p.graph.nodes) for k, p in enumerate(pieces) if template[k] != k and p.graph.outputs)
    return VERIFY_MARGIN * CHECK_RUNS * reference.typical_seconds * copied / max(1, len(graph.nodes))


def check_copy(piece: Graph, program: Graph) -> None:
    """A copy's program against its piece on one random input set (`verify.numeric.equivalent`:
    the template itself was verified by `optimize`, and the stitched program is verified whole
    afterwards); raises `VerificationError` on a mismatch."""
    from einsat.errors import VerificationError
    from einsat.verify.numeric import equivalent

    with np.errstate(all="ignore"):
        report = equivalent(piece, program, trials=1)
    if not report:
        bad = next(o for o in report.outputs if not o.ok)
        raise VerificationError(f"the template's program differs from piece {piece.name!r} on output "
                                f"{bad.name!r} ({report.first_divergence or 'at the output'})")


def stitch(graph: Graph, pieces: list[Piece], programs: list[Graph], renames: list | None = None) -> Graph:
    """The pieces' programs joined in order into one program with `graph`'s interface. Interface
    values keep their names, and so do the input's weights and values; a name another piece
    already used (a copy's internal values carry its template's names) is made fresh. Each
    piece's names of its weights in the stitched program are appended to `renames` if given."""
    taken = set(graph.types)
    used: set[str] = set(graph.inputs)
    nodes: list[Node] = []
    weights: dict[str, np.ndarray] = {}
    for piece, program in zip(pieces, programs):
        interface = set(program.inputs) | set(program.outputs)
        own = {o for node in graph.nodes[piece.start:piece.stop] for o in node.outputs}
        names: dict[str, str] = {}
        for w, array in program.weights.items():
            if w in graph.weights and _same(graph.weights[w], array):
                names[w] = w  # an input weight: shared by name (and stored once)
            elif w in used or w in graph.types:
                names[w] = fresh_name(w, taken)
            else:
                names[w] = w
                taken.add(w)
            weights[names[w]] = array
            used.add(names[w])
        if renames is not None:
            renames.append({w: names[w] for w in program.weights})
        for node in program.nodes:
            for o in node.outputs:
                if o in interface or (o not in used and (o not in graph.types or o in own)):
                    names[o] = o
                    taken.add(o)
                else:
                    names[o] = fresh_name(o, taken)
                used.add(names[o])
        for node in program.nodes:
            nodes.append(Node(node.op, [names.get(i, i) for i in node.inputs], [names[o] for o in node.outputs],
                              dict(node.attrs)))
    for o in graph.outputs:
        if o in graph.weights:
            weights[o] = graph.weights[o]
    return Graph(nodes, graph.input_types(), graph.outputs, weights, graph.name)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b))


def _picklable(value) -> bool:
    import pickle
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _cpus() -> int:
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _saturation(reports):
    """The pieces' saturations as one summary: e-nodes and matches summed, stop reasons counted."""
    from einsat.pipeline.report import SaturationSummary

    sats = [r.saturation for r in reports if r.saturation is not None]
    if not sats:
        return None
    reasons: dict[str, int] = {}
    matches: dict[str, int] = {}
    for s in sats:
        reasons[s.stop_reason] = reasons.get(s.stop_reason, 0) + 1
        for k, v in s.rule_matches.items():
            matches[k] = matches.get(k, 0) + v
    text = ", ".join(f"{k} ({v} pieces)" for k, v in sorted(reasons.items()))
    return SaturationSummary(enodes=sum(s.enodes for s in sats), eclasses=sum(s.eclasses for s in sats),
                             stop_reason=max(reasons, key=lambda k: (reasons[k], k)),
                             iterations=max((s.iterations or 0) for s in sats),
                             seconds=sum((s.seconds or 0.0) for s in sats), node_limit=sats[0].node_limit,
                             rule_matches=matches, stop_text=f"{len(sats)} e-graphs, one per optimized piece: {text}")


def _extraction(reports, cost: float):
    from einsat.extract.extraction import ExtractionSummary

    xs = [r.extraction for r in reports]
    statuses = sorted({x.status for x in xs})
    return ExtractionSummary(cost=cost, method=xs[0].method if xs else "none",
                             status=f"{len(xs)} pieces: " + ", ".join(statuses),
                             seconds=sum(x.seconds for x in xs), candidates=sum(x.candidates for x in xs),
                             classes=sum(x.classes for x in xs))
