"""The CuPy backend: every registry op on a CUDA device, run by the one interpreter loop.

`einsat.run(graph, inputs, backend="cupy")` loads `BACKEND` from here: `einsat.backends`
registers it with the runtime by name (the runtime never imports this package). CuPy is
imported on first use, so importing einsat never needs it. Ops are lowered by `einsat.gpu.lower` (views,
generated kernels, cuBLAS, cuDNN); an op with no device lowering (opaque ONNX nodes, or a
case a library cannot take, such as a 4-D convolution) runs on the host on the NumPy backend
and its result goes back to the device. Loop and if nodes run their bodies through the
interpreter loop, on this backend. `CompiledProgram` (einsat.gpu.program) runs the
same lowering once and replays it as a CUDA graph.
"""

from __future__ import annotations

import numpy as np

from einsat.gpu import lower
from einsat.runtime.backend import NodeBackend


class GpuBackend(NodeBackend):
    """An interpreter backend over a `Device` (CuPy by default, created lazily)."""

    def __init__(self, device=None, name: str = "cupy", tf32: bool = False):
        self._device = device
        self.name = name
        self.tf32 = tf32
        self.host_fallbacks: dict[str, int] = {}

    @property
    def device(self):
        if self._device is None:
            from einsat.gpu.device import CupyDevice
            self._device = CupyDevice(tf32=self.tf32)
        return self._device

    def from_numpy(self, array: np.ndarray):
        return self.device.upload(np.asarray(array))

    def to_numpy(self, value) -> np.ndarray:
        return self.device.download(value)

    def constant(self, array: np.ndarray):
        return self.device.constant(array)

    def run_node(self, node, args, graph) -> list:
        out_types = [graph.types[o] for o in node.outputs]
        return lower.run_node(self.device, node, args, out_types, self.host_fallbacks)


BACKEND = GpuBackend()
