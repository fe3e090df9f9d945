"""`einsat profile`: time op signatures on this machine's GPU into a profile database.

    einsat profile model.onnx sigs.json --out einsat/gpu/profiles/h100.json --budget 300

Sources are ONNX models (every node's signature) or signature files (`einsat-signatures/1`,
e.g. every e-node of an e-graph, written on a CPU machine by
`einsat.cost.profiled.export_signatures`). Signatures the output profile already holds are
skipped (`--force` re-times them); the file is rewritten after each source, atomically.
Needs CuPy and a CUDA device; never egglog.
"""

from __future__ import annotations

import os

from einsat.errors import EinsatError


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="time op signatures on the GPU into a profile database",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", help="ONNX models and/or signature files (.json)")
    p.add_argument("--out", help="the profile to create or extend (default: einsat/gpu/profiles/<device>.json)")
    p.add_argument("--reps", type=int, default=50, help="timed repetitions per signature (default 50)")
    p.add_argument("--budget", type=float, help="stop after this many seconds (default: no limit)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (default: strict fp32)")
    p.add_argument("--force", action="store_true", help="re-time signatures the profile already holds")
    p.set_defaults(handler=cmd_profile)


def read_sources(paths: list[str]):
    from einsat.ir.signature import read_signatures, signatures_of_graph
    sigs = []
    for path in paths:
        if not os.path.exists(path):
            raise EinsatError(f"no such file: {path}")
        if path.endswith(".json"):
            sigs += read_signatures(path)
        else:
            from einsat import load_onnx
            sigs += signatures_of_graph(load_onnx(path))
    return list({s.key: s for s in sigs}.values())


def cmd_profile(args) -> int:
    from einsat.cost.profile_db import PROFILES_DIR, ProfileDB
    from einsat.gpu.device import CupyDevice
    from einsat.gpu.profiler import Profiler, device_info

    sigs = read_sources(args.sources)
    dev = CupyDevice(tf32=args.tf32)
    info = device_info(dev)
    out = args.out or os.path.join(PROFILES_DIR, f"{info['kind']}{'-tf32' if args.tf32 else ''}.json")
    db = ProfileDB.load(out) if os.path.exists(out) else ProfileDB(device=info)
    if db.device.get("kind") != info["kind"]:
        raise EinsatError(f"{out} holds a {db.device.get('kind')} profile; this device is a {info['kind']}")
    db.device = info
    print(f"profiling {len(sigs)} signatures on {info['name']} into {out}")
    Profiler(dev, reps=args.reps).profile(sigs, db, time_budget_s=args.budget, skip_known=not args.force,
                                          progress=print)
    db.save(out)
    print(f"wrote {out}: {len(db)} entries, {len(db.failures)} failures")
    return 0 if not db.failures else 1
