"""`einsat demo`: the bundled model imported, run, optimized and run again.

The bundled ResNet-18 (PyTorch's export, weights stripped and filled with seeded random values)
is summarized like `einsat info`, run on a seeded random image, optimized for the default cost
model (`einsat.cost.models.DEFAULT_COST`), and the optimizer's report and the optimized
program's run are printed.
"""

from __future__ import annotations

import argparse
import time
from importlib import resources
from pathlib import Path

import numpy as np

from einsat.cost.models import DEFAULT_COST

# the search bounded by work alone, so that the demo prints the same numbers on every machine: an
# iteration limit ends it (not the clock), PET's rounds stop on counts (not their deadline: under
# the measured H100 model its mutants pay, and a round cut by time admits what the machine managed);
# einsat.egraph.Limits' fields, built when the demo runs (the CLI imports no egglog before a command needs it)
# The ILP too ends by work (optimal, or no better program for a count of nodes or checks), its clock
# (extract_s) far off: at the default 5 s a loaded machine stopped it at whatever incumbent it had by
# then, and two demos printed different speedups (1.384x and 1.383x)
DEMO_LIMITS = dict(iterations=3, time_s=120, generator_s=60, subprograms=4, mutants=4, extract_s=300.0)

DEMO_MODEL = "resnet18.onnx"


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="load the bundled model, run it, optimize it and print the report",
                       description="Import the bundled ResNet-18 (weights seeded random), print its "
                                   "summary, run it on a random image and time the run, optimize it "
                                   f"for the {DEFAULT_COST} cost model and run the result.")
    p.add_argument("--report", type=Path, default=None, metavar="FILE.html",
                   help="also write the optimizer's report as one self-contained HTML page (default: none)")
    p.set_defaults(handler=cmd_demo)


def demo_model_path() -> Path:
    return Path(str(resources.files("einsat") / "data" / DEMO_MODEL))


def cmd_demo(args: argparse.Namespace) -> int:
    import einsat
    from einsat.ir.summary import si, summarize

    path = demo_model_path()
    # 1. import: PyTorch's ResNet-18 export, its stripped weights filled with seeded values
    start = time.perf_counter()
    g = einsat.load_onnx(path, fill_weights="random", seed=0)
    loaded = time.perf_counter() - start
    print(summarize(g, title=f"einsat demo: ResNet-18 from {path.name} (weights seeded random), "
                             f"imported in {loaded:.2f} s"))
    # 2. run on the NumPy backend, on a seeded random image
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(g.types[n].shape).astype(g.types[n].dtype) for n in g.inputs}
    start = time.perf_counter()
    outputs = einsat.run(g, feeds)
    seconds = time.perf_counter() - start
    print(f"ran on numpy in {seconds:.3f} s ({si(g.flops() / seconds)}FLOP/s; NumPy is einsat's reference "
          "executor, the specification each result is checked against, not a target):")
    for name, value in outputs.items():
        top = int(np.argmax(value.reshape(-1)))
        print(f"  {name}  {einsat.TensorType.of(value)}  mean {value.mean():.4g}  std {value.std():.4g}  "
              f"argmax {top}")
    # 3. optimize for the default cost model (verified on random inputs), run the result
    from einsat.cli.target import target_line
    print(f"\noptimizing for the {DEFAULT_COST} cost model (3 rewrite steps, PET's rounds and the ILP bounded "
          f"by work: the same result on any machine) ...\n{target_line(DEFAULT_COST)}", flush=True)
    from einsat.egraph.session import Limits
    result = einsat.optimize(g, cost=DEFAULT_COST, limits=Limits(**DEMO_LIMITS))
    print(result.report)
    if args.report is not None:
        from einsat.cli.optimize import write_report
        write_report(result, args.report)
        print(f"wrote the report to {args.report}")
    start = time.perf_counter()
    optimized = einsat.run(result.graph, feeds)
    seconds = time.perf_counter() - start
    worst = max(float(np.max(np.abs(optimized[n] - outputs[n]))) for n in outputs)
    print(f"optimized program ran on numpy in {seconds:.3f} s (the reference executor again: this time says "
          f"nothing of the {DEFAULT_COST}'s); largest difference from the input program on the demo image: "
          f"{worst:.3g}")
    return 0
