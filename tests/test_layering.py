"""The one-way data flow of docs/architecture.md, for every package of einsat, and no import cycles inside one.

Every `import` and `from ... import` in every module counts: at module level, inside functions
(a lazy import is still a dependency: it fails or cycles at the first call instead of at import)
and under `if TYPE_CHECKING:` (a type a module needs is a dependency of its design). `from a.b
import c` depends on the module `a.b.c` when there is one, else on `a.b`; the parent packages'
`__init__` that Python runs on the way do not count.

The packages, in the order data flows (docs/architecture.md): ir -> egraph -> rewrites -> extract -> ir ->
runtime. `frontend` produces ir; `runtime` depends on ir alone, and `gpu` is runtime's CuPy
backend (runtime names it lazily; gpu builds on runtime's loop); `verify`'s PET part (boxes,
field evaluation, corrector, correction, regions) depends on ir alone and only its numeric
equivalence on runtime; `testing` may use everything below the top level; the top level (the
public API, `optimize`, the command line) anything. `errors` and `budget` (a deadline and a
cancellation flag, no einsat imports) are below everything. `viz` draws ir graphs and e-graph
exports; a package may import it only inside a rich-display hook (`_repr_svg_`, `_repr_html_`:
presentation, called by a notebook, never by the pipeline).
"""

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent / "einsat"
TOP = "<top>"  # einsat/__init__.py, optimize, its report, progress, the command line
BASE = {"einsat.errors", "einsat.budget"}  # the "errors" tier: below everything
PIPELINE = ["ir", "egraph", "rewrites", "extract"]
BELOW_TOP = PIPELINE + ["cost", "runtime", "gpu", "verify", "frontend"]

# package -> the packages it may import (besides its own and `errors`)
ALLOWED = {
    "ir": set(),
    "egraph": {"ir"},
    "rewrites": {"ir", "egraph", "verify"},  # PET's generator calls the corrector (ir alone)
    "cost": {"ir"},  # cost models and the profile database: no egglog, no runtime (the GPU machine uses them)
    "extract": {"ir", "egraph", "rewrites", "cost"},
    "runtime": {"ir", "gpu"},
    "gpu": {"ir", "runtime", "cost"},
    "verify": {"ir", "runtime"},
    "frontend": {"ir"},
    "testing": set(BELOW_TOP),
    "viz": {"ir", "egraph"},
    "cli": set(BELOW_TOP) | {"testing", "viz", "partition", TOP},
    "partition": set(BELOW_TOP) | {TOP},  # big models: cuts programs and calls optimize on the pieces
    TOP: set(BELOW_TOP) | {"testing", "cli", "viz", "partition"},
    "errors": set(),
}
# verify modules that may use the runtime; the rest of verify (PET's corrector) stands on ir alone
VERIFY_ON_RUNTIME = {"einsat.verify", "einsat.verify.numeric", "einsat.verify.precision"}
# (importer, imported) pairs that break the rules above, each with why it stays for now
KNOWN: set[tuple[str, str]] = set()
KNOWN_CYCLES: list[set[str]] = []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def package(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and (ROOT / parts[1]).is_dir():
        return parts[1]
    return "errors" if module in BASE else TOP


def imports(module: str) -> set[str]:
    """The einsat modules `module` imports, anywhere in it."""
    found = set()
    tree = ast.parse(MODULES[module].read_text())
    display = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.startswith("_repr_")
               for n in ast.walk(f) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("einsat.viz")}
    for node in ast.walk(tree):
        if id(node) in display:  # a rich-display hook drawing with viz (see the module docstring)
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("einsat") and name != module:
                found.add(name)
    return found


GRAPH = {m: imports(m) for m in MODULES}
PACKAGES = sorted({package(m) for m in MODULES})


def test_every_package_has_a_place_in_the_table():
    assert set(PACKAGES) <= set(ALLOWED), f"add {set(PACKAGES) - set(ALLOWED)} to ALLOWED"
    assert {"ir", "egraph", "rewrites", "extract", "runtime", "gpu", "verify", "frontend", "testing"} <= set(PACKAGES)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_packages_import_only_what_the_data_flow_allows(pkg):
    allowed = ALLOWED[pkg] | {pkg, "errors"}
    bad = sorted(f"{m} -> {d}" for m in MODULES if package(m) == pkg for d in GRAPH[m]
                 if package(d) not in allowed and (m, d) not in KNOWN)
    assert not bad, f"{pkg} may import only {sorted(allowed)}:\n" + "\n".join(bad)


def test_rewrites_use_only_the_pet_part_of_verify():
    """A rewrite generator may call PET's corrector, which stands on ir alone, never the numeric
    check on the runtime (docs/architecture.md: the GPU machine and the e-graph need no runtime there)."""
    bad = sorted(f"{m} -> {d}" for m in MODULES if package(m) == "rewrites" for d in GRAPH[m] if d in VERIFY_ON_RUNTIME)
    assert not bad, "\n".join(bad)


def test_the_pet_part_of_verify_stands_on_ir_alone():
    bad = sorted(f"{m} -> {d}" for m in MODULES if package(m) == "verify" and m not in VERIFY_ON_RUNTIME
                 for d in GRAPH[m] if package(d) not in {"ir", "verify", "errors"}
                 or d in VERIFY_ON_RUNTIME)
    assert not bad, "\n".join(bad)


def test_known_exceptions_still_exist():
    """An exception that no longer happens must leave the lists (they only shrink)."""
    assert all(d in GRAPH[m] for m, d in KNOWN)
    for cycle in KNOWN_CYCLES:
        assert cycle in [set(c) for c in cycles(package(min(cycle)))]


def cycles(pkg: str) -> list[list[str]]:
    """The import cycles among the modules of `pkg`: its strongly connected components."""
    nodes = sorted(m for m in MODULES if package(m) == pkg)
    at = {m: k for k, m in enumerate(nodes)}
    edges = [(at[m], at[d]) for m in nodes for d in GRAPH[m] if d in at]
    rows, cols = zip(*edges) if edges else ((), ())
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=True, connection="strong")
    groups = [[m for m in nodes if label[at[m]] == k] for k in set(label)]
    return sorted(g for g in groups if len(g) > 1)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_import_cycles_inside_a_package(pkg):
    found = [c for c in cycles(pkg) if set(c) not in KNOWN_CYCLES]
    assert not found, f"import cycles inside {pkg}: {found}"


def test_a_planted_cycle_and_a_planted_upward_import_are_caught(monkeypatch):
    monkeypatch.setitem(GRAPH, "einsat.ir.types", GRAPH["einsat.ir.types"] | {"einsat.ir.graph"})
    assert any({"einsat.ir.types", "einsat.ir.graph"} <= set(c) for c in cycles("ir"))
    monkeypatch.setitem(GRAPH, "einsat.verify.corrector", GRAPH["einsat.verify.corrector"] | {"einsat.runtime"})
    with pytest.raises(AssertionError, match="corrector -> einsat.runtime"):
        test_the_pet_part_of_verify_stands_on_ir_alone()
