"""`einsat optimize`'s report counts the run's wall time (issue 31: "total 20.81 s" for a 34.4 s
run: Python's start, reading the model and writing the result were left out)."""

import json
import os
import subprocess
import sys
import time

import einsat
from einsat.ir import GraphBuilder


def test_the_reports_total_is_the_wall_time_of_the_command(tmp_path):
    b = GraphBuilder("block")
    x = b.input("x", (8, 16))
    w1, w2 = b.weight("w1", (16, 16)), b.weight("w2", (16, 16))
    einsat.save_onnx(b.build(b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2)))), tmp_path / "in.onnx")
    command = [sys.executable, "-m", "einsat.cli", "optimize", str(tmp_path / "in.onnx"), "-o",
               str(tmp_path / "out.onnx"), "-q", "--report", str(tmp_path / "r.json")]
    start = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}) as p:
        for line in p.stdout:  # the summary's time line: the run's wall time up to it
            if line.lstrip().startswith("time:"):
                wall = time.perf_counter() - start
        p.stdout.read()
    assert p.returncode == 0
    times = json.loads((tmp_path / "r.json").read_text())["times"]
    assert list(times)[:2] == ["start", "read"] and list(times)[-2:] == ["write", "total"]
    assert times["total"] >= sum(v for k, v in times.items() if k != "total") - 1e-6
    # the launch of the interpreter (fork and exec) is the only part of `wall` the process cannot see
    assert 0.8 * wall - 0.1 <= times["total"] <= wall + 0.05, (times, wall)
