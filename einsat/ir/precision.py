"""Half precision: converting an fp32 program to bf16 or fp16, an explicit step.

    half = convert(graph, "bf16")                      # inputs and outputs stay fp32
    half = convert(graph, "fp16", half_io=True)        # the caller passes and gets half

What the conversion does (`Policy`, after mixed-precision practice: a short list of ops whose
arithmetic needs fp32, everything else on half storage):

- Weights are cast to half once, at conversion (the program stores them in half), a value
  beyond the half's range clamped to its largest finite one (`to_half`); a weight read only
  by fp32 ops stays fp32.
- Every floating value of the program becomes half: its producer runs on half operands and
  rounds its result to half. Matrix products, convolutions and attention (`OpDef.tensor_core`)
  accumulate in fp32 and round once: that is their semantics on half operands in the NumPy
  reference (`runtime.backend_numpy`), as in cuBLAS' GemmEx with COMPUTE_32F.
- The ops of `Policy.fp32` (softmax, layer/RMS normalization, sums and means, exp, log, pow,
  average pooling, cumsum: the statistics) run in fp32: their half operands are cast to fp32
  and their results cast back to half where a half op reads them ("cast in, compute in fp32,
  cast out"; a kernel that fuses the casts reads and writes half and computes in float); a
  result read only by fp32 ops stays fp32 (an exp feeding a sum).
- Sin and cos run in fp32, and so does the computation of their angles (the float ancestors
  of the angle no larger than it: a rotary embedding's positions times frequencies), since
  cos θ of a rounded θ is off by |θ|·u (`angle_nodes`).
- Opaque nodes and control flow keep fp32 the same way (their bodies are not converted).
- Graph inputs are cast to half on entry and outputs back to their dtype on exit, unless
  `half_io`, where the program's interface itself is half.

Values keep their names: a converted node writes the value of the same name as in the input
program (in half), so the two programs can be compared value by value
(`einsat.verify.precision`); the casts the conversion adds are named `<value>__<dtype>`.

A program already in half (a value of it is fp16 or bf16: an fp16 model, Cast nodes and all,
or a converted program) or with no fp32 value is returned as it is (`already_half`). "fp32"
and "tf32" return the program unchanged: tf32 is an fp32 program whose matrix products a GPU
may run on TF32 tensor cores, a flag only the GPU lowering reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from einsat.errors import EinsatError
from einsat.ir.graph import Graph, Node, fresh_name
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.ir.types import TensorType

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
HALF_DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
FP32 = np.dtype(np.float32)

# the statistics: reductions, normalizations and the transcendental ops whose range or
# accumulation half cannot hold (fp16's largest value is 65504; bf16 has 8 significant bits)
STATISTICS = frozenset({
    Op.SOFTMAX, Op.LAYERNORM, Op.RMSNORM, Op.SKIP_LAYERNORM, Op.SKIP_RMSNORM, Op.LRN, Op.REDUCE_SUM, Op.REDUCE_MEAN,
    Op.CUMSUM, Op.AVGPOOL,
    Op.GLOBAL_AVGPOOL, Op.EXP, Op.LOG, Op.POW,
})
# trigonometry: cos θ of a rounded θ is off by |θ|·u (absolute), and rotary embeddings take θ up to
# the sequence length; the ops computing θ stay fp32 with them (`angle_nodes`)
TRIG = frozenset({Op.SIN, Op.COS})
# kept fp32 whole: their semantics live outside the registry (onnxruntime, a body graph)
KEPT = frozenset({Op.OPAQUE, Op.LOOP, Op.IF})


@dataclass(frozen=True)
class Policy:
    """Which ops compute in fp32 (their operands cast in, their results cast out)."""

    fp32: frozenset = field(default=STATISTICS | KEPT | TRIG)
    trig: frozenset = field(default=TRIG)   # their angles' computation stays fp32 too (`angle_nodes`)


DEFAULT_POLICY = Policy()


def half_dtype(precision: str) -> np.dtype | None:
    """The storage dtype of `precision` ("bf16", "fp16"), None for the fp32 ones; a clear error
    for anything else."""
    if precision not in PRECISIONS:
        raise EinsatError(f"unknown precision {precision!r}; choose one of {list(PRECISIONS)}")
    return HALF_DTYPES.get(precision)


def is_half(dtype) -> bool:
    return np.dtype(dtype) in HALF_DTYPES.values()


def unit_roundoff(dtype) -> float:
    """u = 2^-p for a float with p significand bits (bf16 2^-8, fp16 2^-11, fp32 2^-24):
    the largest relative error of one rounding to nearest."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps) / 2


