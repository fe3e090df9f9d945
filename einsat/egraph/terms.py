"""ir -> terms: egglog expressions for ops, leaves and whole graphs (the insertion side).

A program enters the e-graph node by node (egglog.md: one `let` per value is linear; one big
expression is not): every value of the graph gets a global `let` (`$g0v3`), its node refers
to its inputs' lets, the shape analysis is seeded with every value's shape and dtype, and
every value gets its insertion index as `ord` (it is a value of a source program). Two equal
nodes become one e-class (hash-consing: common subexpressions are shared).

`Term` is what generators build: an op over children that are existing e-classes (export ids
or `Ref`s) or further `Term`s. The inverse direction (e-graph -> plain data -> ir) is
`einsat.egraph.export` and `einsat.egraph.convert`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from egglog import bindings

from einsat.egraph.encoding import AttrRefs, Signature, encode_attr, fill_of
from einsat.errors import AttributeValueError
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op

SPAN = bindings.PanicSpan()


@dataclass(frozen=True)
class Ref:
    """A handle on an e-class inside a session: the name of a global `let`."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Term:
    """A new term: `op(attrs)` over children that are export class ids, `Ref`s or `Term`s
    (None: an absent optional input). Leaves: `op=None, leaf=("input"|"weight", name)`."""

    op: Op | None
    children: tuple[Any, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    leaf: tuple[str, str] | None = None
    output: int = 0


def lit(value: Any) -> bindings._Expr:
    if isinstance(value, (bool, np.bool_)):
        return bindings.Lit(SPAN, bindings.Bool(bool(value)))
    if isinstance(value, (int, np.integer)):
        return bindings.Lit(SPAN, bindings.Int(int(value)))
    if isinstance(value, (float, np.floating)):
        return bindings.Lit(SPAN, bindings.Float(float(value)))
    if isinstance(value, str):
        return bindings.Lit(SPAN, bindings.String(value))
    raise TypeError(f"no egglog literal for {value!r}")


def vec(values) -> bindings._Expr:
    return bindings.Call(SPAN, "vec-of", [lit(v) for v in values])


def call(name: str, *args: bindings._Expr) -> bindings._Expr:
    return bindings.Call(SPAN, name, list(args))


def var(name: str) -> bindings._Expr:
    return bindings.Var(SPAN, name)


ABSENT = call("Absent")


class Encoder:
    """Builds egglog expressions from ops, attributes and child expressions."""

    def __init__(self, sigs: Mapping[Op, Signature], refs: AttrRefs):
        self.sigs = sigs
        self.refs = refs

    def attrs(self, sig: Signature, attrs: Mapping[str, Any], where: str) -> list[bindings._Expr]:
        unknown = set(attrs) - {n for n, _ in sig.attrs}
        if unknown:
            raise AttributeValueError(f"{where}: unknown attribute(s) {sorted(unknown)}")
        out = []
        for name, kind in sig.attrs:
            if name not in attrs:
                raise AttributeValueError(f"{where}: attribute {name!r} is missing (attributes must be "
                                          "normalized before they enter the e-graph)")
            v = encode_attr(kind, attrs[name], self.refs, f"{where}, attribute {name!r}")
            out.append(vec(v) if kind in ("ints", "floats") and isinstance(v, tuple) else lit(v))
        return out

    def apply(self, op: Op, attrs: Mapping[str, Any], children: list[bindings._Expr | None],
              where: str = "") -> bindings._Expr:
        """`op(attrs)(children)`: the Tensor expression, or the Multi one for a multi-output op."""
        sig = self.sigs.get(op)
        where = where or f"op {op.value!r}"
        if sig is None:
            raise AttributeValueError(f"{where}: op {op.value!r} has no e-graph constructor")
        args = self.attrs(sig, attrs, where)
        kids = [ABSENT if c is None else c for c in children]
        if sig.variadic:
            lst = call("TNil")
            for c in reversed(kids):
                lst = call("TCons", c, lst)
            args.append(lst)
        else:
            if len(kids) > sig.slots:
                raise AttributeValueError(f"{where}: {len(kids)} inputs, {op.value} takes at most {sig.slots}")
            args += kids + [ABSENT] * (sig.slots - len(kids))
        return call(sig.name, *args)

    def output(self, op: Op, multi_expr: bindings._Expr, k: int) -> bindings._Expr:
        return call("Get", multi_expr, lit(k)) if self.sigs[op].multi else multi_expr

    @staticmethod
    def leaf(kind: str, name: str) -> bindings._Expr:
        return call({"input": "Input", "weight": "Weight"}[kind], lit(name))


def let(name: str, expr: bindings._Expr) -> bindings._Command:
    return bindings.ActionCommand(bindings.Let(SPAN, name, expr))


def set_fn(fn: str, arg: bindings._Expr, value: bindings._Expr) -> bindings._Command:
    return bindings.ActionCommand(bindings.Set(SPAN, fn, [arg], value))


def union(a: bindings._Expr, b: bindings._Expr) -> bindings._Command:
    return bindings.ActionCommand(bindings.Union(SPAN, a, b))


# A union asked for at the top level, applied later by one run of `PENDING_RULESET` (a session's
# queued unions: see `Session._flush`, and PENDING_DECLARATIONS for the table and its rule)
PENDING = "PendingUnion"
PENDING_RULESET = "pending_unions"
PENDING_DECLARATIONS = (f"(relation {PENDING} (Tensor Tensor))\n(ruleset {PENDING_RULESET})\n"
                        f"(rule (({PENDING} a b)) ((union a b)) :ruleset {PENDING_RULESET})")


def pending_union(a: bindings._Expr, b: bindings._Expr) -> bindings._Command:
    """`a = b` as a row of the pending-union table: no rebuild until the table's rule runs."""
    return bindings.ActionCommand(bindings.Expr_(SPAN, call(PENDING, a, b)))


def seed_type(name: str, shape, dtype) -> list[bindings._Command]:
    """Seed the shape analysis with a value's known type."""
    return [set_fn("shape", var(name), vec(shape)), set_fn("dtype", var(name), lit(np.dtype(dtype).name))]


def graph_commands(graph: Graph, enc: Encoder, prefix: str,
                   start: int = 0) -> tuple[list[bindings._Command], dict[str, str]]:
    """The commands inserting `graph`, and the `let` name of each of its values (whose `ord`s
    are `start`, `start + 1`, ...)."""
    lets: dict[str, str] = {}
    cmds: list[bindings._Command] = []

    def bind(value: str, expr) -> None:
        lets[value] = f"${prefix}v{len(lets)}"
        cmds.append(let(lets[value], expr))
        t = graph.types[value]
        cmds.extend(seed_type(lets[value], t.shape, t.dtype))
        cmds.append(set_fn("ord", var(lets[value]), lit(start + len(lets) - 1)))

    for name in graph.inputs:
        bind(name, enc.leaf("input", name))
    for name, array in graph.weights.items():
        fill = fill_of(name, array)
        bind(name, enc.leaf("weight", name) if fill is None else
             call("Fill", lit(fill[0]), vec(fill[1]), lit(fill[2])))
    for k, node in enumerate(graph.nodes):
        expr = enc.apply(node.op, node.attrs, _inputs(node, lets), where=f"node {node.name!r} ({node.op_name})")
        if enc.sigs[node.op].multi:
            m = f"${prefix}m{k}"
            cmds.append(let(m, expr))
            for j, out in enumerate(node.outputs):
                bind(out, enc.output(node.op, var(m), j))
        else:
            bind(node.outputs[0], expr)
    return cmds, lets


def _inputs(node: Node, lets: Mapping[str, str]) -> list:
    ins = list(node.inputs)
    while ins and not ins[-1]:  # a trailing absent input is the same as a missing one
        ins.pop()
    return [var(lets[i]) if i else None for i in ins]
