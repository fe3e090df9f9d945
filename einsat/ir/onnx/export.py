"""Export an `ir.Graph` to ONNX.

Every node exports through its registry definition (`OpDef.to_onnx(ctx, node)`), which emits one
or more standard ONNX nodes through an `ExportContext`. Weights become initializers; graph inputs,
outputs and every einsat intermediate get value infos with their static shapes.

Contract: the model is valid for `onnx.checker.check_model(model, full_check=True)` and runs on
onnxruntime with the same outputs as `einsat.run` (tested op by op). `save_onnx` writes atomically:
on any failure nothing is left at the target path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, defs, helper, numpy_helper

from einsat.errors import EinsatError, OnnxError, describe_node
from einsat.ir.dims import FloorDiv, SymDim
from einsat.ir.graph import Graph, fresh_name
from einsat.ir.onnx.opset import written_opset
from einsat.ir.onnx.tidy import minimal_views, read_names
from einsat.ir.types import TensorType

# The opset cap: ops write the newest form this opset allows (`ctx.opset`), and the model declares
# the least opset those nodes need (`opset.written_opset`). The default is the newest opset the
# pinned onnxruntime opens (1.31 opens 26 and refuses 27; `tests/ir/test_onnx_opset_cap.py`).
EXPORT_OPSET = 26
MIN_OPSET = 13      # einsat reads opsets 13 and newer; an op that needs more than the cap is refused
IR_VERSION = 10     # the least IR version einsat writes (onnxruntime >= 1.18 reads it; 1.31 reads <= 13)
# The revision of how einsat's ops become ONNX nodes: raise it when an op exports differently, so
# CPU profiles measured on the old nodes (their machine key holds it) are not reused.
# 2: eOperators that are offset sums export as Pad, Slice and Add instead of Gathers.
# 3: offset sums whose cut axes are innermost move them outermost (and the sum back).
# 4: the model declares the least opset its nodes need (not 21), under a cap of 26 (#37); attention
#    writes ONNX Attention (23) where the cap allows.
# 5: fused eOperators write their chain of source ops (LayerNormalization, Softmax, ...: their
#    `chain` attribute) instead of the expression's expansion, and views the program does not
#    need (Identity, cancelling or composable Transposes and Reshapes) are no longer written.
# 6: attention with a padding mask computed at run time writes ONNX Attention and the correction of
#    its fully masked rows; a constant mask over the keys is broadcast to the queries (#37).
EXPORT_REVISION = 6


def onnx_dtype(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def value_info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    """A value's ONNX type; a symbolic dim is written as the `dim_param` of its canonical print
    (`batch`, `past_sequence + 1`: an input's own names, as the import read them)."""
    return helper.make_tensor_value_info(name, onnx_dtype(t.dtype), [d if isinstance(d, int) else str(d)
                                                                      for d in t.shape])


def _attribute(key: str, value) -> AttributeProto:
    if isinstance(value, AttributeProto):
        a = AttributeProto()
        a.CopyFrom(value)
        a.name = key
        return a
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, (tuple, list)) and not value:
        return helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
    if isinstance(value, (bool, np.bool_)):
        return helper.make_attribute(key, int(value))
    if isinstance(value, np.integer):
        return helper.make_attribute(key, int(value))
    if isinstance(value, np.floating):
        return helper.make_attribute(key, float(value))
    return helper.make_attribute(key, value)


