"""BLAS at one thread while PET admits mutants (`one_thread`).

The admission proof (`einsat.verify.corrector.find_differences`) multiplies finite-field values
as exact float64 BLAS products (`verify.field.matmul_mod`): many small products, each too small
for BLAS threads to pay, and on a machine whose cores are busy OpenBLAS's threads wait for each
other at every call. Measured on CSRNet's two admissions (a 512-channel dilated 3x3 conv over
14x14, `benchmarks/results/mutate.md`) at a load average of 14 on 2 cores: 8.6-14.2 s each with
OpenBLAS at 2 threads, 1.5-2.1 s at 1 thread; the generator's first round cost the optimize 3.5x
its time without it. The thread count is the process's (OpenBLAS has no per-call setting): the
first of nested or concurrent `one_thread` blocks sets it to 1, the last one out restores it.

Where no OpenBLAS is found (another BLAS, another platform) `one_thread` does nothing.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from contextlib import contextmanager

import numpy as np

_SET = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")
_GET = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")
_lock = threading.Lock()
_depth = 0
_saved: int | None = None
_api: tuple | None | bool = False  # False: not looked up yet; None: no OpenBLAS


def _openblas():
    """(set, get) of the OpenBLAS that NumPy loaded, or None."""
    global _api
    if _api is not False:
        return _api
    _api = None
    root = os.path.dirname(os.path.dirname(np.__file__))
    for path in sorted(glob.glob(os.path.join(root, "numpy.libs", "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for s, g in zip(_SET, _GET):
            if hasattr(lib, s) and hasattr(lib, g):
                set_, get = getattr(lib, s), getattr(lib, g)
                set_.argtypes, set_.restype, get.restype = [ctypes.c_int], None, ctypes.c_int
                _api = (set_, get)
                return _api
    return _api


@contextmanager
def one_thread():
    """OpenBLAS at one thread inside the block (see the module doc)."""
    global _depth, _saved
    api = _openblas()
    if api is None:
        yield
        return
    set_, get = api
    with _lock:
        if _depth == 0:
            _saved = get()
            set_(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                set_(_saved)
