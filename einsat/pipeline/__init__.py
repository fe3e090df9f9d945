"""The pipeline: one run of the optimizer, its options, its phases and its time.

    from einsat.pipeline import Options, run
    result = run("model.onnx", None, Options.of(cost="cpu", budget=60))

- `options`: `Options`, the one record of a run's settings, built by `einsat.optimize` (from its
  keywords), the command line (from its flags) and partitioning (for each piece);
- `plan`: the budget planner, which gives every phase its seconds;
- `phases`: load, profile, saturate, extract, choose (the measured choice), verify, check, write;
- `runner`: `run`, the phases in order, and the `Result`;
- `measure` (the measured model's profiling, choice and check), `verification`, `report`, `events`.

The pipeline sits above the packages it drives (ir, egraph, rewrites, cost, extract, runtime,
gpu, verify, frontend) and below `einsat.partition`, the command line and `einsat.optimize`,
which call it; it imports none of them.
"""

from einsat.pipeline.options import EXECUTORS, KEYWORDS, MOVED, Load, Measure, Options, Partitioning, Precision
from einsat.pipeline.plan import Planner
from einsat.pipeline.runner import Result, run

__all__ = ["EXECUTORS", "KEYWORDS", "MOVED", "Load", "Measure", "Options", "Partitioning", "Planner", "Precision",
           "Result", "run"]
