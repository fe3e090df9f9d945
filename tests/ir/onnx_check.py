"""Shared checks for op tests: one-node graphs against onnxruntime, and the ONNX mapping both ways.

`check_op(op, inputs, attrs)` builds a one-node einsat graph whose tensor inputs are graph inputs
(fed at run time, so onnxruntime computes rather than folds), then checks that
- normalizing the node's attributes again changes nothing (the normal form is a fixed point),
- the inferred output types equal the shapes and dtypes NumPy produced,
- the exported model passes `onnx.checker.check_model(full_check=True)`,
- onnxruntime (CPU) computes the same outputs (fp32 tolerance),
- the same holds for the model written under opset cap 17 (`to_onnx(g, opset=17)`): it declares
  opset 17 or less, so every op has an opset-17 form (a chain where the op is newer),
- when the op exports as one node of its `onnx_type`, `from_onnx` reads it back to the same
  normalized attributes (through `FakeImport`, a minimal import context).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import einsat
from einsat.ir import Graph, GraphBuilder, Node, Op, TensorType
from einsat.ir.onnx.export import to_onnx
from einsat.ir.registry import REGISTRY, normalize_attrs, opdef

RTOL, ATOL = 1e-4, 1e-5  # fp32, a few hundred terms per sum at most


class NotRepresentable(Exception):
    pass


class FakeImport:
    """The import context `OpDef.from_onnx` reads through, over a whole (small) ONNX model."""

    def __init__(self, model: onnx.ModelProto):
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        g = inferred.graph
        self.opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        self.values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.attribute[0].name == "value":
                self.values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.types = {}
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            tt = vi.type.tensor_type
            self.types[vi.name] = TensorType([d.dim_value for d in tt.shape.dim],
                                             helper.tensor_dtype_to_np_dtype(tt.elem_type))
        for name, a in self.values.items():
            self.types[name] = TensorType.of(a)
        self.emitted = []

    def attrs(self, onode) -> dict:
        out = {}
        for a in onode.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v)
            elif isinstance(v, list):
                v = tuple(x.decode() if isinstance(x, bytes) else x for x in v)
            out[a.name] = v
        return out

    def constant(self, name):
        return self.values.get(name)

    def type(self, name):
        return self.types[name]

    def not_representable(self, reason):
        return NotRepresentable(reason)

    def emit(self, op, inputs, attrs):
        self.emitted.append((op, inputs, attrs))
        return f"emitted{len(self.emitted)}"


def one_node(op: Op, inputs, attrs=None, outputs: int | None = None):
    """(graph, feeds): a graph applying `op` to `inputs` (arrays, or None for an absent optional
    input) as graph inputs x0, x1, ..."""
    b = GraphBuilder(op.value)
    tensors, feeds = [], {}
    for k, a in enumerate(inputs):
        if a is None:
            tensors.append(None)
            continue
        a = np.asarray(a)
        tensors.append(b.input(f"x{k}", a.shape, a.dtype))
        feeds[f"x{k}"] = a
    out = b.op(op, *tensors, outputs=outputs, **(attrs or {}))
    outs = out if isinstance(out, tuple) else (out,)
    return b.build(*outs), feeds


def ort_run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_op(op: Op, inputs, attrs=None, rtol=RTOL, atol=ATOL, outputs: int | None = None):
    """Run every check of the module docstring; returns the graph for further assertions."""
    g, feeds = one_node(op, inputs, attrs, outputs)
    node = g.nodes[0]
    again = normalize_attrs(op, dict(node.attrs), g.node_types(node)[0])
    assert _same(again, dict(node.attrs)), f"normalizing twice changes {dict(node.attrs)} to {again}"
    ours = einsat.run(g, feeds)
    for name in g.outputs:
        got = ours[name]
        assert TensorType.of(got) == g.types[name], \
            f"infer says {g.types[name]}, numpy gave {TensorType.of(got)}"
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    theirs = ort_run(model, feeds)
    for name, want in zip(g.outputs, theirs):
        np.testing.assert_allclose(ours[name], want, rtol=rtol, atol=atol,
                                   err_msg=f"{op.value} vs onnxruntime")
    check_roundtrip(g, model)
    check_cap(g, feeds, ours, CAP, rtol, atol)
    return g


CAP = 17  # the oldest opset every einsat op writes (LayerNormalization is 17's)


def check_cap(g, feeds, ours, cap, rtol=RTOL, atol=ATOL) -> onnx.ModelProto:
    """`g` written under opset cap `cap` declares at most `cap`, is valid ONNX and computes `ours`."""
    model = to_onnx(g, opset=cap)
    declared = next(o.version for o in model.opset_import if o.domain == "")
    assert declared <= cap, f"written under cap {cap}, declares {declared}"
    onnx.checker.check_model(model, full_check=True)
    for name, want in zip(g.outputs, ort_run(model, feeds)):
        np.testing.assert_allclose(ours[name], want, rtol=rtol, atol=atol,
                                   err_msg=f"{g.nodes[0].op.value} vs onnxruntime under cap {cap}")
    return model


def check_roundtrip(g, model) -> None:
    """from_onnx(to_onnx(node)) normalizes to the node's own attributes (single-node exports)."""
    node = g.nodes[0]
    d = opdef(node.op)
    onodes = list(model.graph.node)
    if d.onnx_type is None or len(onodes) != 1 or onodes[0].op_type != d.onnx_type:
        return
    ctx = FakeImport(model)
    inputs, attrs = d.from_onnx(ctx, onodes[0])
    assert [i for i in inputs if i] == [i for i in node.inputs if i]
    types = [g.types[i] if i else None for i in inputs]
    back = normalize_attrs(node.op, attrs, types)
    assert _same(back, dict(node.attrs)), f"{node.op.value}: {back} != {dict(node.attrs)}"


