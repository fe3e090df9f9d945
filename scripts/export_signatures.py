"""CPU machine: export the op signatures of the benchmark workloads for the GPU profiler.

    .venv/bin/python scripts/export_signatures.py [names] [--out benchmarks/signatures] [--time 8]

For each workload it writes `<out>/<name>.json` (`einsat-signatures/1`): first the signatures
of the program itself (what an end-to-end prediction of the unoptimized program needs), then
those of every e-node of its e-graph after the default rewrite schedule (what extraction may
choose), each list in that order and without repeats. The GPU machine profiles these files
with `scripts/gpu_session.py` (no egglog there). Workloads run at their default (paper)
sizes, since these are the shapes the GPU runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.workloads import WORKLOADS, build  # noqa: E402
from einsat.cost.profiled import signatures_of_egraph  # noqa: E402
from einsat.egraph.session import Limits, Session  # noqa: E402
from einsat.ir.signature import signatures_of_graph, write_signatures  # noqa: E402
from einsat.rewrites.schedule import default_schedule  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "signatures")
# the end-to-end workloads first: the GPU session profiles in this order within its time budget
ORDER = ["resnet18", "bert"]


def export(name: str, out_dir: str, time_s: float, nodes: int) -> tuple[int, int]:
    graph = build(name)
    own = signatures_of_graph(graph)
    session = Session(Limits(nodes=nodes, time_s=time_s))
    session.add_graph(graph)
    session.run(default_schedule())
    egraph = signatures_of_egraph(session.export())
    sigs = {s.key: s for s in own}
    for s in egraph:
        sigs.setdefault(s.key, s)
    write_signatures(os.path.join(out_dir, f"{name}.json"), sigs.values())
    return len(own), len(sigs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="workloads (default: all)")
    p.add_argument("--out", default=OUT)
    p.add_argument("--time", type=float, default=8.0, help="saturation time limit per workload, seconds")
    p.add_argument("--nodes", type=int, default=30_000, help="e-node limit per workload")
    args = p.parse_args(argv)
    names = args.names or ORDER + [n for n in WORKLOADS if n not in ORDER]
    failed = []
    for name in names:
        t0 = time.perf_counter()
        try:
            own, total = export(name, args.out, args.time, args.nodes)
            print(f"{name}: {own} program signatures, {total} with the e-graph ({time.perf_counter() - t0:.0f} s)")
        except Exception as e:  # recorded and reported; the others go on
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}")
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
