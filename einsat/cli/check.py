"""`einsat check`: is the optimized program faster than its input on this machine's GPU?

    einsat check model.onnx model.opt.onnx -o model.best.onnx

Both programs are compiled as CUDA graphs (static memory plan, one launch each), their outputs
compared on the same random inputs (within --rtol of each output's largest magnitude), and
they are timed side by side: interleaved rounds, medians with their spread, Wilcoxon's
signed-rank test and a 2% margin, a verdict of faster confirmed by a second block on freshly
compiled programs (the rule of `optimize(cost="cpu")`'s never-slower check,
`einsat.gpu.check`). `-o` writes the faster program (a copy of its file): the optimized one only
if it is measured faster, else the input; beside it (or at --verdict) the verdict as JSON: times, spread, rounds,
verdict, device. The profile's stale entries these programs use (cuDNN choices timed otherwise
than this device times them now) are timed again and written back to the profile (--profile,
default the device's committed profile when there is one). Needs CuPy and a CUDA device;
never egglog. Exit status 0 with a verdict, 1 when the outputs differ.
"""

from __future__ import annotations

import os
import sys

from einsat.errors import EinsatError


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="time an optimized program against its input on the GPU, keep the faster",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("original", help="the input program (ONNX)")
    p.add_argument("optimized", help="the optimized program: ONNX, or a packed record over the input's weights "
                                     "(.pkl, scripts/export_optimized.py; einsat.runtime.packed)")
    p.add_argument("-o", "--output", help="write the faster program here (the optimized one only if it is "
                                          "measured faster), with the verdict beside it (default: none written)")
    p.add_argument("--verdict", help="write the verdict (JSON) here (default: <output>.check.json with -o, else none)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per block (default 15)")
    p.add_argument("--replays", type=int, default=20, help="CUDA-graph replays per timed call (default 20)")
    p.add_argument("--rtol", type=float, default=1e-3,
                   help="largest output difference allowed, relative to the output's largest magnitude (default 1e-3)")
    p.add_argument("--profile", help="the GPU profile whose stale entries are timed again (default: "
                                     "einsat/gpu/profiles/<device>.json when it exists)")
    p.add_argument("--no-reprofile", action="store_true", help="leave stale profile entries as they are")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (default: strict fp32)")
    p.set_defaults(handler=cmd_check)


def make_device(tf32: bool = False):
    """This machine's CUDA device (the tests put their host emulation here)."""
    from einsat.gpu.device import CupyDevice
    return CupyDevice(tf32=tf32)


def device_kind(dev) -> str | None:
    """The profile kind of `dev` ("h100", ...), None for a device without CUDA properties."""
    from einsat.cost.profile_db import device_kind as kind
    props = getattr(dev, "properties", None)
    if not props or "name" not in props:
        return None
    name = props["name"]
    return kind(name.decode() if isinstance(name, bytes) else str(name))


def load_program(path: str, what: str):
    if not os.path.exists(path):
        raise EinsatError(f"no such file: {path} (the {what} program)")
    from einsat import load_onnx
    return load_onnx(path)


def copy_atomically(source: str, dest: str) -> None:
    """`source`'s bytes at `dest` (the chosen file itself, not a re-export), through a temporary
    file: a failure leaves nothing half-written."""
    import shutil
    import tempfile
    folder = os.path.dirname(os.path.abspath(dest))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


def load_packed(path: str, source):
    """The optimized program of the packed record at `path` (`einsat.runtime.packed`) over
    `source`, and the weights its recipe made otherwise than the machine that packed it."""
    import pickle

    from einsat.runtime.packed import FORMAT, inexact_weights, unpack
    if not os.path.exists(path):
        raise EinsatError(f"no such file: {path} (the optimized program)")
    try:
        with open(path, "rb") as f:
            record = pickle.load(f)
    except Exception as e:  # noqa: BLE001 - any unreadable file: one line naming it
        raise EinsatError(f"{path}: not a packed optimized program ({type(e).__name__}: {e})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise EinsatError(f"{path}: not a packed optimized program (format "
                          f"{record.get('format') if isinstance(record, dict) else type(record).__name__!r}, "
                          f"expected {FORMAT!r})")
    try:
        graph = unpack(record, source, exact=False)
    except (ValueError, KeyError) as e:
        raise EinsatError(f"{path}: does not unpack over the input program: {e}") from None
    return graph, inexact_weights(record, graph)


def verdict_path(args) -> str | None:
    if args.verdict:
        return args.verdict
    if args.output:
        return os.path.splitext(args.output)[0] + ".check.json"
    return None


def cmd_check(args) -> int:
    from einsat.cost.profile_db import ProfileDB, committed_profile
    from einsat.gpu.check import check_programs
    from einsat.ir.signature import atomic_write_json

    original = load_program(args.original, "input")
    packed = args.optimized.endswith(".pkl")
    inexact: list[str] = []
    if packed:
        optimized, inexact = load_packed(args.optimized, original)
    else:
        optimized = load_program(args.optimized, "optimized")
    dev = make_device(args.tf32)
    profile_path = args.profile
    if profile_path is None and not args.no_reprofile:
        kind = device_kind(dev)
        profile_path = committed_profile(f"{kind}{'-tf32' if args.tf32 else ''}") if kind else None
    db = ProfileDB.load(profile_path) if profile_path and os.path.exists(profile_path) and not args.no_reprofile \
        else None
    result = check_programs(original, optimized, dev, rounds=args.rounds, replays=args.replays, rtol=args.rtol,
                            db=db, progress=lambda text: print(f"check: {text}", flush=True))
    if db is not None and (result.reprofiled or result.reprofile_failed):
        try:
            db.save(profile_path)
            print(f"wrote {len(result.reprofiled)} re-timed entr{'y' if len(result.reprofiled) == 1 else 'ies'} "
                  f"to {profile_path}")
        except OSError as e:  # an installed package's profile may be read-only: the verdict still stands
            print(f"einsat: warning: could not write the re-timed entries to {profile_path} ({e}); "
                  "pass --profile with a writable file", file=sys.stderr)
    print(result)
    record = {**result.to_dict(), "original": os.path.abspath(args.original),
              "optimized": os.path.abspath(args.optimized), "profile": profile_path,
              **({"recipe_inexact": inexact} if packed else {})}
    if args.output:
        if result.faster and packed:  # a packed record runs only over its input: written whole, as ONNX
            from einsat import save_onnx
            save_onnx(optimized, args.output)
        else:
            copy_atomically(args.optimized if result.faster else args.original, args.output)
        record["output"] = os.path.abspath(args.output)
        print(f"wrote the {result.kept} program to {args.output}")
    path = verdict_path(args)
    if path:
        atomic_write_json(path, record)
        print(f"wrote the verdict to {path}")
    return 1 if result.verdict == "mismatch" else 0
