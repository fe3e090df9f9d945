"""The notebooks (jupytext percent `.py` files) run top to bottom; their asserts are the checks.

Each notebook is read with jupytext and its code cells run in order in one fresh namespace,
compiled at their own line numbers, so a failing assert points at the notebook's line.
"""

from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(first line, source) of each code cell, in order."""
    text = path.read_text()
    cells, pos = [], 0
    for cell in jupytext.read(path).cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        at = text.find(cell.source, pos)
        assert at >= 0, f"{path.name}: a code cell's source is not in the file as written"
        cells.append((text.count("\n", 0, at), cell.source))
        pos = at + len(cell.source)
    return cells


def test_the_notebooks_are_found():
    assert [p.stem[:2] for p in NOTEBOOKS][:4] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path):
    namespace = {"__name__": "__main__", "__file__": str(path)}
    cells = code_cells(path)
    assert len(cells) >= 5
    for first_line, source in cells:
        exec(compile("\n" * first_line + source, str(path), "exec"), namespace)  # noqa: S102 (running notebooks is the point)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_explains_and_checks(path):
    """Markdown between the code, and asserts in the code: a notebook that only prints checks nothing."""
    nb = jupytext.read(path)
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    assert len(markdown) >= 4 and markdown[0].source.startswith("# ")
    asserts = sum(src.count("assert") for _, src in code_cells(path))
    assert asserts >= 5, f"{path.name} has {asserts} asserts"
    assert path.name in (ROOT / "notebooks" / "README.md").read_text()
