"""einsat's own pictures: well-formed SVG that shows what it claims, drawn without binaries."""

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

from einsat.egraph import Limits, Session
from einsat.ir import GraphBuilder
from einsat.rewrites.schedule import default_schedule
from einsat.viz.graph import changed_nodes, graph_svg

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str):
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def texts(root) -> list[str]:
    return [t.text for t in root.iter(f"{SVG}text")]


def program():
    b = GraphBuilder("p")
    x, y = b.input("x", (4, 8)), b.input("y", (8, 3))
    return b.build(b.relu(b.matmul(b.add(x, x), y)))


def test_a_program_draws_every_node_and_edge():
    g = program()
    root = parse(g._repr_svg_())
    labels = texts(root)
    for op in ("add", "matmul", "relu"):
        assert op in labels
    assert "[4, 3]" in labels and "x" in labels and "y" in labels
    assert len(root.findall(f".//{SVG}path")) == 5 + 1  # 5 edges (x twice), 1 arrow head


def test_changed_nodes_are_the_new_computations():
    before = program()
    b = GraphBuilder("p")
    x, y = b.input("x", (4, 8)), b.input("y", (8, 3))
    after = b.build(b.relu(b.matmul(b.mul(x, x), y)))
    changed = changed_nodes(before, after)
    ops = {n.name: n.op.value for n in after.nodes}
    assert {ops[n] for n in changed} == {"mul", "matmul", "relu"}  # everything above the change
    assert changed_nodes(before, before) == set()
    root = parse(graph_svg(after, changed=changed))
    fills = [r.get("fill") for r in root.iter(f"{SVG}rect")]
    assert fills.count("#ffd8a8") == 3


def test_a_small_egraph_draws_its_eclasses_holding_enodes():
    s = Session(Limits(nodes=300, iterations=2, time_s=5))
    s.add_graph(program())
    s.run(default_schedule())
    data = s.export()
    root = parse(s._repr_svg_())
    dashed = [r for r in root.iter(f"{SVG}rect") if r.get("stroke-dasharray")]
    assert len(dashed) == len(data.classes)  # one box per e-class
    solid = [r for r in root.iter(f"{SVG}rect") if not r.get("stroke-dasharray")]
    assert len(solid) == sum(len(c.nodes) for c in data.classes.values())


def test_differences_draw_their_regions_on_the_output_grid():
    from einsat.verify.corrector import Differences
    from einsat.verify.regions import Region
    d = Differences(regions={"y": [Region((0, 0), (2, 8)), Region((5, 3), (6, 4))]}, shapes={"y": (8, 8)},
                    boxes={"y": 2}, method={"y": "field"}, positions=4, tests=2, degree=1)
    root = parse(d._repr_svg_())
    red = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "#ff6b6b"]
    assert len(red) == 2
    scale = float(red[0].get("width")) / 8  # the first region covers all 8 columns
    assert float(red[0].get("height")) == 2 * scale and float(red[1].get("width")) == scale
    assert any("2 region(s) differ" in t for t in texts(root))


def test_charts_are_inline_svg():
    from einsat.viz import charts
    phases = [{"step": 0, "phase": "algebra", "nodes": 10}, {"step": 0, "phase": "fold", "nodes": 14}]
    for svg in (charts.growth_svg(phases), charts.cost_bars_svg({"conv": 3.0}, {"fused_conv": 1.0}, "µs"),
                charts.times_svg({"load": 0.1, "saturate": 1.0, "total": 1.1})):
        assert svg.startswith("<svg") and "<?xml" not in svg
        parse(svg)


PACKAGE = Path(__file__).resolve().parents[2] / "einsat"


def einsat_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("einsat"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("einsat")}
    return out


def test_what_ir_draws_with_imports_only_ir():
    """`Graph._repr_svg_` imports viz.graph: it may import ir and viz.svg only (docs/architecture.md's layering)."""
    for name in ("graph.py", "svg.py"):
        assert einsat_imports(PACKAGE / "viz" / name) <= {"einsat.ir.graph", "einsat.viz.svg"}, name


def test_matplotlib_is_imported_lazily():
    for path in (PACKAGE / "viz").glob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any("matplotlib" in ast.unparse(n) for n in top), path.name
