"""The opaque op: an ONNX node einsat has no op for, carried through unchanged.

An opaque node holds the serialized ONNX `NodeProto` (so its attributes round-trip exactly),
the opset of its domain and the output types ONNX shape inference gave it at import. Its
registry semantics (`numpy`) are `onnx.reference`'s (one evaluator per distinct node, cached),
which import-time folding uses; the runtime's NumPy backend runs it in onnxruntime
(`einsat.runtime.onnx_nodes`) and falls back to these where onnxruntime lacks the op. It
exports as the same node. The optimizer treats it as a black box: no flags, never rewritten.

An op of a custom domain that neither runtime implements (`com.example`'s `MyFancyOp`) is
imported, summarized and exported, but cannot run until it has an implementation:
`register_onnx_op(cls)` gives onnx.reference one, an `onnx.reference.op_run.OpRun` subclass named
as the op type, with `op_domain` its domain and `_run(self, *inputs, **attributes)` returning a
tuple of arrays (in this process: worker processes of a partitioned run import their own).

The node's inputs are positional: einsat input k is the ONNX node's input k ('' when absent);
its outputs are the ONNX node's non-empty outputs, in order.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from einsat.ir.registry import Attr, Op, OpDef, ShapeError, register
from einsat.ir.types import TensorType


def _is_bytes(v) -> str | None:
    return None if isinstance(v, bytes) else "must be a serialized onnx NodeProto (bytes)"


def _types_tuple(v) -> str | None:
    ok = isinstance(v, tuple) and v and all(isinstance(t, TensorType) for t in v)
    return None if ok else "must be a non-empty tuple of TensorType"


@lru_cache(maxsize=4096)
def parse_node(node: bytes):
    """The NodeProto stored in an opaque node's `node` attribute (parsed once per distinct node)."""
    import onnx

    proto = onnx.NodeProto()
    proto.ParseFromString(node)
    return proto


def renamed_node(node: bytes, inputs, outputs):
    """A copy of the stored NodeProto with its inputs and non-empty outputs renamed."""
    import onnx

    proto = onnx.NodeProto()
    proto.CopyFrom(parse_node(node))
    outs = iter(outputs)
    new_outputs = [next(outs) if o else "" for o in proto.output]
    del proto.input[:]
    proto.input.extend(inputs)
    del proto.output[:]
    proto.output.extend(new_outputs)
    return proto


@lru_cache(maxsize=4096)
def positional_node(node: bytes):
    """(proto, inputs, outputs): the stored node, unnamed, with its inputs renamed `in{k}` ('' where
    absent) and its non-empty outputs `out{k}`, by position: equal for equal op, domain and
    attributes, whatever the values are called in the graph."""
    proto = parse_node(node)
    ins = [f"in{k}" if name else "" for k, name in enumerate(proto.input)]
    outs = [f"out{k}" for k, name in enumerate(proto.output) if name]
    one = renamed_node(node, ins, outs)
    one.name = ""
    return one, ins, outs


def check_results(results, attrs, computed_by: str) -> list[np.ndarray]:
    """`results`, after checking each has the type shape inference promised at import."""
    for r, t in zip(results, attrs["output_types"]):
        if r.shape != t.shape or r.dtype != t.dtype:
            raise ValueError(f"{computed_by} computed {TensorType.of(r)} for {attrs['op_type']}, "
                             f"but shape inference promised {t}")
    return results


def run_onnx_node(node: bytes, domain: str, opset: int, args) -> list[np.ndarray]:
    """Run one serialized ONNX node on NumPy arrays (None for an absent input) with
    `onnx.reference`; returns the values of its non-empty outputs."""
    # dtypes, not their `.str`: bfloat16's is '<V2', which reads back as a void type
    dtypes = tuple(np.dtype(a.dtype) if a is not None else None for a in args)
    ev, names, outs = _evaluator(node, domain, opset, dtypes)
    feed = dict(zip(names, (a for a in args if a is not None)))
    return [np.asarray(r) for r in ev.run(outs, feed)]


def _lrn_fixed():
    """onnx.reference's LRN sums over the batch axis instead of the channel axis in onnx <= 1.23
    (onnx/onnx#7805, fixed upstream by #8331): this is the spec's LRN, used in its place."""
    from onnx.reference.op_run import OpRun

    class LRN(OpRun):
        op_domain = ""

        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            c = x.shape[1]
            lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
            sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
            square_sum = sum(sq[:, k:k + c] for k in range(size))
            return ((x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype),)

    return LRN


