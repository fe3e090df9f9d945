"""Vertical fusion of Access / Assign chains (TensorSSA §4.2.1), and dead-code elimination.

Functionalization leaves chains of small access / assign nodes (pass-up writes every level of a
view path, pass-down re-reads every live view). These laws collapse them, applied to a fixpoint,
inside loop and branch bodies too:

    identity(x) = x                               access(x, []) = x
    assign(x, w, []) = w                                          (w of x's type)
    access(access(x, s), t) = access(x, s + t)
    assign(x, assign(access(x, s), w, t), s) = assign(x, w, s + t)
    assign(assign(x, v, s), w, s) = assign(x, w, s)               (the second write covers the first)
    assign(x, access(x, s), s) = x                                (writing back what was read)
    access(assign(x, w, s), s) = w                                (w of the region's type)
    access(assign(x, w, s), s + t) = access(w, t)                 (and t narrowing s's last slice)
    access(assign(x, w, s), t) = access(x, t)                     (t provably disjoint from s)

Composed specs are simplified (slice of a slice on one axis is one slice; a select of a slice is
one select). Graph outputs keep their names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from einsat.ir.graph import Graph, Node
from einsat.ir.ops.views import spec_shapes
from einsat.ir.registry import Op, opdef


@dataclass(frozen=True)
class _N:
    op: Op
    inputs: tuple
    outputs: tuple
    attrs: dict
    name: str


def shift(spec, by: int):
    """Renumber a spec's dynamic index slots by `by` (to follow another spec's indices)."""
    return tuple(("dselect", s[1], s[2] + by) if s[0] == "dselect" else s for s in spec)


def simplify(spec):
    """Merge a slice or select that directly follows a slice on the same axis."""
    out = []
    for step in spec:
        prev = out[-1] if out else None
        if prev and prev[0] == "slice" and step[0] in ("slice", "select") and step[1] == prev[1]:
            _, axis, start, stride, _ = prev
            if step[0] == "slice":
                out[-1] = ("slice", axis, start + stride * step[2], stride * step[3], step[4])
            else:
                out[-1] = ("select", axis, start + stride * step[2])
            continue
        out.append(step)
    return tuple(out)


def _key(node: _N, n_data: int):
    """A view node's region: its spec with dynamic slots replaced by the index values' names."""
    dyn = node.inputs[n_data:]
    return tuple(("dselect", s[1], dyn[s[2]]) if s[0] == "dselect" else s for s in node.attrs["spec"])


def _indices(step):
    if step[0] == "select":
        return {step[2]}
    if step[0] == "slice":
        return set(range(step[2], step[2] + step[3] * step[4], step[3])) if step[4] else set()
    return None


def disjoint(a, b) -> bool:
    """True when two regions (see `_key`) of one tensor provably share no element."""
    for sa, sb in zip(a, b):
        if sa == sb:
            continue
        if sa[0] in ("slice", "select") and sb[0] in ("slice", "select") and sa[1] == sb[1]:
            return not (_indices(sa) & _indices(sb))
        return False
    return False


def relative(outer, inner):
    """`inner` as a region of the region `outer` (both as `_key` gives them), or None when it
    is not provably inside: `inner` extends `outer`, or narrows its last slice."""
    n = len(outer)
    if inner[:n] == outer:
        return inner[n:]
    if not n or inner[:n - 1] != outer[:n - 1] or len(inner) < n:
        return None
    last, step = outer[-1], inner[n - 1]
    if last[0] != "slice" or step[0] not in ("slice", "select") or last[1] != step[1]:
        return None
    _, axis, start, stride, count = last
    if step[0] == "select":
        k, r = divmod(step[2] - start, stride)
        return (("select", axis, k),) + inner[n:] if r == 0 and 0 <= k < count else None
    _, _, start2, stride2, count2 = step
    k, r = divmod(start2 - start, stride)
    kstep, r2 = divmod(stride2, stride)
    if count2 and r == 0 and r2 == 0 and 0 <= k < count and 0 <= k + kstep * (count2 - 1) < count:
        return (("slice", axis, k, kstep, count2),) + inner[n:]
    return None


def _unkey(key):
    """(spec, dynamic inputs) back from a `_key` region."""
    dyn, spec = [], []
    for s in key:
        if s[0] == "dselect":
            spec.append(("dselect", s[1], len(dyn)))
            dyn.append(s[2])
        else:
            spec.append(s)
    return tuple(spec), dyn


class _Fuser:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.fwd: dict[str, str] = {}
        self.prod: dict[str, _N] = {}
        self.changed = False

    def r(self, name: str) -> str:
        while name in self.fwd:
            name = self.fwd[name]
        return name

    def type(self, name: str):
        return self.graph.types[name]

    def run(self) -> list[_N]:
        nodes = []
        for node in self.graph.nodes:
            attrs = dict(node.attrs)
            for key in opdef(node.op).bodies:
                attrs[key] = fuse_views(attrs[key], keep_output_names=False)
            n = _N(node.op, tuple(self.r(i) if i else i for i in node.inputs), node.outputs, attrs, node.name)
            n = self.rewrite(n)
            if n is None:
                self.changed = True
                continue
            nodes.append(n)
            for o in n.outputs:
                self.prod[o] = n
        return nodes

    def forward(self, out: str, to: str):
        self.fwd[out] = to

    def rewrite(self, n: _N) -> _N | None:
        out = n.outputs[0] if n.outputs else None
        if n.op is Op.IDENTITY:
            return self.forward(out, n.inputs[0])
        if n.op is Op.ACCESS:
            return self.access(n, out)
        if n.op is Op.ASSIGN:
            return self.assign(n, out)
        return n

    def access(self, n: _N, out: str) -> _N | None:
        x, spec = n.inputs[0], n.attrs["spec"]
        if not spec:
            return self.forward(out, x)
        p = self.prod.get(x)
        if p is not None and p.op is Op.ACCESS:
            self.changed = True
            spec2 = simplify(p.attrs["spec"] + shift(spec, len(p.inputs) - 1))
            return self.access(replace(n, inputs=(p.inputs[0], *p.inputs[1:], *n.inputs[1:]),
                                       attrs={"spec": spec2}), out)
        if p is not None and p.op is Op.ASSIGN:
            here, there = _key(n, 1), _key(p, 2)
            if here == there and self.type(p.inputs[1]) == self.type(out):
                return self.forward(out, p.inputs[1])
            if disjoint(here, there):
                self.changed = True
                return self.access(replace(n, inputs=(p.inputs[0], *n.inputs[1:])), out)
            rel = relative(there, here)
            w = p.inputs[1]
            if rel is not None and self.type(w).shape == spec_shapes(self.type(x).shape, p.attrs["spec"])[-1]:
                self.changed = True
                spec2, dyn = _unkey(rel)
                return self.access(_N(Op.ACCESS, (w, *dyn), n.outputs, {"spec": spec2}, n.name), out)
        return n

    def assign(self, n: _N, out: str) -> _N | None:
        x, w, spec = n.inputs[0], n.inputs[1], n.attrs["spec"]
        if not spec and self.type(w) == self.type(x):
            return self.forward(out, w)
        pw, px = self.prod.get(w), self.prod.get(x)
        region = _key(n, 2)
        if pw is not None and pw.op is Op.ACCESS and pw.inputs[0] == x and _key(pw, 1) == region:
            return self.forward(out, x)
        if pw is not None and pw.op is Op.ASSIGN:
            pa = self.prod.get(pw.inputs[0])
            if pa is not None and pa.op is Op.ACCESS and pa.inputs[0] == x and _key(pa, 1) == region:
                self.changed = True
                inner = shift(pw.attrs["spec"], len(n.inputs) - 2)
                return self.assign(_N(Op.ASSIGN, (x, pw.inputs[1], *n.inputs[2:], *pw.inputs[2:]),
                                      n.outputs, {"spec": simplify(spec + inner)}, n.name), out)
        if px is not None and px.op is Op.ASSIGN and _key(px, 2) == region:
            self.changed = True
            return self.assign(replace(n, inputs=(px.inputs[0], *n.inputs[1:])), out)
        return n


def _dce(nodes: list[_N], outputs: list[str]) -> list[_N]:
    live = set(outputs)
    kept = []
    for n in reversed(nodes):
        if any(o in live for o in n.outputs):
            live.update(i for i in n.inputs if i)
            kept.append(n)
    return kept[::-1]


def fuse_views(graph: Graph, keep_output_names: bool = True, max_rounds: int = 20) -> Graph:
    """The graph with its access / assign chains fused (see the module docstring)."""
    for _ in range(max_rounds):
        f = _Fuser(graph)
        nodes = f.run()
        outputs = [f.r(o) for o in graph.outputs]
        extra = []
        if keep_output_names:
            outputs, extra = _restore_names(graph, nodes, list(graph.outputs), outputs)
        nodes = _dce(nodes + extra, outputs)
        changed = f.changed or len(nodes) != len(graph.nodes)
        used = {i for n in nodes for i in n.inputs} | set(outputs)
        graph = Graph([Node(n.op, n.inputs, n.outputs, n.attrs, n.name) for n in nodes],
                      graph.input_types(), outputs,
                      {k: v for k, v in graph.weights.items() if k in used}, graph.name)
        if not changed:
            break
    return graph


def _restore_names(graph: Graph, nodes: list[_N], names: list[str], values: list[str]):
    """Outputs forwarded to another value get their names back: by renaming the value's producer
    when it is produced here for this output alone, else through an identity node."""
    producers = {o: k for k, n in enumerate(nodes) for o in n.outputs}
    rename, extra = {}, []
    for name, value in zip(names, values):
        if name == value:
            continue
        k = producers.get(value)
        if k is not None and value not in rename and values.count(value) == 1 and value not in names:
            rename[value] = name
        else:
            extra.append(_N(Op.IDENTITY, (value,), (name,), {}, name))
    if rename:
        for k, n in enumerate(nodes):
            nodes[k] = replace(n, inputs=tuple(rename.get(i, i) for i in n.inputs),
                               outputs=tuple(rename.get(o, o) for o in n.outputs))
    return list(names), extra
