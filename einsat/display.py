"""The drawers of einsat's rich display, registered with `einsat.ir.display` by kind.

`Graph._repr_svg_` (ir), `Session._repr_svg_` (egraph) and `Differences._repr_svg_` (verify)
ask `einsat.ir.display.draw` for their pictures; the pictures are `einsat.viz`'s, which sits
above those packages, so the top level (which may import every package) registers them here.
`einsat/__init__.py` imports this module, and Python runs that before any module of einsat, so
a notebook draws whichever module it imported first. `einsat.viz` is imported at the first
picture, not here.
"""

from __future__ import annotations

from einsat.ir.display import register_drawer


def graph_svg(graph) -> str:
    """A program as a layered DAG (`einsat.viz.graph`), titled by its name."""
    from einsat.viz.graph import graph_svg as draw
    return draw(graph, title=graph.name)


def egraph_svg(session) -> str:
    """An e-graph session's current export (`einsat.viz.egraph`)."""
    from einsat.viz.egraph import egraph_svg as draw
    return draw(session.export())


def regions_svg(differences) -> str:
    """PET's corrector's regions on each output's grid (`einsat.viz.regions`)."""
    from einsat.viz.regions import differences_svg
    return differences_svg(differences)


register_drawer("graph", graph_svg)
register_drawer("egraph", egraph_svg)
register_drawer("regions", regions_svg)
