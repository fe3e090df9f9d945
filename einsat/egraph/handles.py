"""Naming e-classes from Python: what generators use to union new terms in.

An e-class of an export is named in egglog by a *witness*: a term that evaluates to it. The
witness of an e-class is its shallowest e-node over its children's witnesses (acyclic by
construction), bound to a global `let` once; an e-class that holds a program value reuses
that value's `let`. Witnesses stay valid after unions and runs (a term evaluates to whatever
e-class its e-class merged into), so the ids of the latest export can be used until the next
export. Every new `Term` gets a `let` too, and its type is seeded into the shape analysis.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import numpy as np

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.egraph.terms import Encoder, Ref, Term, call, let, lit, seed_type, var, vec
from einsat.errors import EinsatError
from einsat.ir.registry import opdef
from einsat.ir.types import TensorType


class Owner(Protocol):
    """What handles read and write in the session that owns them (`egraph.session.Session`,
    which imports this module)."""

    encoder: Encoder
    weights: dict
    input_types: dict[str, TensorType]
    let_names: dict[str, str]

    def emit(self, *commands) -> None: ...


class Handles:
    def __init__(self, session: Owner):
        self.session = session
        self.data: EGraphData | None = None
        self.class_lets: dict[int, str] = {}
        self.fills: dict[str, tuple[float, tuple[int, ...], str]] = {}
        self.types: dict[str, TensorType] = {}   # let name -> type, for Refs we made
        self._depth: dict[int, int] | None = None
        self._count = 0

    def reset(self, data: EGraphData, class_lets: dict[int, str], fills: dict) -> None:
        self.data, self.class_lets, self._depth = data, dict(class_lets), None
        self.fills.update(fills)

    # -- expressions --------------------------------------------------------------------------
    def expr(self, x: Term | Ref | int | None):
        if x is None or (isinstance(x, int) and x == ABSENT):
            return call("Absent")
        if isinstance(x, Ref):
            return var(x.name)
        return var(self.ref(x).name)

    def ref(self, x: Term | Ref | int) -> Ref:
        if isinstance(x, Ref):
            return x
        if isinstance(x, int):
            return Ref(self._class_let(x))
        return self._term(x)

    def type_of(self, x) -> TensorType | None:
        if x is None or (isinstance(x, int) and x == ABSENT):
            return None
        if isinstance(x, int):
            return self._data().classes[x].type
        if isinstance(x, Ref):
            if x.name in self.types:
                return self.types[x.name]
            graph_value = self.session.let_names.get(x.name)
            raise EinsatError(f"the type of {x.name} ({graph_value}) is not known here")
        return self._term_type(x)

    def weight(self, array, hint: str) -> Term:
        a = np.asarray(array)
        if a.flags.writeable:
            a = a.copy()
            a.setflags(write=False)
        h = hashlib.sha1(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).view(np.uint8).data)  # as bytes: a buffer cannot hold bfloat16
        h = h.hexdigest()[:12]
        name = f"{hint}_{h}"
        self.session.weights.setdefault(name, a)
        return Term(None, leaf=("weight", name))

    # -- internals ----------------------------------------------------------------------------
    def _data(self) -> EGraphData:
        if self.data is None:
            raise EinsatError("no export yet: e-class ids come from session.export()")
        return self.data

    def _fresh(self, expr, t: TensorType, seed: bool = True) -> Ref:
        """A new `let` for `expr`; `seed` the shape analysis with its type (for new terms)."""
        self._count += 1
        name = f"$h{self._count}"
        self.session.emit(let(name, expr), *(seed_type(name, t.shape, t.dtype) if seed else ()))
        self.types[name] = t
        return Ref(name)

    def _leaf(self, leaf: tuple[str, str]):
        kind, name = leaf
        if kind == "weight" and name in self.fills:
            v, shape, dt = self.fills[name]
            return call("Fill", lit(float(v)), vec(shape), lit(dt))
        return Encoder.leaf(kind, name)

    def _term(self, t: Term) -> Ref:
        if t.leaf is not None:
            kind, name = t.leaf
            if kind == "weight" and name not in self.session.weights and name not in self.fills:
                raise EinsatError(f"weight {name!r} is not in the session (use session.add_weight)")
            return self._fresh(self._leaf(t.leaf), self._term_type(t))
        kids = [self.expr(c) for c in t.children]
        expr = self.session.encoder.apply(t.op, t.attrs, kids)
        return self._fresh(self.session.encoder.output(t.op, expr, t.output), self._term_type(t))

    def _term_type(self, t: Term) -> TensorType:
        if t.leaf is not None:
            kind, name = t.leaf
            if kind == "input":
                return self.session.input_types[name]
            if name in self.fills:
                v, shape, dt = self.fills[name]
                return TensorType(shape, dt)
            return TensorType.of(self.session.weights[name])
        ins = [self.type_of(c) for c in t.children]
        return opdef(t.op).infer(ins, t.attrs)[t.output]

    def _class_let(self, cid: int) -> str:
        if cid in self.class_lets:
            return self.class_lets[cid]
        data = self._data()
        if cid not in data.classes:
            raise EinsatError(f"e-class {cid} is not in the latest export")
        node = min(data.classes[cid].nodes, key=lambda n: self._node_depth(n))
        if node.leaf is not None:
            expr = self._leaf(node.leaf)
        else:
            kids = [self.expr(c) for c in node.children]
            expr = self.session.encoder.output(node.op, self.session.encoder.apply(node.op, node.attrs, kids),
                                               node.output)
        ref = self._fresh(expr, data.classes[cid].type, seed=False)  # an existing e-class: typed
        self.class_lets[cid] = ref.name
        return ref.name

    def _node_depth(self, node: ENode) -> float:
        depth = self._depths()
        return 1 + max((depth[c] for c in node.children if c != ABSENT), default=-1)

    def _depths(self) -> dict[int, Any]:
        if self._depth is None:
            self._depth = self._data().heights()
        return self._depth
