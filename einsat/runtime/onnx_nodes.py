"""Opaque ONNX nodes on the NumPy backend: one cached onnxruntime session per distinct node.

A node's session is keyed by its signature: the stored ONNX node with its values renamed by
position (so: op type, domain and attributes; `ir.ops.opaque.positional_node`), its domain's
opset, and the dtypes of its inputs and outputs. The one-node model declares no shapes, so one
session serves a node at every shape. The node runs its registry semantics instead,
`onnx.reference` (`Opaque.numpy`, the spec's executable definition), where onnxruntime cannot
build the session (it lacks the op or this version of it, or is not installed), where the run
fails (onnxruntime refuses some inputs the spec allows: per-channel ConvInteger zero points, a
max over an empty set of bools), and where onnxruntime is known to compute something else than
the spec (`SPEC_ONLY`). Either way its results must have the types ONNX shape inference promised
at import.

A node neither runtime implements (a custom domain's op) is an `ExecutionError` naming it, its op
and domain, and the way out (`einsat.register_onnx_op`); `unrunnable` finds such nodes ahead, so
that `optimize` refuses the program before its search (`check_runnable`), not at its verification.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from einsat.errors import ExecutionError
from einsat.ir.graph import Graph
from einsat.ir.ops.opaque import check_results, positional_node, reference_runs
from einsat.ir.registry import Op
from einsat.runtime.backend_onnxruntime import new_session


def signature(node, args) -> tuple:
    """(positional node bytes, domain, opset, input dtypes, output dtypes): what a session is for."""
    a = node.attrs
    one, _, _ = positional_node(a["node"])
    return (one.SerializeToString(), a["domain"], a["opset"],
            tuple(np.dtype(x.dtype) if x is not None else None for x in args),
            tuple(np.dtype(t.dtype) for t in a["output_types"]))


def _align_corners(proto) -> bool:
    return any(a.name == "coordinate_transformation_mode" and a.s == b"align_corners" for a in proto.attribute)


def _causal_scores_out(proto) -> bool:
    causal = any(a.name == "is_causal" and a.i for a in proto.attribute)
    return causal and len(proto.output) > 3 and bool(proto.output[3])


# ONNX ops where onnxruntime 1.31 (CPU) disagrees with the spec, found by the ONNX conformance node
# cases (tests/ir/test_onnx_conformance.py): op type -> (when, why)
SPEC_ONLY = {
    "Attention": (_causal_scores_out, "its qk_matmul_output leaves out the causal mask the spec applies"),
    "Resize": (_align_corners, "align_corners sampling positions differ when downsampling"),
    "MaxUnpool": (lambda proto: len([i for i in proto.input if i]) == 3,
                  "with an output_shape input, values land at other positions"),
}


def run_opaque(node, args) -> list[np.ndarray]:
    """The outputs of opaque `node` on NumPy `args` (None for an absent input)."""
    found = None if _spec_only(node) else _session(signature(node, args))
    if found is None:
        if not _reference_runs(node, args):
            raise ExecutionError(f"{describe(node)} {CANNOT_RUN}")
        return node.definition.numpy(args, node.attrs)
    session, names, outs = found
    feed = {name: np.asarray(x, order="C") for name, x in zip(names, (x for x in args if x is not None))}
    try:
        results = session.run(outs, feed)
    except Exception:  # onnxruntime refuses inputs the spec allows: the reference runs them
        return node.definition.numpy(args, node.attrs)
    return check_results(results, node.attrs, "onnxruntime")


CANNOT_RUN = ("cannot run: neither onnxruntime nor onnx.reference implements it. Give it a Python "
              "implementation first: einsat.register_onnx_op(cls), cls an onnx.reference.op_run.OpRun "
              "subclass named as the op type, with op_domain its domain")


def describe(node) -> str:
    """`ONNX node 'fancy' (MyFancyOp, domain 'com.example', opset 1)`."""
    a = node.attrs
    return f"ONNX node {node.name!r} ({a['op_type']}, domain {a['domain'] or 'ai.onnx'!r}, opset {a['opset']})"


def _reference_runs(node, args) -> bool:
    a = node.attrs
    return reference_runs(a["node"], a["domain"], a["opset"],
                          tuple(np.dtype(x.dtype) if x is not None else None for x in args))


def runnable(node, types) -> bool:
    """Whether opaque `node` can run on inputs of `types` (TensorTypes, None for an absent input):
    onnx.reference or onnxruntime implements it."""
    return _reference_runs(node, types) or _session(signature(node, types)) is not None


def unrunnable(graph: Graph) -> list:
    """The opaque nodes of `graph` and of its bodies (loop, if) that nothing can run, in order."""
    found = []
    for node in graph.nodes:
        if node.op is Op.OPAQUE and not runnable(node, graph.node_types(node)[0]):
            found.append(node)
        found += [n for v in node.attrs.values() if isinstance(v, Graph) for n in unrunnable(v)]
    return found


def check_runnable(graph: Graph, label: str | None = None) -> None:
    """An `ExecutionError` naming `label` (default: the graph) and every node nothing can run, with
    the ways out: an implementation, or (`optimize`) no verification."""
    nodes = unrunnable(graph)
    if not nodes:
        return
    shown = "; ".join(describe(n) for n in nodes[:5]) + ("; ..." if len(nodes) > 5 else "")
    raise ExecutionError(f"{label or f'graph {graph.name!r}'}: {shown} {CANNOT_RUN}. Without one, einsat can "
                         "neither run the program nor check an optimized one against it; "
                         "einsat.optimize(..., verify=False) optimizes it unchecked.")


def _spec_only(node) -> bool:
    rule = SPEC_ONLY.get(node.attrs["op_type"])
    if rule is None or node.attrs["domain"] not in ("", "ai.onnx"):
        return False
    return rule[0](positional_node(node.attrs["node"])[0])


@lru_cache(maxsize=512)
def _session(key: tuple):
    """(session, input names, output names) for one node signature, or None where onnxruntime
    cannot run it."""
    import onnx  # here, not at import: `import einsat` does not load onnx
    from onnx import helper

    from einsat.ir.onnx.export import EXPORT_OPSET, IR_VERSION

    proto, domain, opset, in_dtypes, out_dtypes = key
    one = onnx.NodeProto()
    one.ParseFromString(proto)
    ins = [i for i in one.input if i]
    typed = lambda name, dt: helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                                           None)
    graph = helper.make_graph([one], "opaque", [typed(n, dt) for n, dt in zip(one.input, in_dtypes) if n],
                              [typed(n, dt) for n, dt in zip([o for o in one.output if o], out_dtypes)])
    opsets = {domain: opset} if domain in ("", "ai.onnx") else {domain: opset, "": EXPORT_OPSET}
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        session = new_session(model.SerializeToString(), threads=1)
    except Exception:  # onnxruntime lacks the op (or is not installed): the reference runs it
        return None
    return session, ins, [o for o in one.output if o]
