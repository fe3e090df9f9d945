"""`einsat demo`, called as `einsat.cli.main([...])` with captured output."""

from __future__ import annotations

import re

import pytest

from einsat.cli import main
from einsat.cli.demo import demo_model_path
from einsat.cost.models import DEFAULT_COST
from tests.cli.test_optimize import assert_self_contained_report


@pytest.mark.slow
def test_demo_runs_the_bundled_model(capsys, tmp_path):
    assert demo_model_path().is_file() and demo_model_path().stat().st_size < 100_000
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "ResNet-18" in out and re.search(r"conv\s+20\s+3\.6\d G", out)
    assert re.search(r"batchnorm\s+20\s", out)
    ran = re.search(r"ran on numpy in ([\d.]+) s", out)
    assert ran and float(ran.group(1)) > 0
    assert re.search(r"logits\s+\[1, 1000\] f32\s+mean -?[\d.]+", out)
    # the optimizer's report: verified, and cheaper under the default cost model
    assert f"optimizing for the {DEFAULT_COST} cost model" in out and "verification: proved" in out
    speedup = re.search(r"speedup \(modeled\): ([\d.]+)x", out)
    assert speedup and float(speedup.group(1)) > 1.0
    assert "optimized program ran on numpy" in out
    # what each number is: NumPy's times are the reference executor's, the speed-up is modeled for a GPU
    assert "reference executor" in out and "says nothing of the" in out
    (target,) = [ln for ln in out.splitlines() if ln.startswith("target: ")]
    assert "H100" in target and "modeled" in target
    # every bound that shaped the program is work, so a loaded machine prints the same (#27)
    (extraction,) = [ln for ln in out.splitlines() if ln.strip().startswith("extraction:")]
    assert "time limit" not in extraction and "stopped: iteration limit" in out
    assert main(["demo", "--report", str(tmp_path / "demo.html")]) == 0  # seeded: the same numbers again
    again = capsys.readouterr().out
    assert_self_contained_report(tmp_path / "demo.html")  # what `make demo` writes
    line = [ln for ln in out.splitlines() if "argmax" in ln or "speedup" in ln]
    assert line == [ln for ln in again.splitlines() if "argmax" in ln or "speedup" in ln]
