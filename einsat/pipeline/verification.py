"""The checks of a run: the numeric verification of the result against the input, what can be
known of it before the search, and when no run is needed (an identical program).

`verify_equivalent` is the verify phase (`einsat.verify.numeric.equivalent` on random inputs and
the examples, `verification_plan`); `prepare_reference` runs the input first, so that the planner
can hold the candidate's runs back from the search; `before_search` fails early on what would
make any result fail. `einsat.optimize` re-exports these names.
"""

from __future__ import annotations

import os

import numpy as np

from einsat.errors import EinsatError, VerificationError
from einsat.ir.graph import Graph
from einsat.ir.types import is_float
from einsat.pipeline.report import Verification


def identical_program(a: Graph, b: Graph) -> bool:
    """Whether `b` computes what `a` does because it is `a`: the same interface, the same ops in
    the same order with equal attributes, each reading the corresponding values (inputs by name,
    weights by content, node outputs by position). Conservative: False whenever unsure (another
    node order, attributes that do not compare), and the numeric check runs instead."""
    if (len(a.nodes) != len(b.nodes) or a.input_types() != b.input_types() or a.outputs != b.outputs):
        return False
    to_b = {n: n for n in a.inputs}
    try:
        for x, y in zip(a.nodes, b.nodes):
            if x.op is not y.op or len(x.inputs) != len(y.inputs) or len(x.outputs) != len(y.outputs) \
                    or not bool(x.attrs == y.attrs):
                return False
            for i, j in zip(x.inputs, y.inputs):
                if i in a.weights:
                    if j not in b.weights or not np.array_equal(a.weights[i], b.weights[j]) \
                            or a.weights[i].dtype != b.weights[j].dtype:
                        return False
                elif to_b.get(i, i if not i else None) != j:  # "" (an absent optional input) maps to ""
                    return False
            to_b.update(zip(x.outputs, y.outputs))
    except (ValueError, TypeError):  # attributes that do not compare (arrays, graphs)
        return False
    return all(to_b.get(o) == o for o in a.outputs)


def same_program(a: Graph, b: Graph) -> bool:
    """Whether `b` is `a` node for node (op, attributes, types) with equal weights: nothing to measure."""
    if len(a.nodes) != len(b.nodes) or a.weights.keys() != b.weights.keys():
        return False
    try:
        return (all(x.op is y.op and x.attrs == y.attrs and a.node_types(x) == b.node_types(y)
                    for x, y in zip(a.nodes, b.nodes))
                and all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights))
    except (ValueError, TypeError):  # attributes that do not compare (arrays, graphs): measure instead
        return False


def before_search(graph: Graph, program, verify, examples) -> None:
    """What would make the verification fail whatever the search found, found before the search:
    an ONNX node nothing implements (`ExecutionError`, naming the file when `program` is one),
    and, with verify="prove", stripped or placeholder weights that leave the input's outputs
    constant (`VerificationError`, "inconclusive")."""
    from einsat.runtime.onnx_nodes import check_runnable

    check_runnable(graph, os.fspath(program) if isinstance(program, (str, os.PathLike)) else None)
    hint = weights_hint(graph) if verify == "prove" else None
    if hint is None:
        return
    from einsat.verify.numeric import equivalent

    with np.errstate(all="ignore"):  # the input against itself: what any comparison with it can show
        reports = [equivalent(graph, graph, inputs, trials=n) for inputs, n in verification_plan(graph, None, examples)]
    if not any(r.status == "proved" for r in reports):
        raise VerificationError(f"the verification of {graph.name!r} would be inconclusive (a proof was required): "
                                f"the input program's outputs do not vary with its inputs, so no comparison with "
                                f"it could fail. {hint}.\n{reports[-1]}", report=reports[-1], status="inconclusive")