@lru_cache(maxsize=256)
def _evaluator(node: bytes, domain: str, opset: int, in_dtypes: tuple):
    """A ReferenceEvaluator for a one-node model: inputs `in{k}`, outputs `out{k}`."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    one, ins, outs = positional_node(node)
    g_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), None)
            for n, dt in zip(ins, in_dtypes) if n]
    g_out = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outs]
    graph = helper.make_graph([one], "opaque", g_in, g_out)
    # a node of another domain may hold graph attributes of ai.onnx ops (FlexAttention's score
    # functions): the default domain is declared too, at the newest opset onnx knows
    opsets = {domain: opset} if domain in ("", "ai.onnx") else {domain: opset, "": onnx.defs.onnx_opset_version()}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    return ReferenceEvaluator(model, new_ops=[*_REFERENCE_FIXES(), *_REGISTERED.values()]), \
        [n for n in ins if n], outs


# op implementations given by the user (`register_onnx_op`): (domain, op type) -> OpRun subclass
_REGISTERED: dict[tuple[str, str], type] = {}


def register_onnx_op(op_class: type) -> None:
    """Run the ONNX nodes of `op_class`'s op type (its class name) and domain (its `op_domain`)
    with it where onnxruntime cannot: an `onnx.reference.op_run.OpRun` subclass whose
    `_run(self, *inputs, **attributes)` returns a tuple of arrays (see the module docstring)."""
    from onnx.reference.op_run import OpRun

    if not (isinstance(op_class, type) and issubclass(op_class, OpRun)):
        raise TypeError(f"register_onnx_op takes an onnx.reference.op_run.OpRun subclass, not {op_class!r}")
    _REGISTERED[(getattr(op_class, "op_domain", ""), op_class.__name__)] = op_class
    _evaluator.cache_clear()


def unregister_onnx_op(op_class: type) -> None:
    """Forget an implementation given by `register_onnx_op`."""
    _REGISTERED.pop((getattr(op_class, "op_domain", ""), op_class.__name__), None)
    _evaluator.cache_clear()


def reference_runs(node: bytes, domain: str, opset: int, in_dtypes: tuple) -> bool:
    """Whether onnx.reference (with the registered ops) implements this serialized node for
    inputs of these dtypes (NumPy dtypes, None for an absent input)."""
    try:
        _evaluator(node, domain, opset, in_dtypes)
    except Exception:  # NotImplementedError for an unknown op; anything else: it cannot run either
        return False
    return True


@lru_cache(maxsize=1)
def _REFERENCE_FIXES():
    return [_lrn_fixed()]


@register
class Opaque(OpDef):
    op = Op.OPAQUE
    dtype_of_first = False  # a black box promises nothing
    foldable = False
    arity = (0, None)
    onnx_type = None  # any ONNX op einsat lacks; never looked up by type
    attrs = {
        "op_type": Attr("str", doc="the ONNX op type"),
        "domain": Attr("str", "", doc="the ONNX domain ('' is ai.onnx)"),
        "node": Attr("any", check=_is_bytes, doc="the serialized NodeProto"),
        "opset": Attr("int", doc="the opset version of `domain`"),
        "output_types": Attr("any", check=_types_tuple, doc="from ONNX shape inference at import"),
    }
    doc = "an ONNX node einsat has no op for: runs in onnxruntime (else onnx.reference), exports unchanged"

    def normalize(self, attrs, types):
        attrs["output_types"] = tuple(attrs["output_types"])
        return attrs

    def num_outputs(self, attrs):
        return len(attrs["output_types"])

    def infer(self, types, attrs):
        proto = parse_node(attrs["node"])
        if len(types) != len(proto.input):
            raise ShapeError(f"the ONNX {attrs['op_type']} node takes {len(proto.input)} inputs "
                             f"(positionally), got {len(types)}")
        return list(attrs["output_types"])

    def numpy(self, args, attrs):
        return check_results(run_onnx_node(attrs["node"], attrs["domain"], attrs["opset"], args), attrs,
                             "onnx.reference")

    def flops(self, ins, outs, attrs):
        """An estimate, since the op is unknown: one operation per output element."""
        return sum(t.size for t in outs)

    def to_onnx(self, ctx, node):
        """The stored node, with this node's input and output names, in its own domain/opset.
        A default-domain node is written at the export's opset: as is when its schema did not
        change in between, else through `onnx.version_converter`."""
        a = node.attrs
        proto = renamed_node(a["node"], node.inputs, node.outputs)
        if not a["domain"]:
            ctx.require(a["op_type"])  # an op newer than the cap (Attention under 23) is refused by name
        if a["domain"] or a["opset"] == ctx.opset or _same_schema(a["op_type"], a["opset"], ctx.opset):
            ctx.raw_node(proto, domain=a["domain"], opset=None if not a["domain"] else a["opset"])
            return
        for converted in _converted(proto, a["opset"], ctx.opset, ctx):
            ctx.raw_node(converted)


def _same_schema(op_type: str, old: int, new: int) -> bool:
    from onnx import defs

    try:
        return defs.get_schema(op_type, old).since_version == defs.get_schema(op_type, new).since_version
    except Exception:  # an op unknown to this onnx: nothing to convert it with
        return False


def _converted(proto, old: int, new: int, ctx) -> list:
    """The node rewritten for opset `new` (the converter may emit several nodes)."""
    from onnx import helper, version_converter

    def info(name):
        t = ctx.type(name)
        shape = [d if isinstance(d, int) else str(d) for d in t.shape]  # a symbolic dim as a dim_param
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape)

    ins = [info(i) for i in dict.fromkeys(i for i in proto.input if i)]
    outs = [info(o) for o in proto.output if o]
    model = helper.make_model(helper.make_graph([proto], "opaque", ins, outs),
                              opset_imports=[helper.make_opsetid("", old)])
    try:
        converted = version_converter.convert_version(model, new)
    except Exception as e:
        raise ValueError(f"onnx.version_converter cannot bring {proto.op_type} from opset {old} to {new}: {e}")
    nodes = list(converted.graph.node)
    rename = {v: ctx.fresh(v) for n in nodes for v in n.output if v and v not in proto.output}
    for n in nodes:  # the converter's intermediate values get names unique in the exported model
        for field in (n.input, n.output):
            names = [rename.get(v, v) for v in field]
            del field[:]
            field.extend(names)
    return nodes
