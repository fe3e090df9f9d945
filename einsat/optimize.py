"""`einsat.optimize`: a program in, a cheaper equivalent program out, and a report.

    result = einsat.optimize("model.onnx", cost="h100")
    result.graph            # the optimized ir.Graph
    print(result.report)    # modeled cost before/after, e-graph, extraction, verification, times

`optimize` builds the run's `Options` from its keywords and hands them to the pipeline
(`einsat.pipeline`: load -> e-graph session (the input program, then the rewrite schedule under
limits) -> export -> extraction (ILP or greedy, started from the input's own program, so the
modeled cost never goes up) -> numeric verification against the input, which always runs: a
mismatch raises `VerificationError`, never returns a wrong program); `run` is the same with
`Options` already made. A program above the partitioning threshold
goes to `einsat.partition`, which calls the pipeline for each piece.

A run can have a time budget for the whole of it (`budget=`: seconds, or an `einsat.budget.Budget`
shared with the caller) and can be stopped: a first Ctrl-C (or `Budget.cancel()`) during the
search ends saturation after its current phase and the ILP at its next check, and the best
program found so far is extracted, verified and returned (`report.interrupted`). A second
Ctrl-C raises `KeyboardInterrupt`. The caller's own `Budget.interruptible()` around the call shares
the run's one count of Ctrl-Cs (`einsat.budget`), as the command line's does. Phases are logged
on the `einsat.optimize` logger.

This module imports HiGHS and egglog only when `optimize` runs: `import einsat` stays light
(the GPU machine has neither); the cost models' names (`einsat.cost.models`) need neither.
The names the pipeline's parts had here stay importable from this module.
"""

from __future__ import annotations

from einsat.cost.models import DEFAULT_COST
from einsat.pipeline import Options, Result
from einsat.pipeline import run as pipeline_run
from einsat.pipeline.options import Load, Measure, Precision, moved
from einsat.pipeline.options import with_threads as _with_threads  # noqa: F401 (its older home)
from einsat.pipeline.plan import VERIFY_MARGIN
from einsat.pipeline.verification import (
    identical_program,
    prepare_reference,
    same_program,
    verification_plan,
    verify_equivalent,
    weights_hint,
)

__all__ = ["VERIFY_MARGIN", "Load", "Measure", "Options", "Precision", "Result", "identical_program", "optimize",
           "prepare_reference", "run", "same_program", "verification_plan", "verify_equivalent", "weights_hint"]


