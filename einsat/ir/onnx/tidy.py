"""Minimal views in a written ONNX graph: no Identity, Transpose, Reshape, Expand or Slice that
the program does not need (#37).

Each op exports on its own (`OpDef.to_onnx`), so two neighbours may write views that cancel or
compose: attention's export transposes K for its MatMul where the program had just transposed
it the other way, an expansion reshapes a value to the shape it has, an output is an Identity of
a value computed just before. onnxruntime runs each of them as a copy. `minimal_views` removes
them from the emitted nodes, by local rewrites that keep every value's contents:

- an alias (Identity; a Transpose by the identity permutation; a Reshape or Expand to the shape
  its input has; a Slice by steps of 1 that keeps every axis's length, as a legacy export's cache
  update writes `past[:, :, :, :]`; a Pad by zero on every side, as Swin's window padding is at
  sizes its windows divide) is dropped, its readers reading its input; where its output is a graph output,
  the node computing its input writes that output instead (kept where its input is a graph
  input, a weight, another graph output or a value a control-flow body reads: then the copy is
  needed);
- Transpose(Transpose(x, p), q) reads x with the composed permutation p[q]; Reshape(Reshape(x))
  reads x (a Reshape's result depends on its input's elements in order and its target shape
  only, unless that shape copies a dim with a 0); a view left without readers is dropped.

Shapes come from the einsat types of the values (`shapes`) and, for values the export made
(an expansion's), from the ops' own rules: Reshape's, Transpose's and Expand's, an element-wise
op's (its input's shape, or its inputs' broadcast), Gather's and a reduction's over constant
axes. An eOperator's expression writes its grid as an Expand of its body (`ir.expr.onnx`), which
is often that shape already: wav2vec2_dynamo's default-cost file had eight such Expands, of a
Gelu's, a Gather's or an Add's value. An unknown shape is left alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

VIEWS = ("Identity", "Transpose", "Reshape", "Expand", "Slice", "Pad")
# ONNX ops (the default domain) whose output has the shape of their first input
SAME_SHAPE = frozenset({"Abs", "Cast", "Ceil", "Clip", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
                        "HardSwish", "IsInf", "IsNaN", "LeakyRelu", "Log", "LogSoftmax", "Mish", "Neg", "Not",
                        "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softmax", "Softplus",
                        "Softsign", "Sqrt", "Tanh"})
# and those whose output has their inputs' broadcast shape
BROADCAST = frozenset({"Add", "And", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max",
                       "Mean", "Min", "Mod", "Mul", "Or", "Pow", "PRelu", "Sub", "Sum", "Where", "Xor"})
REDUCTIONS = frozenset({"ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"})


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _subgraph_reads(nodes) -> set[str]:
    """Every value name a node inside a control-flow body reads (outer-scope references)."""
    out: set[str] = set()
    for n in nodes:
        for a in n.attribute:
            bodies = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)  # GRAPHS, or none
            for g in bodies:
                out |= {i for m in g.node for i in m.input}
                out |= _subgraph_reads(g.node)
    return out


def read_names(nodes) -> set[str]:
    """Every value name `nodes` read, inside their control-flow bodies too."""
    return {i for n in nodes for i in n.input if i} | _subgraph_reads(nodes)


class _Tidy:
    def __init__(self, nodes, outputs: Sequence[str], constants: Mapping[str, np.ndarray],
                 shapes: Mapping[str, tuple[int, ...]], sources: set[str]):
        self.nodes: list[onnx.NodeProto | None] = list(nodes)
        self.outputs = set(outputs)
        self.constants = constants
        self.shapes = dict(shapes)
        self.sources = sources  # graph inputs and initializers: no node computes them
        self.pinned = _subgraph_reads(nodes) | self.outputs

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(name)

    def readers(self) -> dict[str, list[int]]:
        r = defaultdict(list)
        for k, n in enumerate(self.nodes):
            if n is not None:
                for i in n.input:
                    r[i].append(k)
        return r

    def infer(self, n: onnx.NodeProto) -> None:
        """The output shape of a node the einsat types do not know, where its rule gives it."""
        if not n.output or n.output[0] in self.shapes or not n.input:
            return
        if n.op_type in VIEWS:
            self.infer_view(n)
        elif n.domain not in ("", "ai.onnx"):
            return
        elif n.op_type in SAME_SHAPE:
            if (x := self.shape(n.input[0])) is not None:
                self.shapes[n.output[0]] = x
        elif n.op_type in BROADCAST:
            shapes = [self.shape(i) for i in n.input]
            if shapes and all(x is not None for x in shapes):
                try:
                    self.shapes[n.output[0]] = tuple(int(d) for d in np.broadcast_shapes(*shapes))
                except ValueError:
                    return
        elif n.op_type == "Gather":
            data, indices = self.shape(n.input[0]), self.shape(n.input[1]) if len(n.input) > 1 else None
            if data is not None and indices is not None and data:
                axis = _attr(n, "axis", 0) % len(data)
                self.shapes[n.output[0]] = tuple(data[:axis]) + tuple(indices) + tuple(data[axis + 1:])
        elif n.op_type in REDUCTIONS:
            self.infer_reduction(n)

    def infer_reduction(self, n: onnx.NodeProto) -> None:
        """A reduction over axes given as a constant input or an attribute (none given: left alone)."""
        x = self.shape(n.input[0])
        if x is None:
            return
        if len(n.input) > 1 and n.input[1]:
            if n.input[1] not in self.constants:
                return
            axes = [int(a) for a in np.asarray(self.constants[n.input[1]]).reshape(-1)]
        else:
            axes = _attr(n, "axes")
        if not axes:
            return
        axes = {a % len(x) for a in axes}
        keep = _attr(n, "keepdims", 1)
        self.shapes[n.output[0]] = tuple(1 if k in axes else d for k, d in enumerate(x) if keep or k not in axes)

    def infer_view(self, n: onnx.NodeProto) -> None:
        """The output shape of a Reshape, Transpose or Expand."""
        out = n.output[0]
        x = self.shape(n.input[0])
        if n.op_type == "Transpose" and x is not None:
            perm = _attr(n, "perm") or list(range(len(x)))[::-1]
            self.shapes[out] = tuple(x[p] for p in perm)
        elif n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in self.constants:
            target = [int(d) for d in np.asarray(self.constants[n.input[1]]).reshape(-1)]
            if not _attr(n, "allowzero", 0) and 0 in target:
                if x is None or len(x) < len(target):
                    return
                target = [x[k] if d == 0 else d for k, d in enumerate(target)]
            if -1 in target:
                if x is None:
                    return
                known = int(np.prod([d for d in target if d != -1]))
                target = [int(np.prod(x)) // known if d == -1 else d for d in target] if known else None
                if target is None:
                    return
            self.shapes[out] = tuple(target)
        elif n.op_type == "Expand" and len(n.input) > 1 and n.input[1] in self.constants and x is not None:
            target = tuple(int(d) for d in np.asarray(self.constants[n.input[1]]).reshape(-1))
            try:
                self.shapes[out] = tuple(np.broadcast_shapes(x, target))
            except ValueError:
                return

    def alias_of(self, n: onnx.NodeProto) -> str | None:
        """The input whose value `n` writes unchanged, or None."""
        if n.op_type == "Identity":
            return n.input[0]
        if n.op_type == "Transpose":
            perm = _attr(n, "perm")
            return n.input[0] if perm is not None and list(perm) == sorted(perm) else None
        if n.op_type in ("Reshape", "Expand"):
            x, y = self.shape(n.input[0]), self.shape(n.output[0])
            return n.input[0] if x is not None and x == y else None
        if n.op_type == "Slice":  # steps of 1 keeping every axis's length: the whole tensor
            x, y = self.shape(n.input[0]), self.shape(n.output[0])
            steps = n.input[4] if len(n.input) > 4 and n.input[4] else None
            if steps is not None and (steps not in self.constants
                                      or any(int(v) != 1 for v in np.asarray(self.constants[steps]).reshape(-1))):
                return None
            return n.input[0] if x is not None and x == y else None
        if n.op_type == "Pad":  # by zero on every side (a shape kept by pads that cancel still shifts)
            pads = n.input[1] if len(n.input) > 1 and n.input[1] else None
            if pads is None:  # before opset 11 the pads are an attribute
                values = _attr(n, "pads")
            elif pads in self.constants:
                values = np.asarray(self.constants[pads]).reshape(-1).tolist()
            else:
                return None
            return n.input[0] if values is not None and not any(int(v) for v in values) else None
        return None

    def run(self) -> list[onnx.NodeProto]:
        """Sweeps over the nodes until one changes nothing (each change removes a node or
        shortens a chain of views, so they end). Within a sweep `producer` may be stale: every
        use checks that the node it names still writes the value."""
        changed = True
        while changed:
            changed = False
            for n in self.nodes:
                if n is not None:
                    self.infer(n)
            producer = {o: k for k, n in enumerate(self.nodes) if n is not None for o in n.output}
            for k, n in enumerate(self.nodes):
                if n is None or n.op_type not in VIEWS or len(n.output) != 1:
                    continue
                if self.compose(n, producer) or self.drop_alias(k, n, producer):
                    changed = True
            changed = self.drop_unread() or changed
        return [n for n in self.nodes if n is not None]

    def _producer(self, name: str, producer: dict[str, int]) -> onnx.NodeProto | None:
        k = producer.get(name)
        n = self.nodes[k] if k is not None else None
        return n if n is not None and name in n.output else None

    def compose(self, n: onnx.NodeProto, producer: dict[str, int]) -> bool:
        """T(T(x)) -> T(x) composed; R(R(x)) -> R(x)."""
        inner = self._producer(n.input[0], producer)
        if inner is None or inner.op_type != n.op_type or n.op_type not in ("Transpose", "Reshape"):
            return False
        if n.op_type == "Transpose":
            p, q = _attr(inner, "perm"), _attr(n, "perm")
            if p is None or q is None:
                return False
            del n.attribute[:]
            n.attribute.extend([helper.make_attribute("perm", [int(p[j]) for j in q])])
        else:
            target = self.constants.get(n.input[1]) if len(n.input) > 1 else None
            if target is None or (0 in np.asarray(target).reshape(-1) and not _attr(n, "allowzero", 0)):
                return False
        n.input[0] = inner.input[0]
        return True

    def drop_alias(self, k: int, n: onnx.NodeProto, producer: dict[str, int]) -> bool:
        x = self.alias_of(n)
        y = n.output[0]
        if x is None or y in self.pinned - self.outputs:
            return False
        if y not in self.outputs:
            self.rename(y, x)
            self.nodes[k] = None
            return True
        # y is a graph output: the node computing x writes y instead, where x is its own
        if self._producer(x, producer) is None or x in self.pinned or x in self.sources:
            return False
        self.nodes[k] = None
        self.rename(x, y)
        return True

    def rename(self, old: str, new: str) -> None:
        """Every read and write of value `old` becomes one of `new`."""
        for n in self.nodes:
            if n is None:
                continue
            for j, i in enumerate(n.input):
                if i == old:
                    n.input[j] = new
            for j, o in enumerate(n.output):
                if o == old:
                    n.output[j] = new
        if old in self.shapes and new not in self.shapes:
            self.shapes[new] = self.shapes[old]

    def drop_unread(self) -> bool:
        readers = self.readers()
        dropped = False
        for k, n in enumerate(self.nodes):
            if (n is not None and n.op_type in VIEWS and len(n.output) == 1
                    and not readers.get(n.output[0]) and n.output[0] not in self.pinned):
                self.nodes[k] = None
                dropped = True
        return dropped


def minimal_views(nodes: Sequence[onnx.NodeProto], outputs: Sequence[str], initializers: Sequence[onnx.TensorProto],
                  shapes: Mapping[str, tuple[int, ...]], inputs: Sequence[str]) -> list[onnx.NodeProto]:
    """`nodes` (in order) without the views the program does not need (see the module doc).
    `shapes`: the static shapes known for value names; `inputs`, `initializers`: the graph's."""
    constants = {}
    for t in initializers:
        if t.data_type == onnx.TensorProto.INT64 and len(t.dims) <= 1:
            constants[t.name] = numpy_helper.to_array(t)
    known = dict(shapes)
    known.update({t.name: tuple(t.dims) for t in initializers})
    sources = set(inputs) | {t.name for t in initializers}
    return _Tidy(nodes, outputs, constants, known, sources).run()
