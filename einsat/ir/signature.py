"""Op signatures: what the profiler measures and the profile database is keyed by.

A signature is one op application, up to its data: the op, the types (shape, dtype) of its
inputs (None for an absent optional input) and its registry-normalized attributes. The CPU
machine exports the signatures an optimization may need (every e-node of an e-graph, or every
node of a graph) as JSON; the GPU machine, which has no egglog, times them.

Signature file (`einsat-signatures/1`):

    {"format": "einsat-signatures/1",
     "signatures": [{"op": "conv",
                     "inputs": [{"shape": [1, 64, 56, 56], "dtype": "float32"},
                                {"shape": [64, 64, 3, 3], "dtype": "float32"}, null],
                     "attrs": {"stride": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1}},
                    ...]}

Attribute values are JSON numbers, strings and (nested) lists; lists read back as tuples and
the registry normalizes them again, so both machines compute the same `key`:

    conv|f32[1,64,56,56],f32[64,64,3,3],-|dilation=(1,1);groups=1;padding=(1,1,1,1);stride=(1,1)

Ops that have no per-call cost of their own are not profiled (`signature_of` returns None):
sources (constant), ops whose attributes hold programs (loop, if) or ONNX payloads (opaque).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from einsat.errors import EinsatError
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType

FORMAT = "einsat-signatures/1"
UNPROFILED = frozenset({Op.CONSTANT, Op.LOOP, Op.IF, Op.OPAQUE})
_SHORT = {"float32": "f32", "float16": "f16", "float64": "f64", "int64": "i64", "int32": "i32", "bool": "b8",
          "int8": "i8", "uint8": "u8", "int16": "i16", "bfloat16": "bf16"}


def _jsonable(v) -> Any:
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, str):
        return v
    raise TypeError(f"attribute value {v!r} has no JSON form")


def _tupled(v) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt(x) for x in v) + ")"
    return repr(v) if isinstance(v, (str, float)) else str(v)


def type_text(t: TensorType | None) -> str:
    if t is None:
        return "-"
    return f"{_SHORT.get(t.dtype.name, t.dtype.name)}[{','.join(map(str, t.shape))}]"


@dataclass(frozen=True)
class Signature:
    """One op application up to data: op, input types, normalized attributes."""

    op: Op
    inputs: tuple[TensorType | None, ...]
    attrs: tuple[tuple[str, Any], ...]  # sorted (name, value) pairs

    @property
    def key(self) -> str:
        attrs = ";".join(f"{k}={_fmt(v)}" for k, v in self.attrs)
        return f"{self.op.value}|{','.join(type_text(t) for t in self.inputs)}|{attrs}"

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    def outputs(self) -> list[TensorType]:
        return opdef(self.op).infer(list(self.inputs), self.attr_dict)

    def flops(self) -> int:
        try:
            return int(opdef(self.op).flops(list(self.inputs), self.outputs(), self.attr_dict))
        except NotImplementedError:
            return 0

    def bytes(self) -> int:
        return int(opdef(self.op).bytes(list(self.inputs), self.outputs(), self.attr_dict))

    def graph(self) -> Graph:
        """A one-node program applying the op to graph inputs in0, in1, ..."""
        names = [f"in{k}" if t is not None else "" for k, t in enumerate(self.inputs)]
        inputs = {n: t for n, t in zip(names, self.inputs) if t is not None}
        n_out = opdef(self.op).num_outputs(self.attr_dict)
        outs = [f"out{k}" for k in range(n_out)]
        node = Node(self.op, names, outs, self.attr_dict, self.op.value)
        return Graph([node], inputs, outs, name=self.key)

    def to_json(self) -> dict:
        return {"op": self.op.value,
                "inputs": [None if t is None else {"shape": list(t.shape), "dtype": t.dtype.name} for t in self.inputs],
                "attrs": {k: _jsonable(v) for k, v in self.attrs}}

    @staticmethod
    def from_json(d: Mapping) -> "Signature":
        try:
            op = Op(d["op"])
        except (KeyError, ValueError):
            raise EinsatError(f"signature {d!r}: unknown op") from None
        ins = tuple(None if t is None else TensorType(t["shape"], t["dtype"]) for t in d["inputs"])
        sig = signature_of(op, {k: _tupled(v) for k, v in d.get("attrs", {}).items()}, ins)
        if sig is None:
            raise EinsatError(f"signature {d!r}: op {op.value} is not profiled")
        return sig


def signature_of(op: Op, attrs: Mapping[str, Any], ins: Sequence[TensorType | None]) -> Signature | None:
    """The signature of one application, attributes normalized by the registry (None for ops
    that are not profiled)."""
    if op in UNPROFILED:
        return None
    norm = normalize_attrs(op, dict(attrs), list(ins))
    specs = opdef(op).attrs
    try:  # a provenance attribute changes nothing the node computes: one signature with and without
        pairs = tuple(sorted((k, _tupled(_jsonable(v))) for k, v in norm.items() if not specs[k].provenance))
    except TypeError:
        return None
    return Signature(op, tuple(ins), pairs)


def signatures_of_graph(graph: Graph) -> list[Signature]:
    """The distinct signatures of a graph's nodes, in program order."""
    out: dict[str, Signature] = {}
    for node in graph.nodes:
        ins, _ = graph.node_types(node)
        sig = signature_of(node.op, node.attrs, ins)
        if sig is not None:
            out.setdefault(sig.key, sig)
    return list(out.values())


def write_signatures(path, sigs: Iterable[Signature]) -> int:
    """Write a signature file atomically; returns the number of distinct signatures."""
    unique = {s.key: s for s in sigs}
    payload = {"format": FORMAT, "signatures": [s.to_json() for s in unique.values()]}
    atomic_write_json(path, payload)
    return len(unique)


def read_signatures(path) -> list[Signature]:
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        raise EinsatError(f"{path}: not an einsat signature file (format {data.get('format')!r})")
    return [Signature.from_json(d) for d in data["signatures"]]


def atomic_write_json(path, payload) -> None:
    """Write JSON to `path` through a temporary file, so a failure leaves nothing half-written."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1, sort_keys=False)
            f.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a data file is as readable as any other
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
