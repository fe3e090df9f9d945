"""Opaque ONNX nodes on the NumPy backend: one cached onnxruntime session per distinct node.

A node's session is keyed by its signature: the stored ONNX node with its values renamed by
position (so: op type, domain and attributes; `ir.ops.opaque.positional_node`), its domain's
opset, and the dtypes of its inputs and outputs. The one-node model declares no shapes, so one
session serves a node at every shape. Where onnxruntime cannot build the session (it lacks the
op or this version of it, or is not installed), the node runs its registry semantics instead:
`onnx.reference` (`Opaque.numpy`). Either way its results must have the types ONNX shape
inference promised at import.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from einsat.ir.ops.opaque import check_results, positional_node
from einsat.runtime.backend_onnxruntime import new_session


def signature(node, args) -> tuple:
    """(positional node bytes, domain, opset, input dtypes, output dtypes): what a session is for."""
    a = node.attrs
    one, _, _ = positional_node(a["node"])
    return (one.SerializeToString(), a["domain"], a["opset"],
            tuple(np.dtype(x.dtype).str if x is not None else None for x in args),
            tuple(t.dtype.str for t in a["output_types"]))


def run_opaque(node, args) -> list[np.ndarray]:
    """The outputs of opaque `node` on NumPy `args` (None for an absent input)."""
    found = _session(signature(node, args))
    if found is None:
        return node.definition.numpy(args, node.attrs)
    session, names, outs = found
    feed = {name: np.asarray(x, order="C") for name, x in zip(names, (x for x in args if x is not None))}
    return check_results(session.run(outs, feed), node.attrs, "onnxruntime")


@lru_cache(maxsize=512)
def _session(key: tuple):
    """(session, input names, output names) for one node signature, or None where onnxruntime
    cannot run it."""
    import onnx  # here, not at import: `import einsat` does not load onnx
    from onnx import helper

    from einsat.ir.onnx_export import EXPORT_OPSET, IR_VERSION

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
