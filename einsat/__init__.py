"""einsat: a tensor-program superoptimizer on equality saturation.

    import einsat
    g = einsat.load_onnx("model.onnx")
    outs = einsat.run(g, {"x": x})
"""

# first: what the top level registers with the packages below it, by name (see each module)
from einsat import backends, display  # noqa: F401  (the cupy backend; einsat.viz's pictures)
from einsat.errors import EinsatError
from einsat.ir import Graph, GraphBuilder, Node, Op, TensorType
from einsat.optimize import Load, Measure, Precision, Result, optimize  # binds `einsat.optimize` to the function
from einsat.runtime import run

__version__ = "0.1.0"


def functionalize(fn, example_inputs, **kwargs) -> Graph:
    """The pure `Graph` of an imperative NumPy-style function (views, in-place updates, loops):
    TensorSSA's functionalization, see `einsat.frontend`."""
    from einsat.frontend import functionalize as _functionalize
    return _functionalize(fn, example_inputs, **kwargs)


def load_onnx(path_or_model, **kwargs) -> Graph:
    """Import an ONNX model (a path, bytes or a ModelProto) as an `einsat.Graph`."""
    from einsat.ir.onnx.io import load_onnx as _load
    return _load(path_or_model, **kwargs)


def register_onnx_op(op_class) -> None:
    """Give einsat an implementation of an ONNX op that neither onnxruntime nor onnx.reference
    has (a custom domain's): an `onnx.reference.op_run.OpRun` subclass named as the op type, with
    `op_domain` its domain (`einsat.ir.ops.opaque.register_onnx_op`)."""
    from einsat.ir.ops.opaque import register_onnx_op as _register
    _register(op_class)


def save_onnx(graph: Graph, path, **kwargs) -> None:
    """Write `graph` as an ONNX model; nothing is left at `path` if it fails."""
    from einsat.ir.onnx.io import save_onnx as _save
    _save(graph, path, **kwargs)


def __getattr__(name):
    """`einsat.Limits` (`einsat.egraph.Limits`, `optimize(limits=...)`), imported when asked: the
    e-graph's package loads egglog, which `import einsat` does not."""
    if name == "Limits":
        from einsat.egraph.session import Limits
        return Limits
    raise AttributeError(f"module 'einsat' has no attribute {name!r}")


__all__ = ["EinsatError", "Graph", "GraphBuilder", "Limits", "Load", "Measure", "Node", "Op", "Precision", "Result",
           "TensorType", "functionalize", "load_onnx", "optimize", "register_onnx_op", "run", "save_onnx"]
