"""Every Python and command-line example in README.md, docs/*.md and notebooks/README.md runs as
written.

The ```python blocks of one file run in order in one namespace, like a notebook's cells (a later
block may use an earlier one's names), in a fresh working directory that holds `model.onnx`, the
file a reader brings (here a small CNN, `small_model`), under an empty cache (`cost="cpu"`
profiles). A block that cannot run here (a GPU, a cluster) is fenced ```python no-run and its first
line is a comment saying why, "# not run by the tests: <reason>", so that the reader sees it.

The `einsat ...` (or `.venv/bin/einsat ...`) lines of the other fenced blocks are the command
line's examples: each runs in such a directory (`einsat.cli.main`, in this process) and must exit
0 (marked slow: each is a whole run). A block of them that cannot run here is fenced
``` no-run with the same first line. Other shell lines (make, scripts) are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "notebooks" / "README.md"]
FENCE = re.compile(r"^(```+|~~~+)\s*(.*)$")
NO_RUN = "no-run"
REASON = re.compile(r"^# not run by the tests: \S.{10,}")


def blocks(path: Path) -> list[tuple[int, str, str]]:
    """(first line of the code, 1-based; info string; code) of every fenced block of `path`."""
    found, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1)), None)
        assert close is not None, f"{path.name}:{i + 1}: a fenced block is never closed"
        found.append((i + 2, m.group(2).strip(), "\n".join(lines[i + 1:close]) + "\n"))
        i = close + 1
    return found


def python_blocks(path: Path) -> list[tuple[int, str, str]]:
    return [b for b in blocks(path) if b[1].split()[:1] in (["python"], ["py"], ["python3"])]


COMMAND = re.compile(r"^(?:\.venv/bin/)?einsat\s+(\S.*)$")


def command_blocks(path: Path) -> list[tuple[int, str, list[tuple[int, list[str]]]]]:
    """(first line, info string, [(line, argv)]) of every non-Python block with `einsat` command
    lines; argv without the program name, the line's trailing comment dropped."""
    import shlex

    found = []
    for line, info, code in blocks(path):
        if info.split()[:1] in (["python"], ["py"], ["python3"]):
            continue
        commands = [(line + k, shlex.split(m.group(1), comments=True))
                    for k, text in enumerate(code.splitlines()) if (m := COMMAND.match(text.strip()))]
        if commands:
            found.append((line, info, commands))
    return found


def small_model(path: Path) -> None:
    """A small CNN as an ONNX file: two convolutions with ReLU and a residual add, pooled, then a
    linear layer (a reader's own model.onnx, small enough that every example runs in seconds)."""
    import einsat

    rng = np.random.default_rng(0)
    b = einsat.GraphBuilder("small_cnn")
    x = b.input("x", (1, 3, 16, 16))
    w1 = b.weight("conv1.weight", rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3)
    w2 = b.weight("conv2.weight", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2)
    h = b.relu(b.conv(x, w1, padding=1))
    h = b.relu(b.add(b.conv(h, w2, padding=1), h))
    pooled = b.reshape(b.reduce_mean(h, axes=(2, 3), keepdims=0), shape=(1, 8))
    fc = b.weight("fc.weight", rng.standard_normal((8, 10)).astype(np.float32) * 0.3)
    g = b.build(b.matmul(pooled, fc), names=["logits"])
    einsat.save_onnx(g, path)


def test_the_examples_are_found():
    counts = {p.relative_to(ROOT).as_posix(): len(python_blocks(p)) for p in FILES}
    assert counts["README.md"] >= 4 and sum(counts.values()) >= 7, counts


def unexplained(path: Path) -> list[str]:
    """The python and command blocks of `path` fenced no-run without a reason, or with one but
    fenced to run."""
    bad = []
    commands = {line for line, _, _ in command_blocks(path)}
    for line, info, code in [b for b in blocks(path) if b in python_blocks(path) or b[0] in commands]:
        says_why = REASON.match(code) is not None
        if (NO_RUN in info.split()) != says_why:
            bad.append(f"{path.name}:{line}: " + ("fenced to run, but says it is not run" if says_why else
                                                  f"a `{NO_RUN}` block must open with "
                                                  "'# not run by the tests: <reason>'"))
    return bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_block_not_run_says_why(path):
    assert not unexplained(path)


def test_a_block_not_run_without_a_reason_is_caught(tmp_path):
    md = tmp_path / "doc.md"
    md.write_text("```python no-run\nprint(1)\n```\n\n```python no-run\n# not run by the tests: it needs a GPU\n"
                  "print(2)\n```\n\n```python\n# not run by the tests: but fenced to run\nprint(3)\n```\n")
    assert [b.split(":")[1] for b in unexplained(md)] == ["2", "11"]


# the two longest (6-8 s) run in make test-slow, so that make test stays within 6 minutes
SLOW_DOCS = {"docs/pipeline.md", "docs/measured.md"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow)
                                  if p.relative_to(ROOT).as_posix() in SLOW_DOCS else p
                                  for p in FILES if python_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_python_examples_run_as_written(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # cost="cpu" profiles: not the user's cache
    small_model(tmp_path / "model.onnx")
    namespace = {"__name__": f"docs:{path.name}"}
    for line, info, code in python_blocks(path):
        if NO_RUN in info.split():
            continue
        # the code at its own line numbers, so that a traceback points into the markdown file
        exec(compile("\n" * (line - 1) + code, str(path), "exec"), namespace)


def test_the_command_line_examples_are_found():
    counts = {p.relative_to(ROOT).as_posix(): sum(len(c) for _, _, c in command_blocks(p)) for p in FILES}
    assert counts["README.md"] >= 1 and counts["docs/partition.md"] >= 3, counts
    md = ROOT / "docs" / "partition.md"
    assert ["optimize", "model.onnx", "-o", "out.onnx", "--parallel", "2"] in \
        [argv for _, _, c in command_blocks(md) for _, argv in c]  # the comment after it dropped


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in FILES if command_blocks(p)], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_command_line_examples_run_as_written(path, tmp_path, monkeypatch, capsys):
    from einsat.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    small_model(tmp_path / "model.onnx")
    for _, info, commands in command_blocks(path):
        if NO_RUN in info.split():
            continue
        for line, argv in commands:
            status = main(argv)
            assert status == 0, f"{path.name}:{line}: einsat {' '.join(argv)} exited {status}:\n" \
                                f"{capsys.readouterr().err[-2000:]}"
