"""The backends einsat ships outside `einsat.runtime`, registered with it by name.

The runtime registers its own (`numpy`, `onnxruntime`) and never imports a backend kept
elsewhere; this module, at the top level (which may import every package), registers the
others. `einsat/__init__.py` imports it, and Python runs that before any module of einsat, so
`einsat.run(graph, inputs, backend="cupy")` and `einsat.runtime.run(...)` find them whichever
module a program imports first.

    cupy   every op on a CUDA device (`einsat.gpu.backend_cupy`): loaded on first use, so
           importing einsat never needs CuPy; without it, the first run says to install the
           gpu extra (`pip install 'einsat[gpu]'`).

A backend of another package registers itself the same way:
`einsat.runtime.register_backend("mine", lambda: MyBackend())`.
"""

from __future__ import annotations

from einsat.errors import EinsatError
from einsat.runtime.backend import register_backend


def cupy_backend():
    """`einsat.gpu`'s CuPy backend (one object; its device is created at its first use)."""
    try:
        from einsat.gpu.backend_cupy import BACKEND
    except ImportError as e:  # an installation without einsat.gpu's dependencies
        raise EinsatError(f"the cupy backend needs einsat's gpu extra (pip install 'einsat[gpu]'): {e}") from e
    return BACKEND


register_backend("cupy", cupy_backend)
