"""Time PET's corrector on conv program pairs at [16, 256, 56, 56]: `python -m benchmarks.verify_bench`.

Each pair is an original 3x3 conv (256 -> 256 channels, padding 1, or dilation 2 for the
dilated pair) and a mutant; `find_differences` propagates boxes through both, tests Theorem 1's
positions of every box intersection over the field mod 2^31-1 with two random tests, and
reports the differing regions. The regions found are checked against the known answer, so a
fast wrong answer does not pass. Writes benchmarks/results/verify_bench.{json,md}.

Needs only NumPy and einsat (no hypothesis, no egglog).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from benchmarks.meta import meta_line, run_meta

N, C, H, W, F = 16, 256, 56, 56, 256


def _conv(name, weight, **attrs):
    from einsat.ir import GraphBuilder
    b = GraphBuilder(name)
    x = b.input("x", (N, C, H, W))
    return b.build(b.conv(x, b.weight("w", weight), **attrs))


def _batch_to_width(weight):
    """PET Figure 1: image pairs side by side along the width, one conv, back."""
    from einsat.ir import GraphBuilder
    b = GraphBuilder("batch_to_width")
    x = b.input("x", (N, C, H, W))
    t = b.reshape(b.transpose(b.reshape(x, shape=(N // 2, 2, C, H, W)), perm=(0, 2, 3, 1, 4)),
                  shape=(N // 2, C, H, 2 * W))
    y = b.conv(t, b.weight("w", weight), padding=1)
    y = b.reshape(b.transpose(b.reshape(y, shape=(N // 2, F, H, 2, W)), perm=(0, 3, 1, 2, 4)), shape=(N, F, H, W))
    return b.build(y)


def _dilated_as_regular(weight):
    """PET Figure 3: rows and columns reordered by parity, a regular conv, back."""
    from einsat.ir import GraphBuilder
    b = GraphBuilder("dilated_as_regular")
    x = b.input("x", (N, C, H, W))
    t = b.transpose(b.reshape(x, shape=(N, C, H // 2, 2, W // 2, 2)), perm=(0, 1, 3, 2, 5, 4))
    y = b.conv(b.reshape(t, shape=(N, C, H, W)), b.weight("w", weight), padding=1)
    y = b.transpose(b.reshape(y, shape=(N, F, 2, H // 2, 2, W // 2)), perm=(0, 1, 3, 2, 5, 4))
    return b.build(b.reshape(y, shape=(N, F, H, W)))


def _less_padding(weight):
    from einsat.ir import GraphBuilder
    b = GraphBuilder("less_top_padding")
    x = b.input("x", (N, C, H, W))
    y = b.conv(x, b.weight("w", weight), padding=(0, 1, 1, 1))
    return b.build(b.pad(y, pads=(0, 0, 1, 0, 0, 0, 0, 0)))


def pairs():
    """(name, original, mutant, expected mask) for each workload."""
    weight = np.random.default_rng(0).standard_normal((F, C, 3, 3)).astype(np.float32)
    conv = _conv("conv", weight, padding=1)
    changed = weight.copy()
    changed[7, 3, 0, 2] += 1.0
    out = []
    mask = np.zeros((N, F, H, W), bool)
    out.append(("same conv", conv, _conv("conv", weight, padding=1), mask.copy()))
    m = mask.copy()
    m[0::2, :, :, W - 1] = True
    m[1::2, :, :, 0] = True
    out.append(("batch to width (Fig. 1)", conv, _batch_to_width(weight), m))
    m = mask.copy()
    m[:, 7, 1:, :W - 1] = True  # tap (0, 2) reads inside the input below row 0, left of column W-1
    out.append(("one weight element", conv, _conv("conv", changed, padding=1), m))
    m = mask.copy()
    m[:, :, 0, :] = True
    out.append(("one padding amount", conv, _less_padding(weight), m))
    dilated = _conv("dilated", weight, dilation=2, padding=2)
    m = mask.copy()
    m[:, :, [1, H - 2], :] = True
    m[:, :, :, [1, W - 2]] = True
    out.append(("dilated as regular (Fig. 3)", dilated, _dilated_as_regular(weight), m))
    return out


def run(reps: int = 3) -> dict:
    from einsat.verify import find_differences
    rows = []
    for name, original, mutant, expected in pairs():
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            diffs = find_differences(original, mutant)
            times.append(time.perf_counter() - t0)
        out = original.outputs[0]
        rows.append({"pair": name, "median_s": statistics.median(times), "min_s": min(times),
                     "boxes": sum(diffs.boxes.values()), "positions": diffs.positions,
                     "regions": len(diffs.regions[out]), "correct": bool(np.array_equal(diffs.mask(out), expected)),
                     "error_bound": diffs.error_bound})
    return {"meta": run_meta(), "shape": [N, C, H, W], "weight": [F, C, 3, 3], "tests": 2, "reps": reps, "rows": rows,
            "machine": {"cpus": os.cpu_count(), "load_avg": list(os.getloadavg()),
                        "processor": platform.processor() or platform.machine(),
                        "python": platform.python_version(), "numpy": np.__version__}}


def markdown(result: dict) -> str:
    m = result["machine"]
    setup = (f"{m['cpus']} CPUs, load average {m['load_avg'][0]:.1f}, numpy {m['numpy']}; "
             f"{result['tests']} random tests mod 2^31-1; median of {result['reps']} runs.")
    lines = [f"# PET corrector on conv pairs at {result['shape']} (weight {result['weight']})", "",
             *([meta_line(result["meta"]), ""] if "meta" in result else []), setup, "",
             "| pair | median s | min s | boxes | positions | regions | regions correct | error bound |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['pair']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['boxes']} | {r['positions']} | "
                     f"{r['regions']} | {'yes' if r['correct'] else 'NO'} | {r['error_bound']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    result = run(args.reps)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "verify_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    text = markdown(result)
    with open(os.path.join(args.out, "verify_bench.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r["correct"] for r in result["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
