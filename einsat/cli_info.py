"""`einsat info model.onnx` and `einsat demo`: look at a model, and run the bundled one.

`info` imports a model and prints its summary: inputs and outputs with shapes, weights, a
table of op counts with FLOPs and bytes, and the ONNX ops kept opaque. `demo` does the same
for the bundled ResNet-18 (PyTorch's export, weights stripped and filled with seeded random
values), runs it on a seeded random image, optimizes it for the H100 cost model and prints the
optimizer's report and the optimized program's run.
"""

from __future__ import annotations

import argparse
import time
from importlib import resources
from pathlib import Path

import numpy as np

from einsat.errors import EinsatError

DEMO_MODEL = "resnet18.onnx"


def add_parsers(sub) -> None:
    p = sub.add_parser("info", help="summarize an ONNX model: ops, FLOPs, bytes, inputs and outputs",
                       description="Import an ONNX model and print its inputs and outputs, weights, a "
                                   "table of op counts with FLOPs and bytes moved, and the ONNX ops "
                                   "einsat keeps opaque.")
    p.add_argument("model", type=Path, help="the ONNX file")
    add_model_options(p)
    d = sub.add_parser("demo", help="load the bundled model, run it, optimize it and print the report",
                       description="Import the bundled ResNet-18 (weights seeded random), print its "
                                   "summary, run it on a random image and time the run, optimize it.")
    d.add_argument("--report", type=Path, default=None, metavar="FILE.html",
                   help="also write the optimizer's report as one self-contained HTML page")


def add_model_options(p) -> None:
    """The options of commands that read an ONNX model: --input-shape, --fill-weights."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="fix an input's symbolic dims, e.g. input=1,3,224,224 (repeatable)")
    p.add_argument("--fill-weights", choices=("random",), default=None,
                   help="give placeholder or stripped weights seeded random values")


def load_model(args):
    """The model of `args.model` with `add_model_options`' options applied."""
    import einsat
    if not args.model.is_file():
        raise EinsatError(f"{args.model}: no such file")
    return einsat.load_onnx(args.model, fill_weights=args.fill_weights,
                            input_shapes=parse_input_shapes(args.input_shape) or None)


def parse_input_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items:
        name, _, dims = item.rpartition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise EinsatError(f"--input-shape {item!r}: expected NAME=D1,D2,... with integer dims") from None
        if not name:
            raise EinsatError(f"--input-shape {item!r}: expected NAME=D1,D2,...")
    return shapes


def cmd_info(args: argparse.Namespace) -> int:
    from einsat.ir.summary import summarize

    g = load_model(args)
    print(summarize(g, title=f"{args.model} (graph {g.name!r})"))
    return 0


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
    print(f"ran on numpy in {seconds:.3f} s ({si(g.flops() / seconds)}FLOP/s):")
    for name, value in outputs.items():
        top = int(np.argmax(value.reshape(-1)))
        print(f"  {name}  {einsat.TensorType.of(value)}  mean {value.mean():.4g}  std {value.std():.4g}  "
              f"argmax {top}")
    # 3. optimize for the H100 cost model (verified on random inputs), run the result
    print("\noptimizing for the H100 cost model ...", flush=True)
    result = einsat.optimize(g, cost="h100")
    print(result.report)
    if args.report is not None:
        from einsat.cli_optimize import write_report
        write_report(result, args.report)
        print(f"wrote the report to {args.report}")
    start = time.perf_counter()
    optimized = einsat.run(result.graph, feeds)
    seconds = time.perf_counter() - start
    worst = max(float(np.max(np.abs(optimized[n] - outputs[n]))) for n in outputs)
    print(f"optimized program ran on numpy in {seconds:.3f} s; largest difference from the input "
          f"program on the demo image: {worst:.3g}")
    return 0
