"""The PyTorch baselines (benchmarks/torch_baseline.py) compute what einsat computes.

torch exists on CPU machines only as a Python 3.11 wheel, so the module runs in the side venv
`.torch-venv` (`make torch-venv`; `make test` makes it first), in a subprocess that receives each
workload as a pickled plain graph (no einsat, no egglog there) and writes its outputs; they are
compared here with einsat's NumPy outputs. One small workload also goes through torch.compile
(Inductor's CPU code generation; it takes a few seconds per graph, hence one).
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import einsat
from benchmarks.torch_baseline import plain_graph
from benchmarks.workloads import WORKLOADS, build
from einsat.runtime import random_inputs
from tests.benchmarks.common import SMALL, assert_close_scaled

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".torch-venv" / "bin" / "python"
WHEELS = sorted(Path("/opt/wheels").glob("torch-*-cp311-*.whl")) if Path("/opt/wheels").is_dir() else []
COMPILED = "fsrcnn"


@pytest.fixture(scope="module")
def torch_python():
    if not VENV_PYTHON.exists():
        if not WHEELS:
            pytest.skip("no torch here: neither .torch-venv nor a torch wheel in /opt/wheels")
        made = subprocess.run(["make", "-C", str(ROOT), "torch-venv"], capture_output=True, text=True)
        assert made.returncode == 0, f"make torch-venv failed:\n{made.stdout}\n{made.stderr}"
    return str(VENV_PYTHON)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Every workload at its test size: (graph, inputs, einsat outputs, case directory)."""
    root = tmp_path_factory.mktemp("torch_cases")
    out = {}
    for name in WORKLOADS:
        g = build(name, **(SMALL[name] if name != COMPILED else {"size": 12}))
        x = random_inputs(g, seed=1)
        d = root / name
        d.mkdir()
        with open(d / "graph.pkl", "wb") as f:
            pickle.dump(plain_graph(g), f)
        np.savez(d / "inputs.npz", **x)
        out[name] = (g, einsat.run(g, x), d)
    return out


def run_venv(python, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run([python, "-m", "benchmarks.torch_baseline", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"torch baseline failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.mark.slow
def test_eager_pytorch_matches_einsat_on_every_workload(torch_python, cases):
    run_venv(torch_python, *(str(d) for _, _, d in cases.values()))
    for name, (g, want, d) in cases.items():
        got = np.load(d / "eager.npz")
        assert sorted(got.files) == sorted(g.outputs), name
        for o in g.outputs:
            assert got[o].shape == want[o].shape, f"{name}/{o}"
            assert_close_scaled(got[o], want[o], what=f"{name}/{o} (torch eager)")


@pytest.mark.slow
def test_torch_compile_matches_einsat(torch_python, cases):
    g, want, d = cases[COMPILED]
    run_venv(torch_python, "--compile", str(d))
    got = np.load(d / "compiled.npz")
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"{COMPILED}/{o} (torch.compile)")


@pytest.mark.slow
def test_both_gpu_compile_modes_run_and_a_slow_compile_is_recorded(torch_python, cases):
    """The modes the GPU tables time (COMPILE_MODES) run the same program here on the CPU; a compile
    past its timeout leaves 'compile timed out' instead of outputs (or a hang)."""
    from benchmarks.torch_baseline import COMPILE_MODES
    g, want, d = cases[COMPILED]
    run_venv(torch_python, "--compile", "--mode", COMPILE_MODES[0], str(d))
    got = np.load(d / f"compiled-{COMPILE_MODES[0]}.npz")
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"{COMPILED}/{o} (torch.compile {COMPILE_MODES[0]})")
    run_venv(torch_python, "--compile", "--mode", COMPILE_MODES[1], "--compile-timeout", "0.05", str(d))
    assert "compile timed out after" in (d / f"compile-timeout-{COMPILE_MODES[1]}.txt").read_text()
    assert not (d / f"compiled-{COMPILE_MODES[1]}.npz").exists()


def test_attention_runs_in_torch_as_einsat_defines_it(torch_python, tmp_path):
    rng = np.random.default_rng(3)
    b = einsat.GraphBuilder("att")
    q, k, v = b.input("q", (2, 4, 5, 8)), b.input("k", (2, 1, 6, 8)), b.input("v", (2, 1, 6, 3))
    mask = b.weight("mask", np.where(rng.random((2, 1, 1, 6)) < 0.3, -1e4, 0).astype(np.float32))
    g = b.build(b.attention(q, k, v, mask, scale=0.3), b.attention(q, k, v, causal=1))
    x = random_inputs(g, seed=2)
    with open(tmp_path / "graph.pkl", "wb") as f:
        pickle.dump(plain_graph(g), f)
    np.savez(tmp_path / "inputs.npz", **x)
    run_venv(torch_python, str(tmp_path))
    got, want = np.load(tmp_path / "eager.npz"), einsat.run(g, x)
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"attention/{o} (torch eager)")


def test_plain_graphs_hold_only_builtins_and_arrays(cases):
    g, _, d = cases["longformer"]
    plain = plain_graph(g)
    allowed = (str, int, float, bool, tuple, list, dict, np.ndarray, type(None))

    def walk(v):
        assert isinstance(v, allowed), f"{type(v).__name__} in a plain graph"
        if isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)

    walk(plain)
    assert [n["op"] for n in plain["nodes"]].count("g2bmm") == 1


def test_the_module_imports_without_einsat_or_torch():
    # the GPU machine and the 3.11 venv have no egglog; this checks the module names neither
    code = ("import sys; sys.modules['einsat'] = None; sys.modules['egglog'] = None; sys.modules['torch'] = None\n"
            "import benchmarks.torch_baseline as t; assert t.OPS == {}")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