def precision_verification(report, verify) -> Verification:
    """The verification of a half result: `einsat.verify.precision`'s comparison with the fp32
    input (the half program's own check against the converted program, within twice the bound,
    only guards the search). Inconclusive where an output does not vary by u between draws."""
    from einsat.verify.informative import informative

    worst = report.worst
    still = [f"output {o.name!r} varies in {o.varying:.1%} of its elements between input draws"
             for o in report.outputs if not informative(o.varying)]
    verification = Verification(trials=1, max_error=worst.max, tolerance=worst.bound, output=worst.name,
                                method=f"einsat.verify.precision against the fp32 input ({report.precision}, "
                                       "NumPy and ml_dtypes)",
                                status="inconclusive" if still else "proved", notes=still,
                                varying={o.name: o.varying for o in report.outputs})
    if still and verify == "prove":
        raise VerificationError(f"the {report.precision} verification is inconclusive (a proof was required): "
                                + "; ".join(still) + f"\n{report}", report=report, status="inconclusive")
    return verification


def retyped(graph: Graph, examples: dict | None) -> dict | None:
    """Example inputs in the dtypes of `graph`'s inputs (half, for a half_io conversion)."""
    return None if examples is None else {n: np.asarray(examples[n]).astype(graph.types[n].dtype)
                                          for n in graph.inputs}


def examples_by_name(graph: Graph, example_inputs) -> dict[str, np.ndarray] | None:
    """The example inputs by graph input name (positional ones in the graph's input order)."""
    if example_inputs is None:
        return None
    if isinstance(example_inputs, dict):
        return {k: np.asarray(v) for k, v in example_inputs.items()}
    arrays = [np.asarray(v) for v in example_inputs]
    if len(arrays) != len(graph.inputs):
        raise EinsatError(f"{len(arrays)} example inputs for {graph.name!r}, which takes "
                          f"{len(graph.inputs)}: {list(graph.inputs)}")
    return dict(zip(graph.inputs, arrays))


def verification_plan(reference: Graph, trials: int | None = None, examples: dict | None = None) -> list[tuple]:
    """The comparisons `verify_equivalent` makes, in order: (inputs or None for random ones,
    trials) each; see there."""
    if trials is None:
        trials = 2 if reference.flops() < 2e9 else 1
    indexed = any(not is_float(t.dtype) for t in reference.input_types().values())
    plan = [] if examples is None else [(examples, trials)]
    if not (examples is not None and indexed):
        plan.append((None, trials))
    return plan


def prepare_reference(reference: Graph, trials: int | None = None, seed: int = 0,
                      examples: dict | None = None):
    """The reference's runs for `verify_equivalent(reference, ..., reference_runs=...)`, taken
    now, and the seconds the candidate's runs will take if it runs as fast as the reference
    (`einsat.verify.numeric.ReferenceRuns`)."""
    from einsat.verify.numeric import ReferenceRuns, draws

    runs = ReferenceRuns(reference)
    plan = verification_plan(reference, trials, examples)
    with np.errstate(all="ignore"):
        runs.prepare([d for inputs, n in plan for d in draws(reference, inputs, trials=n, seed=seed)])
    return runs, runs.typical_seconds * sum(n for _, n in plan)


