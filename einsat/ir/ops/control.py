"""Structured control flow with block arguments and returns: `loop` and `if`.

A body is an ordinary `ir.Graph`. Every value it reads from outside is passed in explicitly
(a *captured* input), so a body is self-contained and the node's inputs show every dependency.

    loop(trip, *init, *captured; body, n_carried)
        body(i, *carried, *captured) -> *carried'      i: the 0-d int64 iteration number
        carried = init; for i in range(trip): carried = body(i, *carried, *captured)
        outputs: the final carried values (the init values when trip <= 0)

    if(cond, *captured; then_branch, else_branch)
        then_branch(*captured) -> outs, else_branch(*captured) -> outs (same types)
        outputs: the branch `bool(cond)` selects

The semantics are written once, here, in terms of running a body (`BodyOp.run(args, attrs,
bodies)`): the runtime passes `bodies`, which runs a body graph through its one interpreter loop
on the caller's backend (ir cannot import the runtime: data flows one way). So these ops run on
every backend, and their `numpy` is reached only through `einsat.run`. FLOPs and bytes are a
loop body's per iteration (the trip count is a run-time value). ONNX: `Loop` and `If` with
subgraphs; captured inputs become outer-scope references, body values are prefixed with the node
name to keep the model in SSA form.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from einsat.errors import ExecutionError
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, register
from einsat.ir.types import TensorType

INDEX = TensorType((), np.int64)


def _is_graph(v) -> str | None:
    return None if isinstance(v, Graph) else "must be an einsat Graph"


class Bodies(Protocol):
    """What running a body needs from the runtime (`einsat.runtime.interpreter.Bodies`)."""

    def run(self, body: Graph, args: list) -> list:
        """The body's outputs on `args` (values of the caller's backend)."""

    def read(self, value) -> np.ndarray:
        """A value (a trip count, a condition) read back as a NumPy array."""

    def value(self, array: np.ndarray):
        """A NumPy array (an iteration number) as a value of the caller's backend."""


class BodyOp(OpDef):
    """An op whose semantics run body graphs; the runtime calls `run` (never `numpy`)."""

    def run(self, args: list, attrs, bodies: Bodies) -> list:
        raise NotImplementedError

    def numpy(self, args, attrs):
        raise ExecutionError(f"{self.op.value} runs body graphs, which only the runtime can do: "
                             "run the graph that holds it with einsat.run")


def _check_signature(body: Graph, want_in: list[TensorType], what: str) -> None:
    got = [body.types[i] for i in body.inputs]
    if got != want_in:
        raise ShapeError(f"{what} takes inputs {got}, the node passes {want_in}")


@register
class Loop(BodyOp):
    op = Op.LOOP
    dtype_of_first = False  # its body's
    foldable = False
    bodies = ("body",)
    arity = (1, None)
    attrs = {
        "body": Attr("any", check=_is_graph, doc="body(i, *carried, *captured) -> *carried"),
        "n_carried": Attr("int", 0, lambda v: None if v >= 0 else "must be non-negative"),
    }
    onnx_type = None  # exports to ONNX Loop; ONNX Loop imports stay opaque

    def num_outputs(self, attrs):
        return attrs["n_carried"]

    def infer(self, types, attrs):
        trip, k = types[0], attrs["n_carried"]
        if trip.rank != 0 or not np.issubdtype(trip.dtype, np.integer):
            raise ShapeError(f"the trip count must be a 0-d integer tensor, got {trip}")
        if len(types) < 1 + k:
            raise ShapeError(f"n_carried={k} but only {len(types) - 1} values follow the trip count")
        carried = list(types[1:1 + k])
        body = attrs["body"]
        _check_signature(body, [INDEX, *carried, *types[1 + k:]], "the body")
        outs = [body.types[o] for o in body.outputs]
        if outs != carried:
            raise ShapeError(f"the body returns {outs}, the carried values are {carried}")
        return carried

    def run(self, args, attrs, bodies):
        k = attrs["n_carried"]
        carried, captured = list(args[1:1 + k]), list(args[1 + k:])
        for i in range(int(bodies.read(args[0]))):
            carried = bodies.run(attrs["body"], [bodies.value(np.asarray(i, np.int64)), *carried, *captured])
        return carried

    def flops(self, ins, outs, attrs):
        """Per iteration: the body's FLOPs."""
        return attrs["body"].flops()

    def bytes(self, ins, outs, attrs):
        """Per iteration: the body's bytes."""
        return attrs["body"].bytes()

    def to_onnx(self, ctx, node):
        k = node.attrs["n_carried"]
        trip = node.inputs[0]
        if ctx.type(trip).dtype != np.int64:
            trip64 = ctx.fresh("trip")
            ctx.node("Cast", [trip], [trip64], to=7)
            trip = trip64
        prefix = f"{node.name}/body/"
        body = node.attrs["body"]
        i_name, cond_in, cond_out = prefix + "i", prefix + "cond_in", prefix + "cond_out"
        proto = _subgraph(ctx, body, prefix, node.inputs[1 + k:], skip=1 + k,
                          head=[(i_name, INDEX), (cond_in, TensorType((), np.bool_))],
                          carried=[prefix + n for n in body.inputs[1:1 + k]],
                          rename={body.inputs[0]: i_name},
                          extra=[("Identity", [cond_in], cond_out)])
        ctx.node("Loop", [trip, "", *node.inputs[1:1 + k]], node.outputs, body=proto)


