"""Rich display in a notebook, drawn by a package above the one that is displayed.

A class of a low package (ir's `Graph`, the e-graph `Session`, PET's corrections) shows itself in
a notebook through `_repr_svg_`, which asks this registry for its picture by kind; the drawing
code (`einsat.viz`, above those packages in the layering) is registered from the top level
(`einsat.display`, imported by `einsat/__init__.py`), so no package imports one above it.

    register_drawer("graph", lambda g: graph_svg(g))   # what the top level does
    draw("graph", g)                                    # what `Graph._repr_svg_` returns

A kind nobody registered draws nothing (`None`: a notebook then shows the object's repr).
"""

from __future__ import annotations

from collections.abc import Callable

_DRAWERS: dict[str, Callable[[object], str]] = {}


def register_drawer(kind: str, draw_svg: Callable[[object], str]) -> None:
    """Draw objects of `kind` ("graph", "egraph", "regions") with `draw_svg(obj) -> SVG text`;
    registering a kind again replaces its drawer."""
    _DRAWERS[kind] = draw_svg


def draw(kind: str, obj) -> str | None:
    """`obj`'s picture as SVG text by the drawer of `kind`, or None when there is none."""
    drawer = _DRAWERS.get(kind)
    return None if drawer is None else drawer(obj)
