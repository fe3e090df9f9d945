"""The `einsat` command line: `einsat [--version] COMMAND ...`, one module per command.

Each command module has `add_parser(sub)`, which declares the command's arguments and sets
`handler`, the function that runs it and returns the exit status. An `EinsatError` becomes a
one-line message and exit status 2. `python -m einsat.cli` and the `einsat` console script
(`pyproject.toml`) both run `main`.

Ctrl-C outside a search ends quietly with status 130 (inside `optimize`'s run it stops the
search instead: the best program found so far is verified and written, status 0; a second one
stops at once, status 130: docs/pipeline.md's "Ctrl-C"); a closed pipe
(`einsat info m.onnx | head`) ends quietly. `-v`/`-q` choose the level of the `einsat.*`
loggers, which print to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import einsat
from einsat.cli import check, demo, fuzz, info, optimize, profile
from einsat.errors import EinsatError

COMMANDS = (info, demo, optimize, fuzz, profile, check)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="einsat", description="A tensor-program superoptimizer.")
    p.add_argument("--version", action="version", version=f"einsat {einsat.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    # Python's start and imports, for this process, up to `started` itself: taken after the parser
    # was built, the parsing counted twice (total past the wall time under load, #27 item 5)
    startup = startup_seconds() if argv is None else None
    args = parser().parse_args(argv)
    args.started = started  # the command's wall time counts from here (`optimize`'s report: its total)
    args.startup = startup
    args.own_process = argv is None  # the process is the command (not a caller's `main([...])`): it may end itself
    configure_logging(getattr(args, "verbose", 0), getattr(args, "quiet", False))
    try:
        return args.handler(args)
    except EinsatError as e:
        print(f"einsat: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("einsat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): silence the final flush of stdout, and end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def startup_seconds() -> float | None:
    """Seconds from this process's start to now (Linux: /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime, in clock ticks since boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """The CLI's choice of level for the `einsat` loggers: warnings by default, info with -v,
    debug with -vv, errors only with -q (the library itself configures no handler)."""
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logger = logging.getLogger("einsat")
    logger.setLevel(level)
    for old in [h for h in logger.handlers if getattr(h, "einsat_cli", False)]:
        logger.removeHandler(old)  # one handler, on the stderr of this call
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("einsat: %(levelname)s: %(message)s"))
    handler.einsat_cli = True
    logger.addHandler(handler)