class ExportContext:
    """What an op's `to_onnx` writes through.

    - `node(op_type, inputs, outputs, domain="", **attrs) -> list[str]`: one ONNX node; attribute
      values are Python ints/floats/strs, tuples of them, NumPy arrays (tensors) or
      AttributeProtos; None leaves the attribute out. Returns the output names.
    - `constant(array, hint="c") -> name`: a new initializer (e.g. Reshape's shape input).
    - `fresh(hint) -> name`: a new unique value name (for the values of an expansion).
    - `type(name) -> TensorType`: the einsat type of a graph value (or of one `declare`d).
    - `declare(name, type)`: the type of a value an op's export adds (a fused chain's members).
    - `raw_node(proto, domain="", opset=None)`: a ready NodeProto (opaque nodes), declaring its
      domain's opset.
    - `opset`: the default-domain opset cap: an op writes the newest form it allows (a form of an
      older opset where a newer one is not allowed); the model declares the least opset its nodes
      need. A default-domain op the cap does not have is refused, naming the opset it needs.
    - `contrib`: the file is written for onnxruntime (cost "cpu"), so onnxruntime's com.microsoft
      contrib ops may be written (SkipLayerNormalization, ...); False: standard ops only (TensorRT
      and other runtimes do not read com.microsoft).
    - `reduce(op_type, x, axes, output, keepdims)`: a Reduce* node, with its axes as an input or
      an attribute as the opset has them.
    """

    def __init__(self, graph: Graph, opset: int, contrib: bool = False):
        self.graph = graph
        self.opset = opset
        self.contrib = contrib
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.domains: dict[str, int] = {"": opset}
        self._taken: set[str] = set(graph.types)
        self._node_names: set[str] = set()
        self._current = ""  # the einsat node being exported: a prefix for fresh names
        self._declared: dict[str, TensorType] = {}
        self._dims: dict = {}  # a symbolic dim -> the [1] int64 value computing it (once per dim)

    def type(self, name: str) -> TensorType:
        t = self._declared.get(name)
        return self.graph.types[name] if t is None else t

    def declare(self, name: str, t: TensorType) -> None:
        self._declared[name] = t

    def fresh(self, hint: str = "t") -> str:
        return fresh_name(f"{self._current}/{hint}" if self._current else hint, self._taken)

    def constant(self, array, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def dims(self, values, hint: str = "shape") -> str:
        """A 1-D int64 value holding `values` (ints and `SymDim`s): an initializer when all are
        ints, else computed in the graph from the inputs' shapes (`Shape` of an input holding the
        symbol, arithmetic, `Concat`), each distinct symbolic dim computed once and shared."""
        values = tuple(values)
        if not any(isinstance(v, SymDim) for v in values):
            return self.constant(np.asarray(values, dtype=np.int64).reshape(-1), hint)
        parts, run = [], []
        for v in values:
            if isinstance(v, SymDim):
                if run:
                    parts.append(self.constant(np.asarray(run, np.int64), hint))
                    run = []
                parts.append(self._dim(v))
            else:
                run.append(int(v))
        if run:
            parts.append(self.constant(np.asarray(run, np.int64), hint))
        if len(parts) == 1:
            return parts[0]
        return self._shared("Concat", parts, hint, axis=0)

    def _shared(self, op_type: str, inputs, hint: str, **attrs) -> str:
        saved, self._current = self._current, ""  # shape arithmetic is named for itself, not a node
        try:
            return self.node(op_type, inputs, [self.fresh(hint)], **attrs)[0]
        finally:
            self._current = saved

    def _dim(self, d) -> str:
        """The [1] int64 value of one symbolic dim (memoized per canonical dim)."""
        if d in self._dims:
            return self._dims[d]
        if isinstance(d, FloorDiv):
            out = self._shared("Div", [self._dim(d.p), self._const1(d.k)], "dim")
        elif isinstance(d, str):
            out = self._symbol(d)
        else:
            out = None
            for m, c in d.terms.items():
                term = None
                for atom, p in m:
                    for _ in range(p):
                        a = self._dim(atom)
                        term = a if term is None else self._shared("Mul", [term, a], "dim")
                if term is None:
                    term = self._const1(c)
                elif c != 1:
                    term = self._shared("Mul", [term, self._const1(c)], "dim")
                out = term if out is None else self._shared("Add", [out, term], "dim")
        self._dims[d] = out
        return out

    def _const1(self, c: int) -> str:
        key = ("const", int(c))
        if key not in self._dims:
            self._dims[key] = self.constant(np.asarray([c], np.int64), "dim_const")
        return self._dims[key]

    def _symbol(self, name: str) -> str:
        """`Shape(x, start=k, end=k+1)` of the first graph input (else value) with `name` as dim k."""
        sources = [*self.graph.inputs, *(o for n in self.graph.nodes for o in n.outputs)]
        for value in sources:
            for k, dim in enumerate(self.graph.types[value].shape):
                if isinstance(dim, SymDim) and dim.terms == {((name, 1),): 1}:
                    return self._shared("Shape", [value], f"{name}_size", start=k, end=k + 1)
        raise OnnxError(f"no value of the program has the symbolic dim {name!r} as a dim of its own: its size "
                        f"cannot be read at run time")

    def _node_name(self) -> str:
        return fresh_name(self._current or "node", self._node_names, sep="/")

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], domain: str = "",
             **attrs) -> list[str]:
        if domain and domain not in self.domains:
            self.domains[domain] = 1
        if not domain:
            self.require(op_type)
        inputs = list(inputs)
        while inputs and not inputs[-1]:  # trailing absent optional inputs are simply left out
            inputs.pop()
        proto = helper.make_node(op_type, inputs, list(outputs), name=self._node_name(), domain=domain)
        proto.attribute.extend(_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None)
        self.nodes.append(proto)
        return list(outputs)

    def require(self, op_type: str) -> None:
        """Raise OnnxError unless the cap's default domain has `op_type`."""
        try:
            defs.get_schema(op_type, self.opset, "")
        except defs.SchemaError:
            since = _since(op_type)
            need = f"needs opset {since}" if since else "is not an ONNX op of this onnx"
            raise OnnxError(f"ONNX {op_type} {need}, the opset cap is {self.opset}") from None

    def reduce(self, op_type: str, x: str, axes: Sequence[int], output: str, keepdims: int) -> list[str]:
        axes = [int(a) for a in axes]
        if op_type == "ReduceSum" or self.opset >= 18:  # ReduceSum's axes are an input from 13, the rest's from 18
            ins = [x, self.constant(np.asarray(axes, np.int64), "axes") if axes else ""]
            return self.node(op_type, ins, [output], keepdims=keepdims)
        return self.node(op_type, [x], [output], keepdims=keepdims, axes=tuple(axes) if axes else None)

    def raw_node(self, proto: onnx.NodeProto, domain: str = "", opset: int | None = None) -> None:
        if domain and (opset is not None or domain not in self.domains):
            self.domains[domain] = max(self.domains.get(domain, 1), opset or 1)
        elif not domain and opset is not None and opset > self.opset:
            raise OnnxError(f"a node needs default-domain opset {opset}, the opset cap is {self.opset}")
        if not domain:
            self.require(proto.op_type)
        if not proto.name:
            proto.name = self._node_name()
        self.nodes.append(proto)


