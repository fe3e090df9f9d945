"""`einsat fuzz`: random programs through einsat's transformations, checked for equivalence."""

from __future__ import annotations

import sys

import einsat


def add_parser(sub) -> None:
    p = sub.add_parser("fuzz", help="fuzz optimize, fusion of element-wise/reduction chains, the ONNX round trip "
                       "and the verifier with random programs",
                       description="Generate random programs (hypothesis) and check that einsat's "
                                   "transformations keep them equivalent: optimize, the ONNX export and "
                                   "import, and the verifier itself; every case's written ONNX also runs on "
                                   "onnxruntime against einsat's NumPy run of the input. A failure is shrunk "
                                   "to a minimal "
                                   "program and printed as builder code; the exit status is then 1.")
    p.add_argument("--budget", type=int, default=200, help="random cases in all (default 200)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--target", action="append", default=None,
                   help="a target to fuzz (repeatable; default: all available, e.g. optimize, fusion, onnx, verify; "
                        "also mutate: PET's mutation generator)")
    p.set_defaults(handler=cmd_fuzz)


def cmd_fuzz(args) -> int:
    """Exit status 0 when every target passed, 1 when one failed (its minimal case is printed)."""
    try:
        from einsat.testing.fuzz import fuzz
        if "mutate" in (args.target or ()):
            from einsat.testing import fuzz_mutate  # noqa: F401  (registers the target)
    except ImportError as e:  # hypothesis is a test extra
        print(f"einsat: error: einsat fuzz needs hypothesis (pip install 'einsat[test]'): {e}", file=sys.stderr)
        return 2
    if args.budget < 1:
        print("einsat: error: --budget must be at least 1", file=sys.stderr)
        return 2
    from einsat.progress import ProgressDisplay, ProgressEvent
    display = ProgressDisplay(sys.stderr)

    def show(target: str, done: int, total: int) -> None:  # cases past `total` are hypothesis shrinking
        what = f"{target}: case {done} of {total}" if done <= total else f"{target}: shrinking a failure"
        display(ProgressEvent("fuzz", what, step=done))

    try:
        report = fuzz(args.budget, args.seed, args.target, optimize=einsat.optimize, progress=show)
    except ValueError as e:
        print(f"einsat: error: {e}", file=sys.stderr)
        return 2
    finally:
        display.close()
    print(report)
    return 0 if report.ok else 1