@register
class If(BodyOp):
    op = Op.IF
    dtype_of_first = False  # its branches'
    foldable = False
    bodies = ("then_branch", "else_branch")
    arity = (1, None)
    attrs = {
        "then_branch": Attr("any", check=_is_graph, doc="then_branch(*captured) -> outs"),
        "else_branch": Attr("any", check=_is_graph, doc="else_branch(*captured) -> outs"),
    }
    onnx_type = None

    def num_outputs(self, attrs):
        return len(attrs["then_branch"].outputs)

    def infer(self, types, attrs):
        cond = types[0]
        if cond.size != 1 or cond.dtype != np.bool_:
            raise ShapeError(f"the condition must be a one-element bool tensor, got {cond}")
        then, other = attrs["then_branch"], attrs["else_branch"]
        _check_signature(then, list(types[1:]), "then_branch")
        _check_signature(other, list(types[1:]), "else_branch")
        outs = [then.types[o] for o in then.outputs]
        if outs != [other.types[o] for o in other.outputs]:
            raise ShapeError(f"the branches return different types: {outs} and "
                             f"{[other.types[o] for o in other.outputs]}")
        return outs

    def run(self, args, attrs, bodies):
        branch = attrs["then_branch"] if bool(bodies.read(args[0]).reshape(())) else attrs["else_branch"]
        return bodies.run(branch, list(args[1:]))

    def flops(self, ins, outs, attrs):
        """The costlier branch's FLOPs."""
        return max(attrs["then_branch"].flops(), attrs["else_branch"].flops())

    def bytes(self, ins, outs, attrs):
        return max(attrs["then_branch"].bytes(), attrs["else_branch"].bytes())

    def to_onnx(self, ctx, node):
        protos = {}
        for key in ("then_branch", "else_branch"):
            prefix = f"{node.name}/{key.split('_')[0]}/"
            protos[key] = _subgraph(ctx, node.attrs[key], prefix, node.inputs[1:], skip=0)
        ctx.node("If", [node.inputs[0]], node.outputs, **protos)


def _subgraph(ctx, body: Graph, prefix: str, outer: list[str], skip: int, head=(), carried=(),
              rename=None, extra=()):
    """An ONNX GraphProto for `body`: its inputs from position `skip` on are outer-scope values
    (renamed to the names in `outer`), `head` and `carried` become the subgraph's own inputs,
    every other value gets `prefix`."""
    from onnx import helper

    from einsat.ir.onnx.export import ExportContext, value_info

    names = {n: prefix + n for n in body.types}
    names.update(dict(zip(body.inputs[skip:], outer)))
    names.update(dict(zip(body.inputs[1:1 + len(carried)], carried)))
    names.update(rename or {})
    nodes = [Node(n.op, [names.get(i, i) if i else "" for i in n.inputs], [names[o] for o in n.outputs],
                  n.attrs, prefix + n.name) for n in body.nodes]
    outputs = [names[o] for o in body.outputs]
    inputs = {names[i]: body.types[i] for i in body.inputs}
    renamed = Graph(nodes, inputs, outputs, {names[w]: a for w, a in body.weights.items()}, prefix + body.name)
    sub = ExportContext(renamed, ctx.opset)
    for n in renamed.nodes:
        sub._current = n.name
        n.definition.to_onnx(sub, n)
    out_names = []
    for op_type, ins, out in extra:
        sub.node(op_type, ins, [out])
        out_names.append(out)
    body_outs = []
    for o in outputs:  # ONNX wants every subgraph output produced inside it, each once
        fresh = sub.fresh("ret")
        sub.node("Identity", [o], [fresh])
        body_outs.append(fresh)
    for d, v in sub.domains.items():
        ctx.domains[d] = max(ctx.domains.get(d, 1), v)
    from onnx import numpy_helper
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in renamed.weights.items()]
    g_in = [value_info(n, t) for n, t in head] + [value_info(c, renamed.types[c]) for c in carried]
    g_out = ([helper.make_tensor_value_info(out_names[0], 9, [])] if out_names else []) + \
        [value_info(f, renamed.types[o]) for f, o in zip(body_outs, outputs)]
    return helper.make_graph(sub.nodes, prefix.rstrip("/"), g_in, g_out,
                             initializer=inits + sub.initializers)
