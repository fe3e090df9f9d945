"""The NumPy backend, the executable specification: every op runs its registry reference
semantics (`OpDef.numpy`), except opaque ONNX nodes, which onnxruntime runs (`onnx_nodes`).

Half precision (float16, ml_dtypes' bfloat16) is storage, not arithmetic: an op with half
operands computes in fp32 on them (widening is exact) and rounds each result to its declared
dtype once (ml_dtypes' and NumPy's round to nearest even). That is what a GPU kernel on
__half / __nv_bfloat16 storage with float arithmetic computes, and what cuBLAS' GemmEx with
COMPUTE_32F and cuDNN compute for products and convolutions (fp32 accumulation); it also
runs every registry op in bf16, whose NumPy dtype many of NumPy's functions do not know.
Precision is lost where a value is stored in half, so a program keeps a statistic in fp32 by
storing it in fp32 (`einsat.ir.precision`)."""

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
        definition = node.definition
        if any(_half(a) for a in args):
            outs = definition.numpy([_widened(a) for a in args], node.attrs)
            return [o.astype(graph.types[name].dtype) for o, name in zip(outs, node.outputs)]
        return definition.numpy(args, node.attrs)


def _half(a) -> bool:
    return getattr(a, "dtype", None) is not None and (a.dtype == np.float16 or a.dtype.name == "bfloat16")


def _widened(a):
    """A half operand in fp32 (exact: every half value is an fp32 value)."""
    return a.astype(np.float32) if _half(a) else a


BACKEND = NumpyBackend()
