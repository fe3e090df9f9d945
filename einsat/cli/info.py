"""`einsat info model.onnx`: look at a model.

The model is imported and its summary printed: inputs and outputs with shapes, weights (and the
inputs standing for stripped ones), a table of op counts with FLOPs and bytes, the ONNX ops kept
opaque, and those nothing can run (a custom domain's op without an implementation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from einsat.errors import EinsatError


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="summarize an ONNX model: ops, FLOPs, bytes, inputs and outputs",
                       description="Import an ONNX model and print its inputs and outputs, weights, a "
                                   "table of op counts with FLOPs and bytes moved, and the ONNX ops "
                                   "einsat keeps opaque.")
    p.add_argument("model", type=Path, help="the ONNX file")
    add_model_options(p)
    p.set_defaults(handler=cmd_info)


def add_model_options(p) -> None:
    """The options of commands that read an ONNX model: --input-shape, --fill-weights."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="fix an input's symbolic dims, e.g. input=1,3,224,224 (repeatable; default: the "
                        "shapes the model declares)")
    p.add_argument("--fill-weights", choices=("random",), default=None,
                   help="give placeholder or stripped weights seeded random values (default: the file's weights)")


def load_model(args):
    """The model of `args.model` with `add_model_options`' options applied."""
    import einsat
    if not args.model.exists():
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
    from einsat.runtime.onnx_nodes import unrunnable

    g = load_model(args)
    print(summarize(g, title=f"{args.model} (graph {g.name!r})", cannot_run=unrunnable(g)))
    return 0