def to_half(array: np.ndarray, dtype) -> np.ndarray:
    """`array` rounded to the half `dtype`, its values beyond the half's range clamped to its
    largest finite value first (fp32's -3.4e38 of an attention mask becomes fp16's -65504, not
    -inf, whose product with a zero would be NaN); infinities and NaN stay as they are."""
    big = float(ml_dtypes.finfo(dtype).max)
    finite = np.isfinite(array)
    return np.where(finite, np.clip(array, -big, big), array).astype(dtype)


def already_half(graph: Graph) -> bool:
    """A program with a half value anywhere (an fp16 or bf16 model, a converted program) or no
    fp32 value at all: its precision is its author's, and `convert` leaves it as it is."""
    dtypes = {t.dtype for t in graph.types.values()}
    return any(is_half(d) for d in dtypes) or FP32 not in dtypes


def convert(graph: Graph, precision: str, half_io: bool = False, policy: Policy = DEFAULT_POLICY) -> Graph:
    """`graph` with its fp32 values in `precision` (see the module docstring)."""
    half = half_dtype(precision)
    if half is None or already_half(graph):
        return graph
    return _Converter(graph, half, half_io, policy).run()


class _Converter:
    def __init__(self, graph: Graph, half: np.dtype, half_io: bool, policy: Policy):
        self.g, self.half, self.half_io, self.policy = graph, half, half_io, policy
        self.taken = set(graph.types) | {n.name for n in graph.nodes}
        self.nodes: list[Node] = []
        self.dtype: dict[str, np.dtype] = {}    # each value's dtype in the converted program
        self.shape = {name: t.shape for name, t in graph.types.items()}
        self.casts: dict[tuple[str, np.dtype], str] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.angles = angle_nodes(graph, policy)
        self.uses = graph.consumers()

    def run(self) -> Graph:
        g = self.g
        inputs = {}
        for name, t in g.input_types().items():
            if t.dtype == FP32 and self.half_io:
                inputs[name] = TensorType(t.shape, self.half)
            else:
                inputs[name] = t
            self.dtype[name] = inputs[name].dtype
        uses = g.consumers()
        for name, w in g.weights.items():
            keep = (name in g.outputs and not self.half_io) or all(self._fp32(n) for n in uses.get(name, ()))
            if w.dtype == FP32 and not keep:
                w = to_half(w, self.half)
            self.weights[name] = w
            self.dtype[name] = w.dtype
        for node in g.nodes:
            self._node(node)
        outputs = []
        for name in g.outputs:
            want = g.types[name].dtype
            if want == FP32 and self.half_io:
                want = self.half
            if self.dtype[name] == want:
                outputs.append(name)
            else:  # the output's name stays the interface's: the half value is renamed
                outputs.append(name)
                self._rename_output(name, want)
        return Graph(self.nodes, inputs, outputs, self.weights, name=g.name)

    def _read_in_half(self, value: str) -> bool:
        """Is the fp32 `value` read by a half op (or a half output)? Else it stays fp32: no cast
        out and back in between fp32 ops (an exp feeding a sum, a rotary angle feeding cos)."""
        return any(not self._fp32(n) for n in self.uses.get(value, ())) or (
            value in self.g.outputs and self.half_io)

    def _fp32(self, node: Node) -> bool:
        return node.op in self.policy.fp32 or node.name in self.angles

    def _cast(self, value: str, dtype: np.dtype) -> str:
        if self.dtype[value] == dtype:
            return value
        key = (value, dtype)
        if key not in self.casts:
            out = fresh_name(f"{value}__{_short(dtype)}", self.taken)
            self.nodes.append(Node(Op.CAST, (value,), (out,), {"dtype": dtype.name}, name=out))
            self.dtype[out], self.shape[out] = dtype, self.shape[value]
            self.casts[key] = out
        return self.casts[key]

    def _node(self, node: Node) -> None:
        fp32 = self._fp32(node)
        compute = FP32 if fp32 else self.half
        ins = []
        for i in node.inputs:
            if i and _floating(self.dtype[i]) and node.op is not Op.CAST:
                i = self._cast(i, compute)
            ins.append(i)
        attrs = dict(node.attrs)
        if node.op is Op.CAST and np.dtype(attrs["dtype"]) == FP32 and not fp32:
            attrs["dtype"] = self.half.name
        in_types = [self._type(i) for i in ins]
        outs = opdef(node.op).infer(in_types, normalize_attrs(node.op, attrs, in_types))
        renamed = []
        for o, t in zip(node.outputs, outs):
            if (t.dtype == FP32 and self.g.types[o].dtype == FP32 and not (node.op is Op.CAST and not fp32)
                    and self._read_in_half(o)):
                renamed.append(fresh_name(f"{o}__f32", self.taken))  # cast out to half below, keeping `o`
            else:
                renamed.append(o)
        self.nodes.append(Node(node.op, tuple(ins), tuple(renamed), attrs, name=node.name))
        for o, r, t in zip(node.outputs, renamed, outs):
            self.dtype[r], self.shape[r] = t.dtype, t.shape
            if r != o:
                self.nodes.append(Node(Op.CAST, (r,), (o,), {"dtype": self.half.name}, name=fresh_name(
                    f"{o}__cast", self.taken)))
                self.dtype[o] = self.half

    def _rename_output(self, name: str, want: np.dtype) -> None:
        """Make the graph output `name` of dtype `want`: its half producer writes `name__<half>`."""
        if name in self.weights or name in self.g.inputs:  # an output that is an input or a weight
            raise EinsatError(f"graph {self.g.name!r}: output {name!r} is an input or a weight; "
                              "convert cannot retype it (convert with half_io=False)")
        inner = fresh_name(f"{name}__{_short(self.dtype[name])}", self.taken)
        for k, n in enumerate(self.nodes):
            if name in n.outputs:
                self.nodes[k] = Node(n.op, n.inputs, tuple(inner if o == name else o for o in n.outputs),
                                     n.attrs, name=n.name)
            if name in n.inputs:
                self.nodes[k] = Node(self.nodes[k].op, tuple(inner if i == name else i for i in n.inputs),
                                     self.nodes[k].outputs, self.nodes[k].attrs, name=n.name)
        self.dtype[inner], self.shape[inner] = self.dtype[name], self.shape[name]
        self.nodes.append(Node(Op.CAST, (inner,), (name,), {"dtype": want.name}, name=fresh_name(
            f"{name}__out", self.taken)))
        self.dtype[name] = want

    def _type(self, value: str) -> TensorType | None:
        return TensorType(self.shape[value], self.dtype[value]) if value else None


def angle_nodes(graph: Graph, policy: Policy) -> set[str]:
    """The nodes computing the angles of sin and cos (in `policy.trig`): their float ancestors no
    larger than the angle (a rotary embedding's positions times its frequencies), kept fp32. A
    rounded angle θ carries |θ|·u of absolute error into cos θ: at θ = 30, 0.12 in bf16."""
    marked: set[str] = set()
    for node in graph.nodes:
        if node.op not in policy.trig:
            continue
        size = graph.types[node.inputs[0]].size
        stack = [node.inputs[0]]
        while stack:
            producer = graph.producer(stack.pop())
            if producer is None or producer.name in marked or any(
                    graph.types[o].size > size for o in producer.outputs):
                continue
            marked.add(producer.name)
            stack += [i for i in producer.inputs if i and _floating(graph.types[i].dtype)]
    return marked


def _floating(dtype) -> bool:
    return np.dtype(dtype) == FP32 or is_half(dtype)


def _short(dtype) -> str:
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(np.dtype(dtype).name, np.dtype(dtype).name)
