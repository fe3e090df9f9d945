"""`einsat optimize --cost cpu` on GPT-2 (#38 item 3): onnxruntime's own log never reaches the
terminal, and every signature is profiled.

Before, the profiler fed the causal mask's GatherND (data [1, S] by index tuples [..., 2]) index
tuples drawn below 5 along an axis of 1: onnxruntime printed "[E:onnxruntime:, sequential_executor.cc
...] Non-zero status code returned while running GatherND node ... invalid index found" past
`-q`, and the profile counted one failure. The run here is the command a user types, in a process
of its own (onnxruntime's default logger is per process), with worker processes for the pieces."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).parents[2]
GPT2 = ROOT / "tests" / "data" / "models" / "hf_gpt2.onnx"
ORT_LOG = re.compile(r"\[[VIWEF]:onnxruntime|Non-zero status code|sequential_executor|ONNXRuntimeError")


@pytest.mark.slow
def test_gpt2_cost_cpu_prints_no_onnxruntime_line_and_profiles_every_signature(tmp_path):
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    cmd = [sys.executable, "-m", "einsat.cli", "optimize", str(GPT2), "-o", str(out), "--fill-weights", "random",
           "--input-shape", "input_ids=1,8", "--input-shape", "attention_mask=1,8", "--cost", "cpu",
           "--iterations", "1", "--profile-budget", "600", "--parallel", "2", "--report", str(report)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # a fresh profile: all timed
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [ln for ln in (done.stdout + done.stderr).splitlines() if ORT_LOG.search(ln)]
    assert printed == []
    assert "could not time" not in done.stderr  # nor had einsat a failure of its own to report
    profile = json.loads(report.read_text())["profile"]
    assert profile["failed"] == 0 and profile["failures"] == {} and profile["left"] == 0
    assert profile["measured"] > 0 and profile["pieces"] >= 2
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("profile:"))
    assert f"over {profile['pieces']} pieces:" in line and "failed" not in line and out.is_file()
