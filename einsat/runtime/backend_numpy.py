"""The NumPy backend, the executable specification: every op runs its registry reference
semantics (`OpDef.numpy`), except opaque ONNX nodes, which onnxruntime runs (`onnx_nodes`)."""

from __future__ import annotations

import numpy as np

from einsat.ir.registry import Op
from einsat.runtime import onnx_nodes
from einsat.runtime.backend import NodeBackend


class NumpyBackend(NodeBackend):
    name = "numpy"

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_numpy(self, value) -> np.ndarray:
        return np.asarray(value)

    def run_node(self, node, args, graph) -> list[np.ndarray]:
        if node.op is Op.OPAQUE:
            return onnx_nodes.run_opaque(node, args)
        return node.definition.numpy(args, node.attrs)


BACKEND = NumpyBackend()
