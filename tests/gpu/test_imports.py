"""The GPU machine has no egglog, and the development machines no CuPy: every module of
einsat.gpu must import with both blocked (CuPy is imported lazily, on first device use)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKER = """
import importlib, importlib.abc, pkgutil, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
import einsat.gpu
names = ['einsat.gpu'] + [m.name for m in pkgutil.walk_packages(einsat.gpu.__path__, 'einsat.gpu.')]
names += {extra!r}
for name in names:
    importlib.import_module(name)
print(len(names), sorted(m for m in sys.modules if m.split('.')[0] in {blocked!r}))
"""


def run_blocked(blocked: set[str], extra: list[str]) -> str:
    code = BLOCKER.format(blocked=sorted(blocked), extra=extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_gpu_package_imports_without_egglog_or_cupy():
    out = run_blocked({"egglog", "cupy", "cupyx", "cupy_backends"},
                      ["einsat.gpu.backend_cupy", "einsat.gpu.profiler", "einsat.cost.profile_db"])
    count, loaded = out.split(" ", 1)
    assert int(count) >= 20 and loaded.strip() == "[]"


def test_cost_models_import_without_egglog_or_highspy():
    """The GPU machine computes MeasuredCost's predictions itself: the cost models, the e-graph
    data format and greedy extraction need neither egglog nor HiGHS."""
    out = run_blocked({"egglog", "highspy", "cupy", "cupyx", "cupy_backends"},
                      ["einsat.extract", "einsat.cost.profiled", "einsat.egraph.data",
                       # what scripts/gpu_session.py's phases import on the GPU machine
                       "scripts.export_optimized", "benchmarks.workloads", "benchmarks.gpu_bench",
                       "einsat.runtime", "einsat.cli"])  # `einsat profile` runs there
    assert out.split(" ", 1)[1].strip() == "[]"
