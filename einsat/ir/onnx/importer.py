"""ONNX import: a model (path, bytes or ModelProto) becomes an einsat `Graph`.

    g = load_onnx("resnet50.onnx")
    g = load_onnx("light_resnet50.onnx", fill_weights="random", seed=0)   # zoo models

After `onnx.read.prepare` (checker, opset 13-25, static shapes, shape inference), the nodes are
read in topological order. Sequence and optional ops are followed statically (`onnx.sequences`).
A node whose inputs are all constants is evaluated (`onnx.fold`) and its outputs become
constants; Identity and inference-mode Dropout alias their input; Sum becomes a chain of adds,
CastLike a cast, Reciprocal a division of 1. Every other node goes to the registry op with its `onnx_type`, whose
`from_onnx(ctx, onode)` returns the einsat inputs and attributes through the context below. An
ONNX op einsat lacks, or one whose `from_onnx` raises `ctx.not_representable(reason)`, becomes
an opaque node: a real model never fails to import because einsat lacks an op. An einsat bug
met on a node ONNX accepts (a crash in `from_onnx`, a type that disagrees with ONNX shape
inference) also keeps the node opaque, with an `OpaqueFallbackWarning`; an `EinsatError` from
`from_onnx` (a bad attribute value, mismatched shapes) is the model's fault and is raised.
An opaque node's output types come from ONNX shape inference; where it lost one on the way,
the node alone is inferred again from einsat's static input types (`infer_node_types`).

Constants read by an einsat node as an input are the graph's weights; those only read as
attributes (Reshape's shape) vanish. ONNX value names are kept; node names are made unique.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from einsat.errors import AttributeValueError, EinsatError, OnnxError, ShapeError
from einsat.ir.graph import Graph, Node, _frozen, _typed_node, fresh_name
from einsat.ir.onnx.fold import fold, foldable
from einsat.ir.onnx.read import (
    DEFAULT_DOMAINS,
    attr_value,
    default_opset,
    infer_node_types,
    live_nodes,
    outer_names,
    prepare,
    read_model,
    static_type,
    type_text,
    value_type,
)
from einsat.ir.onnx.sequences import HANDLERS as SEQUENCE_OPS
from einsat.ir.onnx.symbolic import fold_dims, opaque_types
from einsat.ir.onnx.weights import detach_weights, random_weights, stripped_weights
from einsat.ir.ops.opaque import run_onnx_node
from einsat.ir.registry import REGISTRY, Op, normalize_attrs, opdef
from einsat.ir.types import TensorType


class NotRepresentable(Exception):
    """Raised (via `ctx.not_representable`) by a `from_onnx` that cannot express a node."""


class OpaqueFallbackWarning(UserWarning):
    """An op's `from_onnx` crashed, or its types disagree with ONNX shape inference, on a node
    ONNX accepts: an einsat bug, worked around by keeping the node opaque."""


class _Disagreement(OnnxError):
    """einsat's inferred type of a value differs from ONNX shape inference's."""


def load_onnx(src, *, fill_weights: str | None = None, seed: int = 0, input_shapes=None,
              symbolic: bool = False) -> Graph:
    """Import an ONNX model. `fill_weights="random"` first gives its floating-point weights
    seeded random values (`onnx.weights`); `input_shapes={name: shape}` fixes symbolic dims.
    `symbolic=True` keeps the symbolic dims `input_shapes` leaves (the inputs' `dim_param`s) as
    `SymDim`s through the program (`einsat.ir.onnx.symbolic`, docs/dynamic-shapes.md)."""
    model, label = read_model(src)
    weights: dict[str, np.ndarray] = {}
    if fill_weights == "random":
        model, weights = random_weights(model, seed)
    elif fill_weights is not None:
        raise OnnxError(f"{label}: fill_weights={fill_weights!r}; use None (keep) or 'random'")
    stripped = stripped_weights(model)  # none left once filled
    model, big = detach_weights(model)
    weights.update(big)
    return ImportContext(prepare(model, label, input_shapes, weights, symbolic), label, weights, stripped,
                         symbolic=symbolic).run()


def onnx_ops() -> dict[str, Any]:
    """ONNX op type -> the registry op importing it (the first registered, when several share it)."""
    table: dict[str, Any] = {}
    for d in REGISTRY.values():
        if d.onnx_type and d.op is not Op.OPAQUE and not d.onnx_domain:
            table.setdefault(d.onnx_type, d)
    return table


def domain_ops() -> dict[tuple[str, str], Any]:
    """(domain, op type) -> the registry op importing a node of another domain than ONNX's
    (onnxruntime's com.microsoft SkipLayerNormalization, ...)."""
    return {(d.onnx_domain, d.onnx_type): d for d in REGISTRY.values() if d.onnx_type and d.onnx_domain}


class ImportContext:
    """The state of one import, and the interface `OpDef.from_onnx` uses."""

    def __init__(self, model: onnx.ModelProto, label: str, weights=None, stripped=(), symbolic: bool = False):
        g = model.graph
        self.symbolic = symbolic
        # symbolic import: 1-D integer values computed from shapes, as object arrays of dims
        # (`Shape -> Gather -> Concat -> Reshape`; einsat.ir.onnx.symbolic)
        self.dim_values: dict[str, np.ndarray] = {}
        self.model, self.label = model, label
        self.stripped = set(stripped)
        self.opset = default_opset(model)
        self._opsets = {("" if o.domain in DEFAULT_DOMAINS else o.domain): o.version for o in model.opset_import}
        self.constants: dict[str, np.ndarray] = {i.name: _frozen(numpy_helper.to_array(i)) for i in g.initializer}
        self.constants.update((n, _frozen(v)) for n, v in (weights or {}).items())
        self.inputs = {i.name: value_type(i, label, symbolic) for i in g.input if i.name not in self.constants}
        self.types: dict[str, TensorType] = dict(self.inputs)
        self.onnx_types = {vi.name: t for vi in (*g.value_info, *g.output) if (t := static_type(vi))}
        self.kinds = {vi.name: type_text(vi.type) for vi in (*g.value_info, *g.output, *g.input)}
        self.sequences: dict[str, tuple[str, ...]] = {}  # onnx.sequences: followed at import
        self.optionals: dict[str, tuple[str, ...]] = {}
        self.nodes: list[Node] = []
        self.alias: dict[str, str] = {}
        self.folded: set[str] = set()  # constants computed at import (not the model's initializers)
        self._ops = onnx_ops()
        self._domain_ops = domain_ops()
        self._names = {n for node in g.node for n in (*node.input, *node.output)} | set(self.types)
        self._node_names: set[str] = set()
        self._fresh_count = 0
        self._onode: onnx.NodeProto | None = None

    # -- the interface of OpDef.from_onnx ------------------------------------------------
    def attrs(self, onode: onnx.NodeProto) -> dict[str, Any]:
        """The node's attributes as Python values (ints, floats, str, tuples, arrays)."""
        return {a.name: attr_value(a) for a in onode.attribute}

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(self.alias.get(name, name)) if name else None

    def dims(self, name: str) -> tuple | None:
        """A shape-like value as dims: a constant's ints, or a value computed from symbolic shapes
        (ints and `SymDim`s); None when neither (it depends on data)."""
        if not name:
            return None
        name = self.alias.get(name, name)
        if name in self.dim_values:
            return tuple(self.dim_values[name].reshape(-1))
        value = self.constants.get(name)
        return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))

    def type(self, name: str) -> TensorType | None:
        if not name:
            return None
        name = self.alias.get(name, name)
        if name in self.types:
            return self.types[name]
        if name in self.sequences or name in self.optionals:
            raise OnnxError(f"{self.where()}: {name!r} has type {self.kind(name)}; einsat follows sequences and "
                            f"optionals only through the ONNX sequence and optional ops")
        if name in self.constants:
            return TensorType.of(self.constants[name])
        if name in self.onnx_types:
            return self.onnx_types[name]
        raise ShapeError(f"{self.where()}: the shape of {name!r} is unknown")

    def kind(self, name: str) -> str:
        """The ONNX type of a value as text ('tensor(float)', 'sequence(tensor(int64))', ...)."""
        return self.kinds.get(self.alias.get(name, name), "value of unknown type")

    def not_representable(self, reason: str) -> Exception:
        return NotRepresentable(reason)

    def emit(self, op: Op, inputs, attrs) -> str:
        """Add a helper node (for ops that import as several einsat nodes); its output name."""
        base = self._onode.output[0] if self._onode is not None else op.value
        out = self._fresh(f"{base}__{op.value}")
        self._add(op, list(inputs), [out], attrs, name=self._node_name(out))
        return out

    # -- the import loop -----------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        for onode in live_nodes(g):
            self._onode = onode
            try:
                self._convert(_resolved(onode, self.alias), used)
            except EinsatError as e:
                raise type(e)(f"{self.label}: {e}" if not str(e).startswith(self.label) else str(e)) from None
        self._onode = None
        outputs = [o.name for o in g.output]
        for o in outputs:
            target = self.alias.get(o)
            if target is not None and target in self.constants:
                self.constants[o] = self.constants[target]
            elif target is not None:
                self._add(Op.IDENTITY, [target], [o], {}, name=self._node_name(o))
        self.nodes = _live(self.nodes, outputs)
        used = {i for n in self.nodes for i in n.inputs} | set(outputs)
        weights = {k: v for k, v in self.constants.items() if k in used}
        for name in sorted(self.folded & set(weights)):  # a zero buffer stays a broadcast of one zero
            if weights[name].nbytes >= FILLED_BYTES and not np.any(weights[name]):
                one = self._fresh(f"{name}__value")
                weights[one] = self.constants[one] = _frozen(weights.pop(name).reshape(-1)[:1].reshape(()))
                self._add(Op.EXPAND, [one], [name], {"shape": self.constants[name].shape}, name=self._node_name(name))
        try:
            return Graph(self.nodes, self.inputs, outputs, weights, name=g.name or "graph",
                         stripped_weights=self.stripped & set(self.inputs))
        except EinsatError as e:
            raise type(e)(f"{self.label}: {e}") from None

    def _convert(self, onode: onnx.NodeProto, used: set[str]) -> None:
        default = onode.domain in DEFAULT_DOMAINS
        if default and onode.op_type in SEQUENCE_OPS:
            SEQUENCE_OPS[onode.op_type](self, onode)
            return
        if self.symbolic and fold_dims(self, onode):
            return
        if foldable(onode, self.constants, self.types):
            try:
                values = fold(onode, self.constants, self.types, self.opset)
            except Exception:  # onnx.reference lacks the op, or rejects the values: import it as a node
                values = None
            if values is not None:
                for o, v in zip(onode.output, values):
                    if o and v is not None:
                        self.constants[o] = _frozen(v)
                self.folded.update(onode.output)
                return
        if default:
            self._check_enums(onode)
        if default and onode.op_type in _SPECIAL and _SPECIAL[onode.op_type](self, onode, used):
            return
        d = self._ops.get(onode.op_type) if default else self._domain_ops.get((onode.domain, onode.op_type))
        reason = f"einsat has no op for {onode.op_type!r}" if d is None else ""
        name = self._node_name(onode.name)
        if d is not None:
            mark = len(self.nodes)
            try:
                inputs, attrs = d.from_onnx(self, onode)
                self._add(d.op, inputs, d.onnx_outputs(onode), attrs, name=name, used=used)
                return
            except NotRepresentable as e:
                reason = str(e)
            except Exception as e:
                if isinstance(e, EinsatError) and not isinstance(e, _Disagreement):
                    raise  # the model is wrong: a clear error naming the node
                # einsat's mapping failed on a node ONNX accepts: keep it, correctly, as opaque
                reason = f"einsat's {d.op.value} import failed: {type(e).__name__}: {e}"
                warnings.warn(f"{self.label}: {self.where()}: {reason}; kept opaque",
                              OpaqueFallbackWarning, stacklevel=2)
            del self.nodes[mark:]
        self._add_opaque(onode, reason, name)

    def _check_enums(self, onode: onnx.NodeProto) -> None:
        """String attributes ONNX allows only a few values for: an error here, not a silent
        default in an op's `from_onnx` or a failure when an opaque node runs."""
        for a in onode.attribute:
            allowed = _ENUMS.get((onode.op_type, a.name)) or _ENUMS.get((None, a.name))
            if allowed and a.type == onnx.AttributeProto.STRING and a.s.decode(errors="replace") not in allowed:
                raise AttributeValueError(f"{self.where()}: attribute {a.name}={a.s.decode(errors='replace')!r} "
                                          f"is not one of {sorted(allowed)}")

    def _add(self, op: Op, inputs, outputs, attrs, name: str, used: set[str] | None = None) -> None:
        in_types = [self.type(i) for i in inputs]
        where = f"{self.where()} as {op.value}"
        n_out = opdef(op).num_outputs(normalize_attrs(op, attrs, in_types, where=where))
        if used is not None:
            extra = [o for o in outputs[n_out:] if o in used]
            if extra:
                raise NotRepresentable(f"einsat's {op.value} has {n_out} outputs, the model uses {extra}")
            outputs = [o or self._fresh(f"{name}__unused") for o in outputs[:n_out]]
            outputs += [self._fresh(f"{name}__out") for _ in range(n_out - len(outputs))]
        node = _typed_node(Node(op, inputs, outputs, attrs, name), in_types, self.types)
        for o in node.outputs:
            want = self.onnx_types.get(o)
            if want is not None and want != self.types[o]:
                raise _Disagreement(f"{where}: einsat infers {self.types[o]} for {o!r}, ONNX shape "
                                    f"inference {want} (an einsat bug: please report it)")
        self.nodes.append(node)

    def _add_opaque(self, onode: onnx.NodeProto, reason: str, name: str) -> None:
        outer = outer_names(onode)
        if outer:
            raise OnnxError(f"{self.where()}: kept as an opaque node ({reason}), but its subgraph reads "
                            f"{sorted(outer)} from the enclosing graph; an opaque node runs on its own inputs only")
        outputs = [o for o in onode.output if o]
        missing = [o for o in outputs if o not in self.onnx_types]
        if missing:
            types = {i: self.type(i) for i in onode.input if i}
            self.onnx_types.update(infer_node_types(onode, types, self.constants, self._opsets))
            missing = [o for o in outputs if o not in self.onnx_types]
        if missing and self.symbolic:
            self.onnx_types.update(opaque_types(self, onode, missing))
            missing = [o for o in outputs if o not in self.onnx_types]
        others = [f"{o!r} of type {self.kinds[o]}" for o in missing
                  if not self.kinds.get(o, "tensor").startswith("tensor")]
        if others:
            raise OnnxError(f"{self.where()}: makes {'; '.join(others)}; einsat computes tensors, and follows "
                            f"sequences and optionals only through the ONNX sequence and optional ops")
        if missing and onode.domain not in DEFAULT_DOMAINS:  # ONNX's own ops: no type is a data-dependent shape
            ran = self._types_by_running(onode)
            self.onnx_types.update((o, ran[o]) for o in missing if o in ran)
            missing = [o for o in outputs if o not in self.onnx_types]
        if missing:
            raise ShapeError(f"{self.where()}: kept as an opaque node ({reason}), but ONNX shape inference "
                             f"gives no static type for {missing} and einsat could not run the node once to "
                             f"learn them; einsat needs static shapes. Give the op an implementation with "
                             f"einsat.register_onnx_op(cls) (an onnx.reference OpRun subclass; einsat then "
                             f"runs it once on example inputs), or declare the outputs' types in the model "
                             f"(a value_info for each)")
        domain = "" if onode.domain in DEFAULT_DOMAINS else onode.domain
        attrs = {"op_type": onode.op_type, "domain": domain, "node": onode.SerializeToString(),
                 "opset": self._opsets.get(domain, self.opset),
                 "output_types": tuple(self.onnx_types[o] for o in outputs)}
        self._add(Op.OPAQUE, list(onode.input), outputs, attrs, name=name)

    def _types_by_running(self, onode: onnx.NodeProto) -> dict[str, TensorType]:
        """The output types of a node ONNX cannot type, from running it once with `onnx.reference`
        (and the implementations `register_onnx_op` gave it) on its constant inputs and seeded
        example values of its other inputs' types. Empty when it cannot run. The types found are
        promised like inferred ones: every later run of the node is checked against them."""
        domain = "" if onode.domain in DEFAULT_DOMAINS else onode.domain
        node, opset = onode.SerializeToString(), self._opsets.get(domain, self.opset)
        outputs = [o for o in onode.output if o]
        found = []
        for seed in (0, 1):  # two draws: an output whose shape follows the values is refused, not guessed
            rng = np.random.default_rng(seed)
            args = []
            for name in onode.input:
                value = self.constant(name) if name else None
                if not name:
                    args.append(None)
                elif value is not None:
                    args.append(np.asarray(value))
                else:
                    t = self.type(name)
                    kind = np.dtype(t.dtype)
                    args.append(rng.random(t.shape).astype(kind) if kind.kind == "f"
                                else rng.integers(0, 2, t.shape).astype(kind))
            try:
                results = run_onnx_node(node, domain, opset, args)
            except Exception:  # it cannot run: the caller says what would help
                return {}
            found.append({o: TensorType.of(r) for o, r in zip(outputs, results)})
        if found[0] != found[1]:
            raise ShapeError(f"{self.where()}: its output types depend on its input values ({found[0]} on one "
                             f"example input, {found[1]} on another); einsat needs static shapes")
        return found[0]

    # -- names ---------------------------------------------------------------------------
    def where(self) -> str:
        o = self._onode
        return "ONNX node ?" if o is None else f"ONNX node {o.name or o.output[0]!r} ({o.op_type})"

    def _fresh(self, hint: str) -> str:
        name = hint
        while name in self._names:
            self._fresh_count += 1
            name = f"{hint}{self._fresh_count}"
        self._names.add(name)
        return name

    def _node_name(self, preferred: str) -> str:
        o = self._onode
        return fresh_name(preferred or (o.output[0] if o is not None and o.output else "node"), self._node_names)


