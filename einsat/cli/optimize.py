"""`einsat optimize in.onnx -o out.onnx`: the optimizer from the command line.

`--cost` names the cost model as `einsat.optimize(cost=...)` does (`einsat.extract.models`;
`--device` is its deprecated old name). Progress goes to stderr (one redrawn line on a terminal,
plain lines otherwise); the summary table goes to stdout. The output file is written only after verification passed, and
atomically (`einsat.save_onnx`): a failure never leaves a half-written file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from einsat.errors import EinsatError
from einsat.extract.models import COST_MODELS, DEFAULT_COST


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores like the new one, and says so on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"einsat: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_parser(sub) -> None:
    p = sub.add_parser("optimize", help="optimize an ONNX model and write the result",
                       description="Grow an e-graph of the model with einsat's rewrites, extract the "
                                   "cheapest equivalent program under a cost model, check it "
                                   "numerically against the input, and write it as ONNX.")
    p.add_argument("model", type=Path, help="the input ONNX file")
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the optimized ONNX file")
    p.add_argument("--cost", default=DEFAULT_COST, metavar="NAME",
                   help=f"cost model: {', '.join(COST_MODELS)} (default {DEFAULT_COST})")
    p.add_argument("--device", dest="cost", action=_Deprecated, new="--cost")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="seconds for the search: saturation and the ILP share it (default: their own limits)")
    p.add_argument("--extractor", choices=("ilp", "greedy"), default="ilp", help="extraction method (default ilp)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(handler=cmd_optimize)


def cmd_optimize(args: argparse.Namespace) -> int:
    import einsat
    from einsat.progress import ProgressDisplay

    if not args.model.is_file():
        raise EinsatError(f"{args.model}: no such file")
    if args.output.resolve() == args.model.resolve():
        raise EinsatError(f"{args.output}: refusing to overwrite the input model")
    display = None if args.quiet else ProgressDisplay(sys.stderr)
    limits, ilp_seconds = _split_time(args.time_limit)
    try:
        result = einsat.optimize(str(args.model), cost=args.cost, extractor=args.extractor,
                                 limits=limits, time_limit=ilp_seconds, progress=display)
    finally:
        if display is not None:
            display.close()
    einsat.save_onnx(result.graph, args.output)
    print(result.report)
    print(f"wrote {args.output}")
    return 0


def _split_time(total: float | None):
    """Saturation limits and ILP seconds for a total budget: two thirds saturation, one third ILP."""
    if total is None:
        return None, None
    if total <= 0:
        raise EinsatError(f"--time-limit must be positive, got {total}")
    from einsat.egraph.session import Limits
    return Limits(time_s=total * 2 / 3), total / 3