def optimize(program, example_inputs=None, *, cost=DEFAULT_COST, budget=None, limits=None, rules=None,
             verify: bool | str = True, precision="fp32", load=None, measure=None, partition=None, progress=None,
             opset: int | None = None, **gone) -> Result:
    """Optimize `program`: an `ir.Graph`, an ONNX path/bytes/ModelProto, or an imperative
    NumPy-style function, functionalized first on `example_inputs` (see `einsat.functionalize`).

    One keyword per meaning; what belongs together is one object (`Limits`, `Load`, `Measure`).
    A keyword this function no longer takes (`time_limit`, `extract_seconds`, `extractor`,
    `threads`, `profile_budget`, `check_reps`, `recheck`, `input_shapes`, `fill_weights`, `seed`,
    `half_io`, `recipe`) is an `EinsatError` naming what to write instead
    (`einsat.pipeline.options.MOVED`).

    example_inputs: for a function, its example arguments (a tuple, as for `functionalize`);
        for any program, inputs to verify on (a tuple in input order, or a dict by name) besides
        random ones. Index-valued inputs need them: random integers may fall out of range, so
        a program with integer inputs and example inputs is verified on the examples only.

    cost: a cost model or its name (`einsat.cost.models`: "h100", "h200", "cpu", ...). A model
        that measures its target ("cpu": onnxruntime on this machine) is profiled: the input's
        signatures before saturation (the search's generators cost by them), the candidates'
        after it (`einsat.pipeline.measure`: those the cached profile lacks, within
        `Measure.profile_s` seconds together, default 120), extracted again on what it chose and
        had not measured (the measured choice), and the result is timed against the input on
        the target (`Measure.check_reps` interleaved rounds, default 15): a result not faster
        beyond noise is not returned, the input is, and the report says so (`report.kept_input`).
        The e-graph is also extracted under the default modeled cost: that program, verified, is
        timed against the input too, and of the two the faster measured faster is returned
        (`report.alternative` says which, with both verdicts). The whole program is then
        optimized under the default model by a run of its own, and that program is weighed the
        same way (`report.modeled_run`; a partitioned run, whose pieces each have theirs, weighs
        it against the stitched result: `einsat.pipeline.phases.modeled_whole`). The verdict is kept beside the
        profile: a later run that extracts the same result from the same input reuses it (the
        report says when it was measured); `Measure(recheck=True)` times the two programs again.
    budget: seconds for the whole run (or a `Budget`, which the caller may also cancel), given
        to its phases by one planner (`einsat.pipeline.plan`, whose table lists every phase's
        share); the command line's `--budget`. The input program runs on the verification's
        inputs first (their time is the "reference" phase), and the candidate's runs are held
        back from the budget (as long as the reference's, with a margin), as are a measured
        model's side-by-side check rounds; profiling gets at most half of what is left when it
        starts (input and candidates together), saturation half, the ILP what is left after
        keeping a fifth for the rebuild, the measured choice half. The run may pass it by the
        e-graph's set-up and one saturation phase (egglog cannot be interrupted), by one batch of
        op timings, and by a candidate much slower on NumPy than the input.
    limits: the search's work (`einsat.egraph.Limits`; default: its defaults): e-nodes
        (`nodes`), rewrite rounds (`iterations`), the saturation's own seconds (`time_s`), and
        the extraction: `extractor` "ilp" (HiGHS, warm-started from greedy and from the input)
        or "greedy", `extract_s` the most seconds of one ILP solve (default 60, a safety net),
        `ilp_candidates` the e-graph size above which the ILP keeps its start (default 3,000). A search ended by
        its work gives the same program on any load; one ended by a clock says so in the report.
        `memory_gb` (default 4) bounds the resident memory the run adds to the process
        (`einsat.pipeline.memory.MemoryWatch`, sampled from a thread). Past it the run stops as
        a Ctrl-C stops it: the best program found so far is extracted, verified and returned,
        `report.stop == "memory limit"`. The peak is in `report.memory` either way.
    rules: a rewrite schedule (default: `einsat.rewrites.schedule.default_schedule()`).
    verify: check the result numerically against the input on random inputs (default: yes;
        a mismatch raises `VerificationError`; the report says whether the check "proved" the
        result or was "inconclusive": outputs that do not vary could not have failed).
        "prove": an inconclusive check raises `VerificationError` too. Turning it off
        (False) is reported loudly.
    precision: "fp32" (the default), "tf32" (the same fp32 program, costed with the GPU's TF32
        matrix products: cost "h100" becomes "h100-tf32"; refused for cost "cpu"), "bf16" or
        "fp16": an fp32 program is first converted (`einsat.ir.precision.convert`: weights cast
        once, products in half with fp32 accumulation, statistics in fp32, outputs cast back) and
        the conversion verified against it (`einsat.verify.precision`: a bound from the precision
        and the program's depth; past it, `PrecisionError` names the worst output and the first
        value where the error grows); the half program is then optimized, and the result checked
        against the fp32 input with the same bound. The error distribution is in
        `report.precision`. A program already in half is optimized as it is.
        `Precision("bf16", half_io=True)`: the program's inputs and outputs are half too.
    load: for an ONNX model, how it is read (`Load`, `einsat.load_onnx`): `input_shapes={name:
        shape}` fixes its symbolic dims, `fill_weights="random"` gives its stripped or placeholder
        weights random values drawn from `seed`.
    measure: how a cost model that measures its target measures (`Measure`): `threads` (the
        intra-op threads cost "cpu" profiles and measures at: the count the program will be
        deployed with, default 1; a verdict taken at one thread says nothing of sixteen; the CPU
        profile is kept per count, and the report says which was measured), `not_slower_at`
        (other counts the file will also run at: a result measured faster is returned only if
        it is not measured slower beyond noise at these too), `profile_s`, `check_reps`,
        `recheck` (see `cost`).
    partition: how a large program is split into pieces optimized apart (`einsat.partition`):
        None (the default) partitions programs above `Partitioning().above` nodes, a
        `Partitioning` sets the piece size, reuse and parallelism, False never partitions.
        The pieces' reports are in `report.partition`.
    progress: a callable receiving `ProgressEvent`s (the CLI passes a `ProgressDisplay`).
    opset: the ONNX opset cap of the file `Result.save` writes (13 to 26; None: 26, the newest the
        pinned onnxruntime opens): ops are written in the forms that opset has (ONNX Attention
        from 23, Gelu from 20, a chain below), and the file declares the least opset they need.

    A program with symbolic dims (an ONNX model whose inputs have `dim_param`s that
    `Load(input_shapes=)` does not pin, or a Graph from `load_onnx(..., symbolic=True)`) is
    optimized once for every size: at prime probe sizes, read back as a program for every size,
    and verified at each of `Load(sizes={"sequence": [1, 128, 512]})` (`--dim sequence=1,128,512`;
    default sizes per known name) and beside them (`einsat.pipeline.symbolic`). The file it writes
    keeps the input's `dim_param`s, and `report.sizes` has the modeled costs per size.

    The weights the optimizer made (folded weight-only values) as a program over the input's
    weights (`Result.recipe`, `einsat.egraph.weights.weight_recipe`: running it on other weights
    of the same shapes gives the result's weights for those) come from `run` with
    `Options(recipe=True)`; a partitioned program's recipe joins its pieces'
    (`partition.driver.joined_recipe`).

    """
    moved(gone)
    options = Options.of(cost=cost, budget=budget, limits=limits, rules=rules, verify=verify, precision=precision,
                         load=load, measure=measure, partition=partition, progress=progress, opset=opset)
    return run(program, example_inputs, options)


