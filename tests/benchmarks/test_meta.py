"""benchmarks.meta: what every results file records about its run."""

from __future__ import annotations

import re

from benchmarks import meta


def test_a_run_names_its_commit_machine_versions_and_date():
    m = meta.run_meta(cost="h100")
    assert m["cost"] == "h100"
    assert re.fullmatch(r"[0-9a-f]{40}", m["commit"]) and isinstance(m["dirty"], bool)
    assert "CPUs" in m["machine"] and m["load_average"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", m["date"])
    assert {"python", "numpy", "onnx", "onnxruntime"} <= set(m["versions"])
    line = meta.meta_line(m)
    assert f"Commit `{m['commit']}`" in line and m["date"] in line and m["versions"]["numpy"] in line


def test_modeled_meta_keeps_the_commit_it_is_given():
    m = meta.modeled_meta("abc1234", cost="h100")
    assert m["commit"] == "abc1234" and m["modeled"] and m["cost"] == "h100" and "versions" in m


def test_a_results_file_written_meanwhile_is_not_uncommitted_code(tmp_path):
    # a run whose checkout differs from HEAD only under benchmarks/results ran the commit's code
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "einsat").mkdir()
    (tmp_path / "einsat" / "a.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results" / "r.md").write_text("old\n")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    assert not meta.dirty(tmp_path)
    (tmp_path / "benchmarks" / "results" / "r.md").write_text("new\n")
    assert not meta.dirty(tmp_path)
    (tmp_path / "einsat" / "a.py").write_text("x = 2\n")
    assert meta.dirty(tmp_path)
