"""The program representation: typed values, nodes, graphs, and the op registry."""

from einsat.ir import ops as _ops  # noqa: F401  (fills the registry)
from einsat.ir.builder import GraphBuilder, Tensor
from einsat.ir.graph import Graph, Node, format_graph
from einsat.ir.registry import REGISTRY, Attr, Op, OpDef, opdef, register
from einsat.ir.types import TensorType

__all__ = ["Attr", "Graph", "GraphBuilder", "Node", "Op", "OpDef", "REGISTRY", "Tensor",
           "TensorType", "format_graph", "opdef", "register"]
