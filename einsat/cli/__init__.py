"""The `einsat` command line: `einsat [--version] COMMAND ...`, one module per command.

Each command module has `add_parser(sub)`, which declares the command's arguments and sets
`handler`, the function that runs it and returns the exit status. An `EinsatError` becomes a
one-line message and exit status 2. `python -m einsat.cli` and the `einsat` console script
(`pyproject.toml`) both run `main`.
"""

from __future__ import annotations

import argparse
import sys

import einsat
from einsat.cli import demo, fuzz, info, optimize, profile
from einsat.errors import EinsatError

COMMANDS = (info, demo, optimize, fuzz, profile)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="einsat", description="A tensor-program superoptimizer.")
    p.add_argument("--version", action="version", version=f"einsat {einsat.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except EinsatError as e:
        print(f"einsat: error: {e}", file=sys.stderr)
        return 2
