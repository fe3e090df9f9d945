"""`einsat.optimize`: a program in, a cheaper equivalent program out, and a report.

    result = einsat.optimize("model.onnx", cost="h100")
    result.graph            # the optimized ir.Graph
    print(result.report)    # modeled cost before/after, e-graph, extraction, verification, times

The pipeline: load -> e-graph session (the input program, then the rewrite schedule under
limits) -> export -> extraction (ILP or greedy, started from the input's own program, so the
modeled cost never goes up) -> numeric verification against the input, which always runs: a
mismatch raises `VerificationError`, never returns a wrong program.

This module imports the extractor (HiGHS) and the e-graph (egglog) only when `optimize` runs:
`import einsat` stays light (the GPU machine has neither).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from einsat.errors import EinsatError, VerificationError
from einsat.gpu.interpreter import run
from einsat.ir.graph import Graph
from einsat.optimize_report import Report, SaturationSummary, Verification
from einsat.progress import ProgressEvent

EXTRACTION_TIME_LIMIT = 5.0  # seconds of ILP by default


@dataclass
class Result:
    """The optimized program and the report of how it was found and checked."""

    graph: Graph
    report: Report

    def __iter__(self):  # `graph, report = einsat.optimize(g)`
        return iter((self.graph, self.report))


def optimize(program, *, cost="h100", rules=None, limits=None, extractor: str = "ilp",
             time_limit: float | None = None, verify: bool = True, progress=None) -> Result:
    """Optimize `program` (an `ir.Graph`, or an ONNX path/bytes/ModelProto).

    cost: a cost model or its name ("h100", "h200", ...; see `einsat.extract.cost_model`).
    rules: a rewrite schedule (default: `einsat.rewrites.schedule.default_schedule()`).
    limits: saturation limits (`einsat.egraph.session.Limits`; default: its defaults).
    extractor: "ilp" (HiGHS, warm-started from greedy and from the input) or "greedy".
    time_limit: seconds for the ILP (default 5).
    verify: check the result numerically against the input on random inputs (default: yes;
        a mismatch raises `VerificationError`). Turning it off is reported loudly.
    progress: a callable receiving `ProgressEvent`s (the CLI passes a `ProgressDisplay`).
    """
    from einsat.extract import METHODS, cost_model

    method = extractor
    if method not in METHODS:
        raise EinsatError(f"unknown extractor {extractor!r}; choose 'ilp' or 'greedy'")
    model = cost_model(cost)
    notify = progress or (lambda event: None)
    times: dict[str, float] = {}
    start = time.perf_counter()

    def phase(name: str, t0: float) -> float:
        now = time.perf_counter()
        times[name] = now - t0
        return now

    t = start
    notify(ProgressEvent("load", "reading the program"))
    graph = _load(program)
    t = phase("load", t)
    notify(ProgressEvent("saturate", f"{len(graph.nodes)} nodes into the e-graph"))
    data, saturation = _saturate(graph, rules, limits, notify)
    t = phase("saturate", t)
    notify(ProgressEvent("extract", f"{method} over {data.num_nodes():,} e-nodes", nodes=data.num_nodes(),
                         classes=len(data.classes)))
    extraction = _extract(data, model, method, time_limit, graph)
    t = phase("extract", t)
    verification = None
    if verify:
        notify(ProgressEvent("verify", "running both programs on random inputs"))
        verification = verify_equivalent(graph, extraction.graph)
        t = phase("verify", t)
    times["total"] = t - start
    before = model.graph_cost(graph)
    report = Report(name=graph.name, model=model.name, unit=model.unit, cost_before=before,
                    cost_after=extraction.cost, ops_before=graph.op_counts(),
                    ops_after=extraction.graph.op_counts(), saturation=saturation,
                    extraction=extraction, verification=verification, times=times)
    notify(ProgressEvent("done", f"modeled cost {before:,.1f} -> {extraction.cost:,.1f} {model.unit}"))
    return Result(extraction.graph, report)


def _load(program) -> Graph:
    if isinstance(program, Graph):
        return program
    if isinstance(program, (str, os.PathLike, bytes)) or hasattr(program, "graph"):
        from einsat import load_onnx
        return load_onnx(program)
    raise EinsatError(f"optimize takes an einsat Graph or an ONNX model, not {type(program).__name__}")


def _saturate(graph: Graph, rules, limits, notify):
    """Grow the e-graph of `graph` with `rules` under `limits`; the export and a summary."""
    from einsat.egraph.session import Session

    session = Session(limits)
    session.add_graph(graph)
    if rules is None:
        from einsat.rewrites.schedule import default_schedule
        rules = default_schedule()

    def forward(step: int, nodes: int, elapsed: float) -> None:
        notify(ProgressEvent("saturate", step=step, nodes=nodes, elapsed=elapsed))

    report = session.run(rules, progress=forward)
    data = session.export()
    return data, SaturationSummary.of(report, data)


def _extract(data, model, method: str, time_limit, graph: Graph):
    from einsat.extract import extract

    limit = EXTRACTION_TIME_LIMIT if time_limit is None else time_limit
    return extract(data, model, method=method, time_limit=limit, start=graph, name=graph.name)


def verify_equivalent(reference: Graph, candidate: Graph, trials: int | None = None,
                      seed: int = 0) -> Verification:
    """Run both programs on the same random inputs and compare every output.

    Inputs: standard normal floats, integers in {0, 1}, random booleans. The error of an output
    is max|candidate - reference| / max|reference| (NaN and inf must match exactly); the
    tolerance is 32 eps(dtype) times the op count of the larger program (rounding grows about
    linearly with depth), and exact equality for integer outputs. Raises `VerificationError`
    naming the output on a mismatch.
    """
    if reference.input_types() != candidate.input_types() or reference.outputs != candidate.outputs:
        raise VerificationError(f"the optimized program changed the interface of {reference.name!r}: "
                                f"inputs {reference.input_types()} -> {candidate.input_types()}, "
                                f"outputs {list(reference.outputs)} -> {list(candidate.outputs)}")
    n_ops = max(len(reference.nodes), len(candidate.nodes), 1)
    if trials is None:
        trials = 2 if reference.flops() < 2e9 else 1
    worst, worst_tol, worst_name = 0.0, 0.0, ""
    for k in range(trials):
        rng = np.random.default_rng(seed + k)
        feed = {n: _random(rng, t) for n, t in reference.input_types().items()}
        with np.errstate(all="ignore"):  # random inputs may take log of negatives: NaN must match
            want, got = run(reference, feed), run(candidate, feed)
        for name in reference.outputs:
            err, tol = _error(want[name], got[name], n_ops)
            if err > tol:
                raise VerificationError(
                    f"the optimized program differs from {reference.name!r} on output {name!r} "
                    f"({reference.types[name]}): relative error {err:.3g} > tolerance {tol:.3g} "
                    f"on random inputs (seed {seed + k}); this is a bug in a rewrite or in extraction")
            if err / max(tol, 1e-300) >= worst / max(worst_tol, 1e-300):
                worst, worst_tol, worst_name = err, tol, name
    return Verification(trials=trials, max_error=worst, tolerance=worst_tol, output=worst_name)


def _random(rng, t) -> np.ndarray:
    if np.issubdtype(t.dtype, np.floating):
        return rng.standard_normal(t.shape).astype(t.dtype)
    if t.dtype == np.bool_:
        return rng.random(t.shape) < 0.5
    return rng.integers(0, 2, t.shape).astype(t.dtype)


def _error(want: np.ndarray, got: np.ndarray, n_ops: int) -> tuple[float, float]:
    if want.shape != got.shape or want.dtype != got.dtype:
        return float("inf"), 0.0
    if not np.issubdtype(want.dtype, np.floating):
        return float(np.count_nonzero(want != got)), 0.0
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)) or \
            not np.array_equal(want[~finite], got[~finite], equal_nan=True):
        return float("inf"), 0.0
    if not finite.any():
        return 0.0, 0.0
    w, g = want[finite].astype(np.float64), got[finite].astype(np.float64)
    scale = max(float(np.max(np.abs(w))), np.finfo(want.dtype).tiny)
    return float(np.max(np.abs(w - g))) / scale, 32 * float(np.finfo(want.dtype).eps) * n_ops
