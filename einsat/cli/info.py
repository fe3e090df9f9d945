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
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N[,N...]",
                   help="the sizes a symbolic dim takes, in every input that uses it (repeatable). One size pins it: "
                        "batch=1 makes the program static there. Several keep it symbolic: `einsat optimize` then "
                        "writes one program for every size, costed and verified at these, e.g. sequence=1,128,512 "
                        "(default: a symbol not given stays symbolic, at its default sizes; `einsat info` lists "
                        "the symbols)")
    p.add_argument("--fill-weights", choices=("random",), default=None,
                   help="give placeholder or stripped weights seeded random values (default: the file's weights)")


def load_model(args, symbolic: bool = False):
    """The model of `args.model` with `add_model_options`' options applied; `symbolic`: a model
    with symbolic dims left unpinned is imported with them (`load_onnx(..., symbolic=True)`)
    instead of being refused."""
    import einsat
    from einsat.ir.onnx.read import SymbolicShapesError
    if not args.model.exists():
        raise EinsatError(f"{args.model}: no such file")
    shapes = input_shapes_of(args) or None
    try:
        return einsat.load_onnx(args.model, fill_weights=args.fill_weights, input_shapes=shapes)
    except SymbolicShapesError:
        if not symbolic:
            raise
        return einsat.load_onnx(args.model, fill_weights=args.fill_weights, input_shapes=shapes, symbolic=True)


def sizes_of(args) -> dict[str, list[int]]:
    """The `--dim`s given several sizes: the sizes a symbolic program is costed and verified at."""
    return {k: list(v) for k, v in parse_dims(getattr(args, "dim", [])).items() if len(v) > 1}


def input_shapes_of(args) -> dict[str, tuple[int, ...]]:
    """`--input-shape` and `--dim` as `input_shapes`: each `--dim` pins its symbol in every input
    that uses it; an input given by `--input-shape` takes that shape."""
    shapes = parse_input_shapes(args.input_shape)
    dims = {k: v[0] for k, v in parse_dims(getattr(args, "dim", [])).items() if len(v) == 1}
    if not dims:
        return shapes
    from einsat.ir.onnx.read import read_model, shapes_for_dims
    model, label = read_model(args.model)
    try:
        from_dims = shapes_for_dims(model, dims)
    except EinsatError as e:
        raise EinsatError(f"{label}: {str(e).partition(': ')[2]}") from None
    return {**from_dims, **shapes}


def parse_dims(items: list[str]) -> dict[str, tuple[int, ...]]:
    """`--dim SYMBOL=N[,N...]` as {symbol: sizes}."""
    dims = {}
    for item in items:
        name, _, value = item.rpartition("=")
        try:
            dims[name] = tuple(int(v) for v in value.split(","))
        except ValueError:
            raise EinsatError(f"--dim {item!r}: expected SYMBOL=N or SYMBOL=N1,N2,... with integers N >= 1") from None
        if not name or min(dims[name]) < 1:
            raise EinsatError(f"--dim {item!r}: expected SYMBOL=N or SYMBOL=N1,N2,... with integers N >= 1")
    return dims


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
    from einsat.ir.onnx.read import SymbolicShapesError
    from einsat.ir.summary import summarize
    from einsat.runtime.onnx_nodes import unrunnable
    try:
        g = load_model(args)
    except SymbolicShapesError as e:
        print(symbolic_summary(args.model, e))
        return 0
    print(summarize(g, title=f"{args.model} (graph {g.name!r})", cannot_run=unrunnable(g)))
    return 0


def symbolic_summary(model: Path, e) -> str:
    """What `einsat info` prints of a model whose inputs have symbolic dims nothing pinned: every
    such input with its dims, the symbols, and the command that pins them."""
    width = max(len(n) for n in e.inputs)
    lines = [f"{model}: inputs with symbolic dims (einsat optimizes static shapes: give each symbol a size "
             f"with --dim, or an input its shape with --input-shape):"]
    lines += [f"  {n:<{width}}  [{', '.join(map(str, d))}]" for n, d in e.inputs.items()]
    lines.append(f"symbols: {', '.join(e.symbols)}")
    example = " ".join(f"--dim {s}={1 if s == 'batch' else 16}" for s in e.symbols)
    lines.append(f"for example: einsat info {model} {example}")
    return "\n".join(lines)
