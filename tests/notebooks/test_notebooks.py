"""The notebooks (jupytext percent `.py` files) run top to bottom in a Jupyter kernel, as
`make notebooks` runs them (`scripts/run_notebooks.py`, into build/notebooks/): their asserts
are the checks, and each executed notebook must show at least one picture and no error.
"""

import importlib.util
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
IMAGES = ("image/svg+xml", "image/png")


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


# 02 optimizes a model in its kernel (17-26 s on the 2-core machine) and 03 runs PET's corrections
# (6 s): make test-slow
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem[:2] in ("02", "03") else p
                                  for p in NOTEBOOKS], ids=lambda p: p.stem)
def test_notebook_runs_in_a_kernel_and_shows_pictures(path, tmp_path):
    assert len(code_cells(path)) >= 5
    nb = _runner().execute(path, tmp_path)  # a failing cell raises, with the notebook's traceback
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if o.output_type in ("display_data", "execute_result")
              and any(m in o.get("data", {}) for m in IMAGES)]
    assert images, f"{path.name} shows no picture"
    assert (tmp_path / f"{path.stem}.ipynb").is_file()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_explains_and_checks(path):
    """Markdown between the code, and asserts in the code: a notebook that only prints checks nothing."""
    nb = jupytext.read(path)
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    assert len(markdown) >= 4 and markdown[0].source.startswith("# ")
    asserts = sum(src.count("assert") for _, src in code_cells(path))
    assert asserts >= 5, f"{path.name} has {asserts} asserts"
    assert path.name in (ROOT / "notebooks" / "README.md").read_text()


def test_the_kernel_runs_without_warnings(tmp_path, capfd):
    """Over TCP the kernel warns, once per notebook, that its traffic is not encrypted: the runner
    talks to it over IPC (a Unix socket in a private directory) instead."""
    (tmp_path / "00_tiny.py").write_text("# %%\nprint(6 * 7)\n")
    nb = _runner().execute(tmp_path / "00_tiny.py", tmp_path / "out")
    assert nb.cells[0].outputs[0]["text"] == "42\n"
    err = capfd.readouterr().err
    assert "WARNING" not in err and "encryption" not in err, err
