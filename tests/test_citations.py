"""The repository reads on its own: nothing cites a file outside it, and the architecture page
names every package (#26 item 4).

A clone has only what is committed: a comment, docstring or page that sends the reader to a
design note, a style guide or a paper kept beside the checkout sends them nowhere. What such a
note said is written where it is needed, or in `docs/architecture.md`, which cites papers by
title.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ["einsat", "tests", "docs", "scripts", "benchmarks", "notebooks"]
SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".sh", ".json", ".ipynb"}
# files kept beside the checkout, never in it (spelled in pieces so that this file does not cite them)
OUTSIDE = ["DESIGN" + ".md", "STYLE" + ".md", "../" + "shared", "/work/" + "shared", "shared/" + "papers",
           "research/" + "gpu.md"]


def scanned_files():
    yield from (ROOT / name for name in ("README.md", "Makefile", "pyproject.toml"))
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.is_file() and path.suffix in SUFFIXES and not any(p.startswith(".") or p == "__pycache__"
                                                                      for p in parts):
                yield path


def test_nothing_cites_a_file_outside_the_repository():
    found = []
    for path in scanned_files():
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        for name in OUTSIDE:
            for m in re.finditer(re.escape(name), text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not found, "files outside the repository cited (say what they meant, or cite docs/):\n" + "\n".join(found)


def test_the_scan_sees_what_it_should():
    """The scan can fail: it reads the packages' sources and the docs."""
    files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert {"README.md", "docs/architecture.md", "einsat/__init__.py", "tests/test_layering.py"} <= files


def test_every_relative_link_of_the_docs_resolves_inside_the_repository():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for link in re.findall(r"\]\(([^)#\s]+)\)", page.read_text()):
            if "://" in link or link.startswith("mailto:"):
                continue
            target = (page.parent / link).resolve()
            assert target.exists(), f"{page.relative_to(ROOT)} links to {link}, which is not in the repository"
            assert ROOT in target.parents, f"{page.relative_to(ROOT)} links outside the repository: {link}"



def test_the_architecture_page_names_every_package():
    page = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(p.name for p in (ROOT / "einsat").iterdir() if (p / "__init__.py").exists())
    missing = [name for name in packages if f"{name}/" not in page]
    assert not missing, f"docs/architecture.md does not describe the packages {missing}"
