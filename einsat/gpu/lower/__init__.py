"""Lowering: each registry op as device work (views, generated kernels, cuBLAS, cuDNN).

One module per op family registers its implementations (`common.implements`). An
implementation may return views of its inputs (layout ops), and allocates everything else with
`dev.empty`, so that a `CompiledProgram` can trace and replay its memory. Ops with no
implementation here run on the host (`HOST_OPS` says which are meant to: opaque ONNX nodes).
Loop and if nodes never come here: the interpreter loop runs their bodies, lowering each body
node.
"""

from __future__ import annotations

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import UnsupportedDtype, is_half_dtype
from einsat.gpu.lower import attention, banded, conv, elementwise, eop, fused, layout, linear, reduce, views  # noqa: F401  (fill IMPLS)
from einsat.gpu.lower.common import GEMM_LOWERED, HOST_OPS, IMPLS
from einsat.runtime.backend_numpy import BACKEND as NUMPY

__all__ = ["GEMM_LOWERED", "HOST_OPS", "IMPLS", "implemented", "lower", "run_node"]


def lower(dev, node, args, out_types) -> list:
    """Run `node` on `dev`; KeyError if the op has no device implementation."""
    return IMPLS[node.op.value](dev, node, args, out_types)


def run_node(dev, node, args, out_types, host_fallbacks: dict | None = None) -> list:
    """Lower one node on `dev`, or run it on the host on the NumPy backend when no device
    lowering takes it (the op has none, or raised NotImplementedError for this case). On the
    host, half operands compute in fp32 and the results round to their dtypes, as the NumPy
    reference does. A dtype the generated kernels have no type for is an error naming the op,
    the node and the dtypes."""
    name = node.op.value
    if name in IMPLS:
        try:
            return IMPLS[name](dev, node, args, out_types)
        except NotImplementedError:
            pass
        except UnsupportedDtype as e:
            dtypes = sorted({np.dtype(a.dtype).name for a in args if a is not None} | {t.dtype.name for t in out_types})
            raise ExecutionError(f"op {name!r} (node {node.name!r}) cannot run on the GPU in "
                                 f"{', '.join(dtypes)}: {e}") from e
    if host_fallbacks is not None:
        host_fallbacks[name] = host_fallbacks.get(name, 0) + 1
    host_args = [_widened(dev.download(a)) if a is not None else None for a in args]
    outs = NUMPY.run_node(node, host_args, None)
    return [dev.upload(np.asarray(o, dtype=t.dtype)) for o, t in zip(outs, out_types)]


def _widened(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if is_half_dtype(a.dtype) else a


def implemented() -> frozenset[str]:
    return frozenset(IMPLS)

