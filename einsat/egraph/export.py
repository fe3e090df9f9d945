"""The whole e-graph as plain data (`EGraphData`), read from egglog's serialized JSON.

Flattening egglog's helper sorts: a variadic op's `TList` becomes its children, `Get(m, i)`
becomes the e-nodes of the `Multi` class `m` with `output=i`, `(Absent)` becomes `ABSENT`,
a `Fill` leaf becomes a weight leaf with its array. Subsumed e-nodes are left out (a
subsuming rule always puts its right-hand side in the same e-class). E-class ids are
renumbered 0..n-1 in egglog's id order, e-nodes sorted: the export is deterministic.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

import numpy as np
from egglog import bindings

from einsat.egraph.analysis import infer_types
from einsat.egraph.data import ABSENT, EClass, EGraphData, ENode
from einsat.egraph.encoding import AttrRefs, Signature, decode_attr, fill_name
from einsat.errors import EinsatError
from einsat.ir.types import TensorType


def serialize_json(egraph: bindings.EGraph, roots: list[bindings._Expr]) -> dict:
    """egglog's own serialization of the whole e-graph, as JSON data.

    egglog 14 has no public export: the high-level `egglog.EGraph` only extracts terms. The
    bindings' `serialize(...).to_json()` (the egraph-serialize format of extraction-gym) is
    canonical; `freeze()` is faster but can show stale e-class ids after a back-off scheduler
    ran (research/egglog.md). This is the one place einsat calls it.
    """
    return json.loads(egraph.serialize(roots).to_json())


_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]+\}|.)")
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def unquote(text: str) -> str:
    """An egglog string literal as printed in the JSON (Rust debug escapes) back to the string."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise EinsatError(f"not an egglog string literal: {text!r}")

    def sub(m):
        e = m.group(1)
        return chr(int(e[2:-1], 16)) if e.startswith("u{") else _SIMPLE[e]

    return _ESCAPE.sub(sub, text[1:-1])


class _Reader:
    def __init__(self, js: dict, sigs: Mapping[str, Signature], refs: AttrRefs):
        self.nodes = js["nodes"]
        self.types = {c: d["type"] for c, d in js["class_data"].items()}
        self.sigs = sigs
        self.refs = refs
        self.by_class: dict[str, list[str]] = {}
        for nid, n in self.nodes.items():
            self.by_class.setdefault(n["eclass"], []).append(nid)
        self.fills: dict[str, np.ndarray] = {}
        self.fill_params: dict[str, tuple[float, tuple[int, ...], str]] = {}

    def sort(self, nid: str) -> str:
        return self.types[self.nodes[nid]["eclass"]]

    def value(self, nid: str) -> Any:
        n, sort = self.nodes[nid], self.sort(nid)
        if sort in ("IVec", "FVec"):
            return tuple(self.value(c) for c in n["children"])
        op = n["op"]
        if sort == "i64":
            return int(op)
        if sort == "f64":
            return float(op)
        if sort == "String":
            return unquote(op)
        if sort == "bool":
            return op == "true"
        raise EinsatError(f"unexpected primitive {op!r} of sort {sort}")

    def tensor_child(self, nid: str) -> int | str:
        cls = self.nodes[nid]["eclass"]
        if self.nodes[self.by_class[cls][0]]["op"] == "Absent":
            return ABSENT
        return cls

    def list_children(self, nid: str) -> list:
        out = []
        while self.nodes[nid]["op"] == "TCons":
            head, nid = self.nodes[nid]["children"]
            out.append(self.tensor_child(head))
            nid = self.by_class[self.nodes[nid]["eclass"]][0]
        return out

    def enodes(self, nid: str, output: int = 0) -> list[ENode]:
        """The e-node(s) of one JSON node of a Tensor e-class (keys of children: class names)."""
        n = self.nodes[nid]
        op, kids = n["op"], n["children"]
        if op in ("Input", "Weight"):
            return [ENode(None, leaf=(op.lower(), self.value(kids[0])))]
        if op == "Fill":
            v, shape, dt = (self.value(k) for k in kids)
            name = fill_name(v, shape, dt)
            if name not in self.fills:
                self.fills[name] = np.full(shape, v, dtype=dt)
                self.fills[name].setflags(write=False)
                self.fill_params[name] = (v, shape, dt)
            return [ENode(None, leaf=("weight", name))]
        if op == "Get":
            multi = self.by_class[self.nodes[kids[0]]["eclass"]]
            k = self.value(kids[1])
            live = [m for m in multi if not self.nodes[m]["subsumed"]] or multi
            return [e for m in live for e in self.enodes(m, k)]
        sig = self.sigs.get(op)
        if sig is None:
            raise EinsatError(f"the e-graph holds an unknown constructor {op!r}")
        na = len(sig.attrs)
        attrs = {name: decode_attr(kind, self.value(k), self.refs) for (name, kind), k in zip(sig.attrs, kids)}
        if sig.variadic:
            children = self.list_children(kids[na])
        else:
            children = [self.tensor_child(k) for k in kids[na:]]
            while children and children[-1] == ABSENT:
                children.pop()
        return [ENode(sig.op, tuple(children), attrs, output=output)]


def to_data(js: dict, sigs: Mapping[str, Signature], refs: AttrRefs, *, output_names: list[str],
            input_types: Mapping[str, TensorType], weights: Mapping[str, Any],
            let_names: Mapping[str, str]) -> tuple[EGraphData, dict[int, str], dict]:
    """`EGraphData` from the serialized JSON (`js["root_eclasses"]`: the outputs' classes), with
    a `let` naming each e-class that has one, and the parameters of the `Fill` leaves."""
    r = _Reader(js, sigs, refs)
    raw: dict[str, list[ENode]] = {}
    for cls, nids in r.by_class.items():
        if r.types[cls] != "Tensor" or r.nodes[nids[0]]["op"] == "Absent":
            continue
        live = [n for n in nids if not r.nodes[n]["subsumed"]] or nids
        raw[cls] = [e for nid in live for e in r.enodes(nid)]
    order = sorted(raw, key=lambda c: int(c.rsplit("-", 1)[1]))
    ids = {c: k for k, c in enumerate(order)}
    names: dict[str, str] = {}
    class_lets: dict[int, str] = {}
    for cls, d in js["class_data"].items():
        if cls not in ids or not d.get("let"):
            continue
        lets = d["let"].split(", ")
        class_lets[ids[cls]] = lets[0]
        for let in lets:
            if let in let_names:
                names.setdefault(cls, let_names[let])
    classes: dict[int, EClass] = {}
    for cls in order:
        nodes = {_renumber(e, ids): None for e in raw[cls]}
        classes[ids[cls]] = EClass(ids[cls], sorted(nodes, key=_node_key), None, names.get(cls))
    all_weights = dict(weights)
    all_weights.update(r.fills)
    leaf_types = {("input", n): t for n, t in input_types.items()}
    leaf_types.update({("weight", n): TensorType.of(a) for n, a in all_weights.items()})
    infer_types(classes, leaf_types)
    roots = [ids[c] for c in js["root_eclasses"]]
    return EGraphData(classes, roots, list(output_names), dict(input_types), all_weights), class_lets, r.fill_params


def _renumber(e: ENode, ids: Mapping[str, int]) -> ENode:
    if not e.children:
        return e
    return ENode(e.op, tuple(c if c == ABSENT else ids[c] for c in e.children), e.attrs, e.leaf, e.output)


def _node_key(e: ENode) -> tuple:
    if e.leaf is not None:
        return (0, e.leaf)
    return (1, e.op.value, e.output, e.children, repr(sorted(e.attrs.items())))