def to_onnx(graph: Graph, opset: int | None = None, contrib: bool = False) -> onnx.ModelProto:
    """The ONNX model of `graph`, its ops written in the newest forms opset `opset` (the cap: from
    MIN_OPSET to EXPORT_OPSET, None for EXPORT_OPSET) allows, declaring the least default-domain
    opset those nodes need (`opset.written_opset`) and the IR version that opset needs. Raises
    `OnnxError` naming the node that cannot be written under the cap (an op of a newer opset, a
    type its op takes from a newer opset only). `contrib`: onnxruntime's com.microsoft ops may be
    written (the file is for onnxruntime: `ExportContext.contrib`)."""
    cap = check_opset(opset)
    ctx = ExportContext(graph, cap, contrib=contrib)
    for node in graph.nodes:
        ctx._current = node.name
        try:
            node.definition.to_onnx(ctx, node)
        except OnnxError as e:
            raise OnnxError(f"cannot export {describe_node(node, graph.types)}: {e}") from None
        except (EinsatError, ValueError, TypeError, KeyError, NotImplementedError) as e:
            raise OnnxError(f"cannot export {describe_node(node, graph.types)}: "
                            f"{type(e).__name__}: {e}") from e
    ctx._current = ""
    weights = [numpy_helper.from_array(np.asarray(a), name) for name, a in graph.weights.items()]
    outputs = set(graph.outputs)
    shapes = {name: t.shape for name, t in {**graph.types, **ctx._declared}.items() if t.is_static}
    nodes = minimal_views(ctx.nodes, graph.outputs, weights + ctx.initializers, shapes, graph.inputs)
    read = read_names(nodes) | outputs  # the export's constants that only a view dropped read are not written
    constants = [t for t in ctx.initializers if t.name in read]
    written = {o for n in nodes for o in n.output}
    intermediates = [value_info(o, graph.types[o]) for n in graph.nodes for o in n.outputs
                     if o not in outputs and o in written]
    g = helper.make_graph(
        nodes, graph.name,
        [value_info(i, graph.types[i]) for i in graph.inputs],
        [value_info(o, graph.types[o]) for o in graph.outputs],
        initializer=weights + constants,
        value_info=intermediates,
    )
    ctx.domains[""] = written_opset(helper.make_model(g, opset_imports=[helper.make_opsetid("", cap)]), cap)
    opsets = [helper.make_opsetid(d, v) for d, v in sorted(ctx.domains.items())]
    return helper.make_model(g, opset_imports=opsets, ir_version=ir_version(opsets), producer_name="einsat")