def verify_equivalent(reference: Graph, candidate: Graph, trials: int | None = None,
                      seed: int = 0, examples: dict | None = None, require_proof: bool = False,
                      reference_runs=None) -> Verification:
    """Run both programs on the same random inputs and compare every output.

    The comparison is `einsat.verify.numeric.equivalent` (standard normal floats; a tolerance
    of eps(dtype) * 8 * (op count + sqrt(longest accumulation)), relative to each element and
    to the output's scale; NaN and inf must match; integers exactly), on `trials` random input
    draws (default: 2 for programs under 2 GFLOPs, else 1; the input program always runs on a
    second draw, to show whether its outputs vary). Raises
    `VerificationError` on a mismatch, with the worst element and the nodes behind it.
    `examples`: inputs checked first, with a shuffle of them as a second draw (compared as
    `trials` says, run on the input program at least); with integer-valued inputs (indices),
    only they are checked.

    The result's `status` is "proved" when every output varied between the draws (or, for a
    constant or saturated output, the values feeding its last op did and agree), else
    "inconclusive": the outputs agree, but the comparison could not have failed. An output that
    agrees while the values feeding its last op differ is inconclusive too, and named in
    `feeding_differs`: no verdict either way (the pipeline then returns the input program).
    `require_proof` makes an inconclusive verification a `VerificationError` too.
    `reference_runs`: the reference's runs taken ahead (`prepare_reference`), reused here.
    """
    from einsat.verify.numeric import equivalent

    if reference.input_types() != candidate.input_types() or reference.outputs != candidate.outputs:
        raise VerificationError(f"the optimized program changed the interface of {reference.name!r}: "
                                f"inputs {reference.input_types()} -> {candidate.input_types()}, "
                                f"outputs {list(reference.outputs)} -> {list(candidate.outputs)}")
    reports = []
    with np.errstate(all="ignore"):  # random inputs may take log of negatives: NaN must match
        for inputs, n in verification_plan(reference, trials, examples):
            reports.append(equivalent(reference, candidate, inputs, trials=n, seed=seed, reference=reference_runs))
            if not reports[-1]:
                break
    failed = next((r for r in reports if not r), None)
    if failed is not None:
        bad = next(o for o in failed.outputs if not o.ok)
        raise VerificationError(
            f"the optimized program differs from {reference.name!r} on output {bad.name!r} "
            f"({reference.types[bad.name]}) on random inputs: this is a bug in a rewrite or in "
            f"extraction.\n{failed}", report=failed)
    report = next((r for r in reports if r.status == "proved"), reports[-1])
    worst = max(report.outputs, key=lambda o: o.error)  # error: the fraction of the allowed error
    notes = report.inconclusive()
    hint = weights_hint(reference) if report.status != "proved" else None
    if hint:
        notes.append(hint)
    verification = Verification(trials=report.draws, max_error=worst.error * report.tolerance,
                                tolerance=report.tolerance, output=worst.name, status=report.status,
                                notes=notes,
                                varying={o.name: o.varying for o in report.outputs},
                                feeding={o.name: [f.name for f in o.feeding] for o in report.outputs if o.feeding},
                                feeding_differs=[o.name for o in report.outputs if o.feeding_differs])
    if require_proof and verification.status != "proved":
        raise VerificationError(f"the verification of {reference.name!r} is inconclusive (a proof was required): "
                                f"the outputs agree, but the comparison could not have failed"
                                f"{f'. {hint}' if hint else ''}.\n{report}", report=report, status="inconclusive")
    return verification


def weights_hint(graph: Graph) -> str | None:
    """Why a verification may have had nothing to compare, in the program's weights, and what to
    do about it: stripped weights (drawn as random inputs, they turn a network's outputs to NaN or
    a constant) or placeholder weights (every element one value, as in the ONNX model zoo's light
    models). None when its weights look real."""
    if graph.stripped_weights:
        return (f"Its {len(graph.stripped_weights)} stripped weights are random inputs here (the ONNX file does "
                "not hold them): import it with fill_weights='random' (--fill-weights random on the command "
                "line) to give them seeded random values")
    flat = sorted(n for n, a in graph.weights.items()
                  if a.size > 1 and is_float(a.dtype) and np.all(a == a.reshape(-1)[0]))
    if flat:
        shown = ", ".join(map(repr, flat[:3])) + (", ..." if len(flat) > 3 else "")
        return (f"{len(flat)} of its weights {'holds' if len(flat) == 1 else 'hold'} one value in every element "
                f"({shown}): placeholders? "
                "fill_weights='random' (--fill-weights random on the command line) gives such weights "
                "seeded random values")
    return None
