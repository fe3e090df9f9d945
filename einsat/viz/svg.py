"""A few SVG elements as strings: enough for boxes, labels and arrows, escaped properly."""

from __future__ import annotations

import re
from html import escape

FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
CHAR_W = 6.6  # average width of a character at font-size 11, for sizing boxes


def text_width(text: str, size: float = 11) -> float:
    return len(text) * CHAR_W * size / 11


def rect(x, y, w, h, fill="#fff", stroke="#555", rx=4, dash=False, width=1.0, title: str | None = None) -> str:
    extra = " stroke-dasharray='4 3'" if dash else ""
    inner = f"<title>{escape(title)}</title>" if title else ""
    return (f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' rx='{rx}' fill='{fill}' "
            f"stroke='{stroke}' stroke-width='{width}'{extra}>{inner}</rect>")


def text(x, y, s: str, size: float = 11, anchor="middle", fill="#222", bold=False) -> str:
    weight = " font-weight='bold'" if bold else ""
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' fill='{fill}' "
            f"{FONT}{weight}>{escape(s)}</text>")


def arrow(x1, y1, x2, y2, color="#777") -> str:
    """A curved edge from (x1, y1) down to (x2, y2), with an arrow head (the `head` marker)."""
    mid = (y1 + y2) / 2
    return (f"<path d='M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}' "
            f"fill='none' stroke='{color}' stroke-width='1.1' marker-end='url(#head)'/>")


def document(width: float, height: float, body: list[str]) -> str:
    head = ("<defs><marker id='head' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' markerHeight='7' "
            "orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='#777'/></marker></defs>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
            f"viewBox='0 0 {width:.0f} {height:.0f}'>{head}" + "".join(body) + "</svg>")


_ID = re.compile(r"""(\sid=)(['"])([^'"]+)\2""")
_URL = re.compile(r"url\(#([^)]+)\)")
_HREF = re.compile(r"""(href=)(['"])#([^'"]+)\2""")


def unique_ids(svg: str, prefix: str) -> str:
    """`svg` with every id it defines prefixed by `prefix`, and every reference to one of them
    (`url(#id)`, `href="#id"`, `xlink:href="#id"`) with it: pictures inlined in one page (the
    report's, a notebook's) each get their own prefix, so ids stay unique on the page and each
    picture's markers and clip paths are its own (`document`'s `head` marker, matplotlib's
    `figure_1`, `axes_1`, clip paths and tick markers repeat from one picture to the next)."""
    ids = {m.group(3) for m in _ID.finditer(svg)}
    if not ids:
        return svg
    svg = _ID.sub(lambda m: f"{m.group(1)}{m.group(2)}{prefix}{m.group(3)}{m.group(2)}", svg)
    svg = _URL.sub(lambda m: f"url(#{prefix}{m.group(1)})" if m.group(1) in ids else m.group(0), svg)
    return _HREF.sub(lambda m: f"{m.group(1)}{m.group(2)}#{prefix}{m.group(3)}{m.group(2)}"
                     if m.group(3) in ids else m.group(0), svg)


def layers(nodes: list, parents: dict) -> list[list]:
    """Nodes in layers: each node one below its deepest parent (`parents[n]`: nodes before n,
    in a topological order of `nodes`); within a layer, ordered by the mean position of their
    parents (one barycenter sweep), so edges cross less."""
    depth: dict = {}
    for n in nodes:
        depth[n] = 1 + max((depth[p] for p in parents.get(n, ()) if p in depth), default=-1)
    out: list[list] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in nodes:
        out[depth[n]].append(n)
    position: dict = {}
    for layer in out:
        first = {n: k - (len(layer) - 1) / 2 for k, n in enumerate(layer)}

        def key(n):
            ps = [position[p] for p in parents.get(n, ()) if p in position]
            return sum(ps) / len(ps) if ps else first[n]
        layer.sort(key=key)
        for k, n in enumerate(layer):
            position[n] = k - (len(layer) - 1) / 2
    return out
