"""Where the run lives (#26): `einsat.optimize` is a short function over the pipeline, the
pipeline imports nothing above it, and partitioning calls the pipeline, not `optimize`."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import einsat

ROOT = Path(einsat.__file__).parent


def einsat_imports(path: Path) -> set[str]:
    """Every einsat module `path` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("einsat")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("einsat"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_optimize_builds_options_and_calls_the_pipeline():
    body = inspect.getsource(einsat.optimize).split('"""')[-1]  # after the docstring
    code = [line for line in body.splitlines() if line.strip()]
    assert len(code) <= 8, "\n".join(code)
    assert "Options.of(" in body and "return run(" in body


def test_the_pipeline_imports_nothing_above_it_and_partition_does_not_import_optimize():
    above = ("einsat.partition", "einsat.optimize", "einsat.cli", "einsat.progress")
    for path in sorted((ROOT / "pipeline").glob("*.py")):
        bad = sorted(m for m in einsat_imports(path) if m.startswith(above) or m in ("einsat", "einsat.run"))
        assert not bad, f"{path.name} imports {bad}"
    for path in sorted((ROOT / "partition").glob("*.py")):
        bad = sorted(m for m in einsat_imports(path) if m.startswith(("einsat.optimize", "einsat.cli")))
        assert not bad, f"partition/{path.name} imports {bad}"
    assert any(m.startswith("einsat.pipeline") for m in einsat_imports(ROOT / "partition" / "executors.py"))


def test_the_old_top_level_names_are_gone():
    """One name per module: einsat.measure, einsat.memory and einsat.optimize_report were aliases of the
    pipeline's modules after #26; they are removed (#41), and nothing in the repository names them."""
    import importlib

    for old in ("einsat.measure", "einsat.memory", "einsat.optimize_report"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    repo = ROOT.parent
    pattern = re.compile(r"einsat\.(measure|memory|optimize_report)\b|from einsat import (measure|memory)\b")
    for path in [*repo.glob("einsat/**/*.py"), *repo.glob("tests/**/*.py"), *repo.glob("benchmarks/*.py"),
                 *repo.glob("scripts/*.py"), *repo.glob("docs/*.md"), repo / "README.md"]:
        # this test; the fingerprint script, which also computes with older checkouts that have them
        if path.resolve() in (Path(__file__).resolve(), (repo / "scripts" / "fingerprints.py").resolve()):
            continue
        assert not pattern.search(path.read_text()), path
