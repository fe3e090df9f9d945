"""The `einsat` command line."""

from __future__ import annotations

import argparse
import sys

from einsat import cli_fuzz, cli_info, cli_optimize, cli_profile
from einsat.errors import EinsatError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="einsat", description="A tensor-program superoptimizer.")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_info.add_parsers(sub)
    cli_optimize.add_parser(sub)
    cli_fuzz.add_parser(sub)
    cli_profile.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except EinsatError as e:
        print(f"einsat: error: {e}", file=sys.stderr)
        return 2


COMMANDS = {"demo": cli_info.cmd_demo, "info": cli_info.cmd_info, "optimize": cli_optimize.cmd_optimize,
            "fuzz": cli_fuzz.cmd_fuzz, "profile": cli_profile.cmd_profile}

if __name__ == "__main__":
    sys.exit(main())
