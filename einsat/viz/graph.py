"""A program (`ir.Graph`) as an SVG picture: a layered DAG, inputs at the top, outputs marked.

    svg = graph_svg(after, changed=changed_nodes(before, after))   # new nodes drawn orange

Each node is a box with its op and its (first) output's shape; graph inputs are blue boxes,
outputs have a bold border; weights are left out (their count is in the title). `changed`
names nodes to mark: `changed_nodes(before, after)` gives the nodes of `after` that compute
something `before` does not (structurally: same op, attributes and inputs, recursively).
Imports `einsat.ir` only, so `Graph._repr_svg_` can use it.
"""

from __future__ import annotations

import hashlib

from einsat.ir.graph import Graph
from einsat.viz.svg import arrow, document, layers, rect, text, text_width

ROW_H, BOX_H, GAP, PAD = 58, 34, 14, 16
MAX_NODES = 400
CHANGED, SOURCE, PLAIN = "#ffd8a8", "#d0e4ff", "#ffffff"


def _shape(t) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def graph_svg(graph: Graph, changed: set[str] | None = None, title: str | None = None) -> str:
    """The SVG of `graph` (nodes named in `changed` filled orange)."""
    changed = changed or set()
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    items = [("input", name) for name in graph.inputs] + [("node", n.name) for n in graph.nodes[:MAX_NODES]]
    by_name = {n.name: n for n in graph.nodes}
    parents: dict = {}
    for node in graph.nodes[:MAX_NODES]:
        parents[("node", node.name)] = [("node", producer[i]) if i in producer else ("input", i)
                                        for i in node.inputs if i and (i in producer or i in graph.inputs)]
    label: dict = {}
    for kind, name in items:
        if kind == "input":
            label[(kind, name)] = (name, _shape(graph.types[name]))
        else:
            node = by_name[name]
            label[(kind, name)] = (node.op_name, _shape(graph.types[node.outputs[0]]))
    widths = {it: max(text_width(a), text_width(b, 9)) + 16 for it, (a, b) in label.items()}
    rows = layers(items, parents)
    row_w = [sum(widths[it] for it in row) + GAP * (len(row) - 1) for row in rows]
    width = max(row_w + [text_width(title or "") + 2 * PAD, 120]) + 2 * PAD
    top = PAD + (22 if title else 0)
    pos = {}
    for r, row in enumerate(rows):
        x = (width - row_w[r]) / 2
        for it in row:
            pos[it] = (x, top + r * ROW_H)
            x += widths[it] + GAP
    body = [text(width / 2, PAD + 10, title, 13, bold=True)] if title else []
    for it, ps in parents.items():
        x, y = pos[it]
        for p in ps:
            px, py = pos[p]
            body.append(arrow(px + widths[p] / 2, py + BOX_H, x + widths[it] / 2, y - 1))
    outputs = set(graph.outputs)
    for it in items:
        (x, y), w = pos[it], widths[it]
        kind, name = it
        node = by_name.get(name) if kind == "node" else None
        fill = SOURCE if kind == "input" else CHANGED if name in changed else PLAIN
        is_out = node is not None and outputs & set(node.outputs) or (kind == "input" and name in outputs)
        body.append(rect(x, y, w, BOX_H, fill=fill, width=2.2 if is_out else 1.0,
                         title=f"{name}: " + ", ".join(f"{o} {graph.types[o]}" for o in node.outputs)
                         if node else f"input {name}: {graph.types[name]}"))
        op, shape = label[it]
        body.append(text(x + w / 2, y + 14, op, 11, bold=kind == "node"))
        body.append(text(x + w / 2, y + 27, shape, 9, fill="#555"))
    if len(graph.nodes) > MAX_NODES:
        body.append(text(width / 2, top + len(rows) * ROW_H + 10, f"... {len(graph.nodes) - MAX_NODES} more nodes"))
    return document(width, top + len(rows) * ROW_H + PAD + (20 if len(graph.nodes) > MAX_NODES else 0), body)


def _leaves(graph: Graph) -> dict[str, str]:
    """Inputs by name, weights by content (an optimized program renames the weights it keeps)."""
    value = {name: f"input:{name}" for name in graph.inputs}
    for name, array in graph.weights.items():
        digest = hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()
        value[name] = f"weight:{array.dtype}:{array.shape}:{digest}"
    return value


def _node_key(node, value: dict[str, str]) -> str:
    text_key = repr((node.op_name, sorted((k, repr(v)) for k, v in node.attrs.items()),
                     [value.get(i, "") for i in node.inputs]))
    return hashlib.blake2b(text_key.encode(), digest_size=8).hexdigest()


def structural_keys(graph: Graph) -> dict[str, str]:
    """Node name -> a digest of what it computes (op, attributes, and its inputs' digests)."""
    value = _leaves(graph)
    keys = {}
    for node in graph.nodes:
        keys[node.name] = digest = _node_key(node, value)
        for k, o in enumerate(node.outputs):
            value[o] = f"{digest}:{k}"
    return keys


def changed_nodes(before: Graph, after: Graph, same_names: bool = False) -> set[str]:
    """The nodes of `after` that no node of `before` is: none with the same op and attributes
    reading the same values (inputs by name, weights by content, node outputs recursively).

    `same_names`: a value of `after` named as a value of `before`, of the same type, is that
    value, whatever computes it. True for `optimize`'s results (the extraction names each value
    after the input's value in its e-class): a node reading a rewritten producer's output is then
    not new (the maxpool after a conv with its batchnorm folded in). False for programs whose
    names mean nothing (two built apart): a node is the same only if everything under it is."""
    value = _leaves(before)
    seen: dict[str, list[str]] = {}  # a node of `before`'s key -> its outputs' values
    for node in before.nodes:
        key = _node_key(node, value)
        for k, o in enumerate(node.outputs):
            value[o] = f"value:{o}" if same_names else f"{key}:{k}"
        seen.setdefault(key, [value[o] for o in node.outputs])
    named = {o: before.types[o] for n in before.nodes for o in n.outputs} if same_names else {}
    value, changed = _leaves(after), set()
    for node in after.nodes:
        known = seen.get(_node_key(node, value))
        if known is None:
            changed.add(node.name)
        for k, o in enumerate(node.outputs):
            if o in named and named[o] == after.types.get(o):
                value[o] = f"value:{o}"
            elif known is not None and k < len(known):
                value[o] = known[k]
            else:
                value[o] = f"new:{node.name}:{k}"
    return changed