def check_opset(opset) -> int:
    """The cap `opset` names (None: EXPORT_OPSET), or OnnxError saying which caps einsat takes."""
    if opset is None:
        return EXPORT_OPSET
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) \
            or not MIN_OPSET <= opset <= EXPORT_OPSET:
        raise OnnxError(f"einsat writes ONNX opsets {MIN_OPSET} to {EXPORT_OPSET} (the newest the pinned "
                        f"onnxruntime opens), not opset={opset!r}")
    return int(opset)


def _since(op_type: str) -> int | None:
    """The first default-domain opset that has `op_type` (None: onnx has no such op)."""
    versions = [s.since_version for s in defs.get_all_schemas_with_history()
                if s.name == op_type and s.domain in ("", "ai.onnx")]
    return min(versions, default=None)


def ir_version(opsets) -> int:
    """The IR version a model importing `opsets` (OperatorSetIdProtos) declares: the lowest its
    opsets need, and IR_VERSION at least. Not onnx's own default (`onnx.IR_VERSION`, 14 for onnx
    1.23), which onnxruntime may not read yet (1.31 reads up to 13)."""
    needed = helper.find_min_ir_version_for(list(opsets), ignore_unknown=True)  # custom domains need nothing
    return max(IR_VERSION, needed)


def save_onnx(graph: Graph, path: str | os.PathLike, opset: int | None = None, contrib: bool = False) -> None:
    """Write `graph` to `path` as an ONNX model (`opset`: the cap, `contrib`: onnxruntime's contrib
    ops allowed, see `to_onnx`): checked first,
    then written to a temporary file in the same directory and moved into place, so that a failure
    leaves nothing at `path`."""
    path = os.fspath(path)
    model = to_onnx(graph, opset=opset, contrib=contrib)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise OnnxError(f"graph {graph.name!r}: the exported model is not valid ONNX: {e}") from None
    try:
        data = model.SerializeToString()
    except ValueError as e:  # protobuf's 2 GB limit
        raise OnnxError(f"graph {graph.name!r}: cannot serialize the model ({e})") from None
    write_atomically(data, path)


def write_atomically(data: bytes, path: str | os.PathLike) -> None:
    """Write `data` to `path` through a temporary file in the same directory moved into place:
    a failure leaves nothing at `path`."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".einsat-", suffix=".onnx.tmp", dir=directory)
    except OSError as e:
        raise OnnxError(f"cannot write {path!r}: {e}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a saved model gets the usual mode
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise OnnxError(f"cannot write {path!r}: {e}") from e
        raise


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read the umask is to set it
    os.umask(mask)
    return mask
