"""The `einsat` command line."""

from __future__ import annotations

import argparse
import sys

from einsat import cli_optimize
from einsat.errors import EinsatError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="einsat", description="A tensor-program superoptimizer.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="load the bundled model, run it and print a summary")
    cli_optimize.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except EinsatError as e:
        print(f"einsat: error: {e}", file=sys.stderr)
        return 2


def cmd_demo(args) -> int:
    raise EinsatError("the demo lands with the ONNX importer")


COMMANDS = {"demo": cmd_demo, "optimize": cli_optimize.cmd_optimize}

if __name__ == "__main__":
    sys.exit(main())
