"""Cycle filtering (Tensat §4.3): drop the e-nodes that close a cycle in the e-class graph.

Rewrites like `split(concat(a, b))[0] = a` put an e-node into `a`'s e-class that depends on `a`
itself. Such e-nodes can never be part of an extracted program, and they make exact extraction
harder (acyclicity constraints). `filter_cycles` keeps a subset of e-nodes whose e-class graph
is acyclic and that still contains, for every e-class, its shallowest e-node:

- only e-nodes with a child in their own strongly connected component can lie on a cycle;
- inside a component, e-nodes are inserted by increasing height (1 + the largest height of
  their children, a child's height being its e-class's shallowest term), and an e-node is
  dropped if one of its children already reaches its e-class. An e-class's shallowest e-node is
  never dropped: every e-node pointing to that e-class is higher, so inserted later.

E-class ids and the order of the remaining e-nodes are unchanged.
"""

from __future__ import annotations

from einsat.egraph.data import ABSENT, EClass, EGraphData

MAX_SEARCH = 2_000_000  # edge visits per component before the filter falls back to heights only


def filter_cycles(data: EGraphData) -> EGraphData:
    classes = data.classes
    comp = _components(classes)
    depth = data.heights()

    def height(node) -> float:
        return 1 + max((depth[c] for c in node.children if c != ABSENT), default=-1)

    internal: dict[int, list[tuple[float, int, int]]] = {}  # component -> (height, class, index)
    drop: set[tuple[int, int]] = set()
    for cid, cls in classes.items():
        for k, node in enumerate(cls.nodes):
            kids = [c for c in node.children if c != ABSENT]
            if cid in kids:
                drop.add((cid, k))
            elif any(comp[c] == comp[cid] for c in kids):
                internal.setdefault(comp[cid], []).append((height(node), cid, k))
    for items in internal.values():
        drop |= _filter_component(classes, comp, sorted(items), depth)
    out = {cid: EClass(cid, [n for k, n in enumerate(cls.nodes) if (cid, k) not in drop], cls.type, cls.name)
           for cid, cls in classes.items()}
    return EGraphData(out, list(data.roots), list(data.output_names), dict(data.input_types),
                      dict(data.weights))


def _filter_component(classes, comp, items, depth) -> set[tuple[int, int]]:
    edges: dict[int, set[int]] = {}
    drop, budget = set(), MAX_SEARCH
    for h, cid, k in items:
        kids = {c for c in classes[cid].nodes[k].children if c != ABSENT and comp[c] == comp[cid]}
        if budget > 0:
            reach, visits = _reaches(edges, kids, cid)
            budget -= visits
        else:  # too large to search: keep only e-nodes below their e-class's height
            reach = h > depth[cid]
        if reach:
            drop.add((cid, k))
        else:
            edges.setdefault(cid, set()).update(kids)
    return drop


def _reaches(edges: dict[int, set[int]], start: set[int], target: int) -> tuple[bool, int]:
    seen, stack, visits = set(start), list(start), 0
    while stack:
        c = stack.pop()
        if c == target:
            return True, visits
        for k in edges.get(c, ()):
            visits += 1
            if k not in seen:
                seen.add(k)
                stack.append(k)
    return False, visits


def _components(classes) -> dict[int, int]:
    """Tarjan's strongly connected components, iteratively: e-class -> component id."""
    succ = {cid: sorted({c for n in cls.nodes for c in n.children if c != ABSENT}) for cid, cls in classes.items()}
    index, low, comp, on_stack, stack = {}, {}, {}, set(), []
    counter = 0
    for root in classes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp[w] = v
                    if w == v:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return comp
