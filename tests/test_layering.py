"""The layering of einsat: its packages in one strict order, and no import cycles at all.

The rule. Every package has one place in `ORDER`, a total order from the bottom up:

    errors < ir < cost < runtime < gpu < verify < egraph < rewrites < extract < frontend
           < viz < testing < pipeline < partition < <top> < cli

A module may import the modules of its own package and of the packages to its left, and
nothing else; there is no exemption, no listed exception and no kind of import that does not
count. Separately, no import cycle exists among einsat's modules, inside a package or across
packages (a cycle across packages would also break the order; it is checked on its own, over
every module). And the two libraries the GPU machine lacks enter where their layer starts:
egglog in `egraph`, HiGHS (`highspy`) in `extract`; no package to the left imports them.

Where a package needs what only a package above it has, the one above registers it by name
from the top level, and the one below looks it up: backends with `runtime.register_backend`
(`einsat.backends` registers `gpu`'s `cupy`), pictures with `ir.display.register_drawer`
(`einsat.display` registers `viz`'s drawings for the rich display of ir, egraph and verify).
`einsat/__init__.py` imports both modules, and Python runs it before any module of einsat.

What counts as an import: every `import` and `from ... import` of every module, at module level,
inside functions (a lazy import is still a dependency: it fails or cycles at the first call
instead of at import) and under `if TYPE_CHECKING:` (a type a module needs is a dependency of its
design). `from a.b import c` depends on the module `a.b.c` when there is one, else on `a.b`; the
parent packages' `__init__` that Python runs on the way do not count. An import by a computed
name (`importlib.import_module`, `__import__`) is not seen by these rules, so it may name only
modules of its own package (as `einsat.egraph`'s lazy attributes do), and a test says so.

What is a package: `einsat/<name>/` is the package `<name>`; `einsat/errors.py` and
`einsat/budget.py` (exceptions, a deadline and a cancellation flag; no einsat imports) are the
package `errors`; every other module directly in `einsat/` (`__init__`, `optimize`, the public
API) is `<top>`. A package missing from the tree (`pipeline` while it is being built) keeps its
place in the order; a package in the tree must have one.

Why this order (each package's place is set by what it needs):
- `ir`: the program, the op registry, signatures, ONNX in and out.
- `cost`: the cost models, the profile database and onnxruntime's fusion units, on ir alone
  (the GPU machine computes predictions with neither egglog nor HiGHS).
- `runtime`: the interpreter loop, its backends found by name, the one timing loop of the
  profilers, which writes into cost's database. A backend outside it registers itself by name
  from above (`einsat.backends` registers `gpu`'s `cupy`), so runtime imports no backend.
- `gpu`: the CuPy backend; builds on runtime's loop and writes cost's database.
- `verify`: PET's corrector (boxes, field evaluation, corrections) and the numeric and
  precision checks, which run programs on the runtime. It sits below the e-graph, so a rewrite
  generator calls the corrector as any import to its left. No separate rule keeps the PET part
  on ir alone: with runtime below the e-graph, the corrector importing the runtime would bring
  neither egglog nor HiGHS, nor a cycle, and the order is the whole rule.
- `egraph`, `rewrites`, `extract`: the search, in the order data flows through it.
- `frontend`: TensorSSA's functionalization, producing ir (it needs ir alone; it sits here so
  that nothing of the search depends on it).
- `viz`: pictures of programs, e-graphs and corrections.
- `testing`: hypothesis strategies and fuzzing over everything of the search.
- `pipeline`: the phases of a run under one budget; `partition` calls it for each piece of a
  big model; `<top>` is the public API (`einsat.optimize`, `einsat.run`, which may partition);
  `cli`, the command line, calls the public API and so sits above it.
"""

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent / "einsat"
TOP = "<top>"  # einsat/__init__.py, optimize, the public API
BASE = {"einsat.errors", "einsat.budget"}  # the package "errors": below everything
ORDER = ["errors", "ir", "cost", "runtime", "gpu", "verify", "egraph", "rewrites", "extract", "frontend",
         "viz", "testing", "pipeline", "partition", TOP, "cli"]