# -- ONNX ops handled by the importer itself ------------------------------------------------

def _identity(ctx: ImportContext, onode, used) -> bool:
    ctx.alias[onode.output[0]] = onode.input[0]
    return True


def _dropout(ctx: ImportContext, onode, used) -> bool:
    """Inference-mode Dropout is the identity (its mask, if read, all true)."""
    training = onode.input[2] if len(onode.input) > 2 else ""
    if training and (ctx.constant(training) is None or bool(ctx.constant(training))):
        return False  # training mode: random, kept opaque
    ctx.alias[onode.output[0]] = onode.input[0]
    if len(onode.output) > 1 and onode.output[1] in used:
        ctx.constants[onode.output[1]] = _frozen(np.ones(ctx.type(onode.input[0]).shape, np.bool_))
    return True


def _sum(ctx: ImportContext, onode, used) -> bool:
    """Sum(x1, ..., xn) = add(...add(add(x1, x2), x3)..., xn)."""
    xs = list(onode.input)
    if len(xs) == 1:
        ctx.alias[onode.output[0]] = xs[0]
        return True
    acc = xs[0]
    for x in xs[1:-1]:
        acc = ctx.emit(Op.ADD, [acc, x], {})
    ctx._add(Op.ADD, [acc, xs[-1]], [onode.output[0]], {}, name=ctx._node_name(onode.name))
    return True