def run(program, example_inputs, options: Options) -> Result:
    """`optimize` with its `Options` already made: the pipeline (`einsat.pipeline.run`), with
    `einsat.partition` for a program above the partitioning threshold. Under cost "cpu", an ONNX
    file given as a path, bytes or ModelProto is timed against the file the result writes, and
    written unchanged where it is measured faster (`einsat.pipeline.given`)."""
    from einsat.partition.driver import optimize_partitioned
    from einsat.pipeline import given

    def static_run(graph, examples, o):
        return pipeline_run(graph, examples, o, split=optimize_partitioned)

    import time
    start = time.perf_counter()
    result = _run(program, example_inputs, options, static_run)
    if given.is_file(program):
        left = None if options.budget_s is None else options.budget_s - (time.perf_counter() - start)
        given.keep_given(result, program, options, left)
    return result


def _run(program, example_inputs, options: Options, static_run) -> Result:
    from einsat.errors import EinsatError
    from einsat.ir.graph import Graph
    from einsat.ir.onnx.read import SymbolicShapesError
    from einsat.ir.symbolic import is_static
    from einsat.pipeline.symbolic import optimize_symbolic

    if isinstance(program, Graph) and not is_static(program):
        return optimize_symbolic(program, example_inputs, options, static_run)
    if isinstance(program, Graph) and options.loading.sizes:
        raise EinsatError(f"Load(sizes=) gives the sizes of a program's symbolic dims; graph {program.name!r} has none")
    try:
        return static_run(program, example_inputs, options)
    except SymbolicShapesError:
        # an ONNX model with dim_params that nothing pinned: imported with its symbols, optimized for every size
        if isinstance(program, Graph) or callable(program) and not hasattr(program, "graph"):
            raise
        from einsat.ir.onnx.io import load_onnx
        load = options.loading
        graph = load_onnx(program, input_shapes=load.input_shapes, fill_weights=load.fill_weights, seed=load.seed,
                          symbolic=True)
        return optimize_symbolic(graph, example_inputs, options, static_run)