RANK = {pkg: k for k, pkg in enumerate(ORDER)}
# third-party libraries that enter at one layer: no package to its left may import them
ENTERS_AT = {"egglog": "egraph", "highspy": "extract"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def package(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and (ROOT / parts[1]).is_dir():
        return parts[1]
    return "errors" if module in BASE else TOP


def imported_names(module: str) -> list[str]:
    """Every absolute module name `module` imports, anywhere in it (see the module docstring)."""
    names = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                      for a in node.names]
    return names


def imports(module: str) -> set[str]:
    """The einsat modules `module` imports, anywhere in it."""
    found = set()
    for name in imported_names(module):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("einsat") and name != module:
            found.add(name)
    return found


GRAPH = {m: imports(m) for m in MODULES}
PACKAGES = sorted({package(m) for m in MODULES}, key=lambda p: RANK.get(p, len(ORDER)))


def upward_imports(pkg: str) -> list[str]:
    """The imports of `pkg`'s modules that the order forbids: of a package not to its left."""
    return sorted(f"{m} -> {d}" for m in MODULES if package(m) == pkg for d in GRAPH[m]
                  if package(d) != pkg and RANK.get(package(d), len(ORDER)) >= RANK[pkg])


def cycles(modules=None) -> list[list[str]]:
    """The import cycles among `modules` (default: all of einsat's): the strongly connected
    components of more than one module."""
    nodes = sorted(MODULES if modules is None else modules)
    at = {m: k for k, m in enumerate(nodes)}
    edges = [(at[m], at[d]) for m in nodes for d in GRAPH[m] if d in at]
    rows, cols = zip(*edges) if edges else ((), ())
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=True, connection="strong")
    groups = [[m for m in nodes if label[at[m]] == k] for k in set(label)]
    return sorted(g for g in groups if len(g) > 1)


def test_every_package_has_one_place_in_the_order():
    assert len(set(ORDER)) == len(ORDER)
    assert set(PACKAGES) <= set(ORDER), f"give {sorted(set(PACKAGES) - set(ORDER))} a place in ORDER"
    assert {"errors", "ir", "cost", "runtime", "gpu", "verify", "egraph", "rewrites", "extract", "frontend",
            "viz", "testing", "partition", TOP, "cli"} <= set(PACKAGES)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_a_package_imports_only_packages_to_its_left(pkg):
    bad = upward_imports(pkg)
    left = ORDER[:RANK[pkg]]
    assert not bad, f"{pkg} may import only {left} (and itself):\n" + "\n".join(bad)


def test_no_import_cycles_inside_or_across_packages():
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(
        " <-> ".join(c) + f"   (packages {sorted({package(m) for m in c})})" for c in found)


def test_no_cycles_between_packages():
    """The package graph itself (an edge where any module of one imports any of another) is
    acyclic: the order above is one of its topological orders."""
    edges = {(package(m), package(d)) for m in MODULES for d in GRAPH[m] if package(m) != package(d)}
    nodes = sorted({p for e in edges for p in e})
    at = {p: k for k, p in enumerate(nodes)}
    rows, cols = zip(*[(at[a], at[b]) for a, b in edges]) if edges else ((), ())
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(nodes), len(nodes)))
    n, label = connected_components(graph, directed=True, connection="strong")
    tangled = [sorted(p for p in nodes if label[at[p]] == k) for k in range(n)]
    assert all(len(g) == 1 for g in tangled), [g for g in tangled if len(g) > 1]


@pytest.mark.parametrize("library", sorted(ENTERS_AT))
def test_the_libraries_the_gpu_machine_lacks_enter_at_their_layer(library):
    """egglog enters at `egraph`, HiGHS at `extract`: no package to the left imports them, so
    `cost`, `runtime`, `gpu` and `verify` run on the GPU machine, which has neither."""
    bad = sorted(f"{m} imports {name}" for m in MODULES if RANK[package(m)] < RANK[ENTERS_AT[library]]
                 for name in imported_names(m) if name.split(".")[0] == library)
    assert not bad, "\n".join(bad)


