"""The CLI names the machine it optimizes for before its search, and says when that is not this one."""

from __future__ import annotations

import pytest

from einsat.cli import main
from tests.cli.test_optimize import small_model


def _target_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("target: ")]


@pytest.mark.parametrize("driver", [False, True])
def test_optimize_names_its_target_and_whether_this_machine_is_it(tmp_path, capsys, monkeypatch, driver):
    from einsat.gpu import device

    monkeypatch.setattr(device, "cuda_driver_present", lambda: driver)  # planted: holds on any machine
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "out.onnx"), "--iterations", "1",
                 "--search-seconds", "600"]) == 0
    (line,) = _target_lines(capsys.readouterr().err)  # on stderr, with the progress: stdout is the report
    assert "H100" in line and "modeled" in line, line
    assert ("this machine has no NVIDIA GPU" in line and "--cost cpu" in line) == (not driver), line


def test_the_cpu_target_is_this_machine(tmp_path, capsys, monkeypatch):
    from einsat.cli.target import target_line

    assert target_line("cpu", 2) == "target: this machine's CPU, onnxruntime at 2 intra-op threads (measured here)"
    assert "1 intra-op thread (" in target_line("cpu")
    assert "no NVIDIA GPU" not in target_line("cpu")


def test_quiet_prints_no_target(tmp_path, capsys):
    small_model(tmp_path / "block.onnx")
    assert main(["optimize", str(tmp_path / "block.onnx"), "-o", str(tmp_path / "out.onnx"), "--iterations", "1",
                 "--search-seconds", "600", "-q"]) == 0
    captured = capsys.readouterr()
    assert _target_lines(captured.out + captured.err) == []
