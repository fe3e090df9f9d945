"""Export the workloads to ONNX: `python -m benchmarks.export [--out DIR] [--batch N] [--cpu] [names]`.

Writes DIR/<name>.onnx (default DIR: build/onnx) through `einsat.save_onnx`, which checks the
model and writes atomically. `--cpu` uses the reduced sizes of `CPU_SIZES`; `--set key=value`
overrides a builder argument of every named workload (e.g. `--set seq=1000`).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time

import einsat
from benchmarks.workloads import CPU_SIZES, WORKLOADS, build


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set needs key=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def export(names: list[str], out_dir: str, overrides: dict | None = None, cpu: bool = False,
           log=print) -> list[str]:
    """Build and save each named workload; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name in names:
        kwargs = {**(CPU_SIZES.get(name, {}) if cpu else {}), **(overrides or {})}
        t0 = time.perf_counter()
        graph = build(name, **kwargs)
        path = os.path.join(out_dir, f"{name}.onnx")
        einsat.save_onnx(graph, path)
        log(f"{name:22s} {len(graph):5d} nodes  {os.path.getsize(path) / 1e6:9.1f} MB  "
            f"{time.perf_counter() - t0:6.1f} s  {path}")
        paths.append(path)
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.export", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"workloads (default: all): {', '.join(WORKLOADS)}")
    p.add_argument("--out", default=os.path.join("build", "onnx"), help="output directory")
    p.add_argument("--batch", type=int, help="batch size (default: each workload's)")
    p.add_argument("--cpu", action="store_true", help="the reduced CPU sizes (Longformer, G2BMM)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a builder argument, e.g. --set seq=1000")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    overrides = parse_overrides(args.set)
    if args.batch is not None:
        overrides["batch"] = args.batch
    export(args.names or list(WORKLOADS), args.out, overrides, cpu=args.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