def test_a_planted_cycle_inside_a_package_is_caught(monkeypatch):
    monkeypatch.setitem(GRAPH, "einsat.ir.types", GRAPH["einsat.ir.types"] | {"einsat.ir.graph"})
    assert any({"einsat.ir.types", "einsat.ir.graph"} <= set(c) for c in cycles())
    with pytest.raises(AssertionError, match="einsat.ir.graph"):
        test_no_import_cycles_inside_or_across_packages()


def test_a_planted_upward_import_and_its_cycle_across_packages_are_caught(monkeypatch):
    """The runtime naming the CuPy backend again (gpu builds on runtime.backend): an upward
    import, a module cycle across runtime and gpu, and a cycle between the two packages."""
    monkeypatch.setitem(GRAPH, "einsat.runtime.backend", GRAPH["einsat.runtime.backend"] | {"einsat.gpu.backend_cupy"})
    assert upward_imports("runtime") == ["einsat.runtime.backend -> einsat.gpu.backend_cupy"]
    with pytest.raises(AssertionError, match="runtime.backend -> einsat.gpu.backend_cupy"):
        test_a_package_imports_only_packages_to_its_left("runtime")
    assert any({"einsat.runtime.backend", "einsat.gpu.backend_cupy"} <= set(c) for c in cycles())
    with pytest.raises(AssertionError, match="'gpu', 'runtime'"):
        test_no_cycles_between_packages()
    monkeypatch.setitem(GRAPH, "einsat.ir.graph", GRAPH["einsat.ir.graph"] | {"einsat.frontend"})
    assert "einsat.ir.graph -> einsat.frontend" in upward_imports("ir")


def computed_imports_outside(module: str, source: str) -> list[str]:
    """The calls of `importlib.import_module(name)` or `__import__(name)` in `source` (the text of
    `module`) whose name is not a literal (or an f-string with a literal head) inside `module`'s
    own package."""
    own = f"einsat.{package(module)}." if (ROOT / package(module)).is_dir() else None
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args and (
                isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            continue
        arg = node.args[0]
        head = arg.value if isinstance(arg, ast.Constant) else (
            arg.values[0].value if isinstance(arg, ast.JoinedStr) and arg.values
            and isinstance(arg.values[0], ast.Constant) else None)
        if not (isinstance(head, str) and own and head.startswith(own)):
            bad.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_imports_by_computed_name_stay_inside_their_package():
    """Imports by a computed name escape the checks above: they stay inside their package."""
    bad = [line for m, path in MODULES.items() for line in computed_imports_outside(m, path.read_text())]
    assert not bad, "\n".join(bad)
    assert computed_imports_outside("einsat.egraph", 'importlib.import_module(f"einsat.egraph.{n}")') == []
    assert computed_imports_outside("einsat.runtime.interpreter", 'importlib.import_module("einsat.gpu.lower")')
    assert computed_imports_outside("einsat.runtime.interpreter", "__import__(name)")


def test_pictures_cross_the_layers_by_registration(monkeypatch):
    """ir, egraph and verify draw in a notebook without importing viz: their `_repr_svg_` asks
    `einsat.ir.display` for a drawer the top level registered (`einsat.display`)."""
    from einsat.ir import GraphBuilder, display
    b = GraphBuilder("g")
    g = b.build(b.relu(b.input("x", (2,))))
    assert g._repr_svg_().lstrip().startswith("<svg")
    monkeypatch.setattr(display, "_DRAWERS", {})
    assert g._repr_svg_() is None  # nothing registered: a notebook shows the repr
    display.register_drawer("graph", lambda graph: f"<svg>{graph.name}</svg>")
    assert g._repr_svg_() == "<svg>g</svg>"