def _same(a: dict, b: dict) -> bool:
    """Equal attributes; floats compare as float32 (ONNX stores float attributes in 32 bits)."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray):
            ok = np.array_equal(x, y)
        elif isinstance(x, float):
            ok = np.float32(x) == np.float32(y)
        else:
            ok = x == y
        if not ok:
            return False
    return True


def node_model(onode: onnx.NodeProto, inputs: dict, initializers: dict, opset: int = 21,
               out_dtype=np.float32) -> onnx.ModelProto:
    """A one-node ONNX model: `inputs` are graph inputs, `initializers` constants."""
    g = helper.make_graph(
        [onode], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None)
         for o in onode.output if o],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def import_node(onode: onnx.NodeProto, inputs: dict, initializers: dict | None = None, opset: int = 21,
                out_dtype=np.float32):
    """(op, einsat inputs, attributes) from the op's `from_onnx` for one hand-written ONNX node."""
    model = node_model(onode, inputs, initializers or {}, opset, out_dtype)
    d = next(d for d in REGISTRY.values() if d.onnx_type == onode.op_type)
    ins, attrs = d.from_onnx(FakeImport(model), onode)
    return d.op, ins, attrs


def check_import(onode: onnx.NodeProto, inputs: dict, initializers: dict | None = None, opset: int = 21,
                 rtol=RTOL, atol=ATOL, out_dtype=np.float32, reference: bool = False):
    """Import one hand-written ONNX node through its op's `from_onnx` and check that the einsat
    node computes what onnxruntime (or, with `reference`, `onnx.reference`: for the few cases
    where onnxruntime departs from the ONNX spec) computes for the ONNX node. Returns the einsat
    graph."""
    initializers = {n: np.asarray(v) for n, v in (initializers or {}).items()}
    model = node_model(onode, inputs, initializers, opset, out_dtype)
    if reference:
        from onnx.reference import ReferenceEvaluator
        want = ReferenceEvaluator(model).run(None, inputs)
    else:
        want = ort_run(model, inputs)
    op, ins, attrs = import_node(onode, inputs, initializers, opset, out_dtype)
    outs = [o for o in onode.output if o]
    weights = {n: a for n, a in initializers.items() if n in ins}
    graph = Graph([Node(op, ins, outs, attrs)], {n: TensorType.of(a) for n, a in inputs.items()}, outs,
                  weights)
    got = einsat.run(graph, inputs)
    for name, w in zip(outs, want):
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=f"imported {onode.op_type}")
    return graph
