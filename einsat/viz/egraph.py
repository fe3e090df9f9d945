"""A small e-graph as an SVG picture: each e-class a dashed box holding its e-nodes, an edge from
each e-node to each child e-class, leaves (inputs, weights) at the bottom, roots at the top.

    svg = egraph_svg(session.export())          # what `Session._repr_svg_` shows

Meant for the playground's e-graphs (tens of e-classes): above `MAX_CLASSES` only the e-classes
nearest the roots are drawn, and the picture says how many were left out.
"""

from __future__ import annotations

from einsat.egraph.data import ABSENT, EGraphData
from einsat.viz.svg import arrow, document, layers, rect, text, text_width

MAX_CLASSES = 60
NODE_H, NODE_GAP, CLASS_PAD, ROW_GAP, GAP, PAD = 22, 6, 6, 34, 16, 16
ROOT, LEAF = "#fff3bf", "#d0e4ff"


def _label(node) -> str:
    if node.leaf is not None:
        return f"{node.leaf[0]} {node.leaf[1]}"
    out = node.op.value
    return out if not node.output else f"{out}[{node.output}]"


def egraph_svg(data: EGraphData, max_classes: int = MAX_CLASSES) -> str:
    kept = _nearest_roots(data, max_classes)
    children = {c: sorted({k for n in data.classes[c].nodes for k in n.children if k != ABSENT and k in kept})
                for c in kept}
    order = _bottom_up(kept, children)
    rows = list(reversed(layers(order, children)))  # parents above children: roots at the top
    node_w = {c: max(text_width(_label(n)) + 14 for n in data.classes[c].nodes) for c in kept}
    class_w = {c: node_w[c] + 2 * CLASS_PAD for c in kept}
    class_h = {c: len(data.classes[c].nodes) * (NODE_H + NODE_GAP) - NODE_GAP + 2 * CLASS_PAD + 12 for c in kept}
    row_w = [sum(class_w[c] for c in row) + GAP * (len(row) - 1) for row in rows]
    row_h = [max(class_h[c] for c in row) for row in rows]
    width = max(row_w + [160]) + 2 * PAD
    pos, y = {}, PAD
    for row, w, h in zip(rows, row_w, row_h):
        x = (width - w) / 2
        for c in row:
            pos[c] = (x, y)
            x += class_w[c] + GAP
        y += h + ROW_GAP
    roots = set(data.roots)
    boxes, edges = [], []
    for c in kept:
        x, y0 = pos[c]
        cls = data.classes[c]
        leaf = all(n.leaf is not None for n in cls.nodes)
        boxes.append(rect(x, y0, class_w[c], class_h[c], fill=ROOT if c in roots else LEAF if leaf else "#f8f9fa",
                          stroke="#888", dash=True, title=f"e-class {c}: {cls.type}"))
        boxes.append(text(x + 4, y0 + 10, f"e{c} {list(cls.type.shape)}", 8, anchor="start", fill="#666"))
        for k, node in enumerate(cls.nodes):
            ny = y0 + CLASS_PAD + 12 + k * (NODE_H + NODE_GAP)
            boxes.append(rect(x + CLASS_PAD, ny, node_w[c], NODE_H, rx=3))
            boxes.append(text(x + CLASS_PAD + node_w[c] / 2, ny + 15, _label(node), 11))
            for child in dict.fromkeys(node.children):
                if child in kept:
                    cx, cy = pos[child]
                    edges.append(arrow(x + CLASS_PAD + node_w[c] / 2, ny + NODE_H, cx + class_w[child] / 2, cy - 1))
    body = edges + boxes
    if len(kept) < len(data.classes):
        body.append(text(width / 2, y + 4, f"{len(data.classes) - len(kept)} more e-classes not drawn", 10))
        y += 14
    return document(width, y - ROW_GAP + PAD + 14, body)


def _nearest_roots(data: EGraphData, limit: int) -> set[int]:
    """Up to `limit` e-classes, breadth first from the roots."""
    kept: dict[int, None] = {}
    queue = [r for r in data.roots if r in data.classes]
    while queue and len(kept) < limit:
        c = queue.pop(0)
        if c in kept:
            continue
        kept[c] = None
        queue.extend(k for n in data.classes[c].nodes for k in n.children if k != ABSENT and k in data.classes)
    return set(kept)


def _bottom_up(classes: set[int], children: dict[int, list[int]]) -> list[int]:
    """Children before parents (an e-graph may have cycles: an edge closing one is ignored)."""
    order, state = [], {}
    for start in sorted(classes):
        stack = [(start, iter(children[start]))]
        state.setdefault(start, 1)
        while stack:
            c, kids = stack[-1]
            for k in kids:
                if k not in state:
                    state[k] = 1
                    stack.append((k, iter(children[k])))
                    break
            else:
                stack.pop()
                if state[c] == 1:
                    state[c] = 2
                    order.append(c)
    return order
