"""DESIGN.md's one-way data flow: ir -> egraph -> rewrites -> extract -> gpu. A package of the
pipeline imports (anywhere in its modules, lazily or not) only packages to its left."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "einsat"
PIPELINE = ["ir", "egraph", "rewrites", "extract", "gpu"]


def imported_einsat_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "einsat" and len(parts) > 1 and parts[1] in PIPELINE:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", PIPELINE)
def test_pipeline_packages_import_only_to_their_left(package):
    allowed = set(PIPELINE[:PIPELINE.index(package) + 1])
    bad = {}
    for path in sorted((PACKAGE / package).rglob("*.py")):
        wrong = imported_einsat_packages(path) - allowed
        if wrong:
            bad[str(path.relative_to(PACKAGE))] = sorted(wrong)
    assert not bad, f"imports against the data flow ir -> egraph -> rewrites -> extract -> gpu: {bad}"