def _cast_like(ctx: ImportContext, onode, used) -> bool:
    """CastLike(x, like) = cast(x, like's dtype); its `saturate` matters only for float8, refused."""
    dtype = ctx.type(onode.input[1]).dtype.name
    ctx._add(Op.CAST, [onode.input[0]], [onode.output[0]], {"dtype": dtype}, name=ctx._node_name(onode.name))
    return True


def _reciprocal(ctx: ImportContext, onode, used) -> bool:
    """Reciprocal(x) = div(1, x), as IEEE division computes it (RMSNorm's 1/√(mean(x²) + ε)
    in PyTorch's exports); 1 is a scalar constant of x's dtype."""
    t = ctx.type(onode.input[0])
    if t is None or t.dtype.kind != "f":
        return False
    one = ctx._fresh(f"{onode.output[0]}__one")
    ctx.constants[one] = _frozen(np.ones((), t.dtype))
    ctx._add(Op.DIV, [one, onode.input[0]], [onode.output[0]], {}, name=ctx._node_name(onode.name))
    return True


_SPECIAL = {"Identity": _identity, "Dropout": _dropout, "Sum": _sum, "CastLike": _cast_like,
            "Reciprocal": _reciprocal}

# (op type or None for every op, attribute) -> the values the ONNX spec allows
_ENUMS = {
    (None, "auto_pad"): {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"},
    ("Pad", "mode"): {"constant", "reflect", "edge", "wrap"},
    ("Gelu", "approximate"): {"none", "tanh"},
}


def _live(nodes: list[Node], outputs: list[str]) -> list[Node]:
    """The nodes the outputs depend on (a SplitToSequence cuts pieces no one may read)."""
    needed, live = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.outputs):
            live.append(node)
            needed.update(node.inputs)
    return live[::-1]


def _resolved(onode: onnx.NodeProto, alias: dict[str, str]) -> onnx.NodeProto:
    if not any(i in alias for i in onode.input):
        return onode
    copy = onnx.NodeProto()
    copy.CopyFrom(onode)
    del copy.input[:]
    copy.input.extend(alias.get(i, i) for i in onode.input)
    return copy


# a folded all-zero value this large imports as an Expand of one zero (a buffer, ConstantOfShape's
# default; the model zoo's "light" models fill their placeholder weights with 0.02: weights)
FILLED_BYTES = 1 << 16
