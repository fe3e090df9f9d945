"""Finding and loading the CUDA libraries (cuBLAS, cuDNN) that CuPy 14 does not wrap for us.

The GPU image installs CUDA 13 as pip wheels: cudart, cuBLAS(Lt) and NVRTC under
`site-packages/nvidia/cu13/lib`, cuDNN under `site-packages/nvidia/cudnn/lib`. cuDNN's
sub-libraries `dlopen` cuBLASLt and NVRTC by soname, so those are loaded first with
RTLD_GLOBAL. Search order: `cuda.pathfinder` (ships with CuPy 14), then the wheel folders,
then the system loader.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import site
import sys
from functools import lru_cache

from einsat.errors import ExecutionError

_SONAMES = {
    "cudart": ["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
    "cublasLt": ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
    "cublas": ["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
    "nvrtc": ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    "cudnn": ["libcudnn.so.9", "libcudnn.so"],
}


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def candidates(name: str) -> list[str]:
    """Absolute paths where library `name` may live, best first."""
    out = []
    for soname in _SONAMES[name]:
        for d in _site_dirs():
            out += sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", soname)))
            out += sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib64", soname)))
        for d in ("/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"):
            p = os.path.join(d, soname)
            if os.path.exists(p):
                out.append(p)
    return list(dict.fromkeys(out))


def cuda_include_dirs() -> list[str]:
    """Folders holding the CUDA headers NVRTC may need (cuda_fp16.h): $CUDA_PATH, the wheels',
    /usr/local/cuda's."""
    dirs = [os.path.join(os.environ[v], "include") for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]
    for d in _site_dirs():
        dirs += sorted(glob.glob(os.path.join(d, "nvidia", "cu*", "include")))
        dirs += sorted(glob.glob(os.path.join(d, "nvidia", "cuda_runtime", "include")))
    dirs.append("/usr/local/cuda/include")
    return [d for d in dict.fromkeys(dirs) if os.path.exists(os.path.join(d, "cuda_fp16.h"))]


def _pathfinder(name: str) -> str | None:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError:
        return None
    try:
        return load_nvidia_dynamic_lib(name).abs_path
    except Exception:  # pathfinder knows no cudnn, or the lib is absent
        return None


@lru_cache(maxsize=None)
def load(name: str) -> ctypes.CDLL:
    """dlopen library `name` (a key of `_SONAMES`) with RTLD_GLOBAL; cached."""
    if name == "cudnn":
        for dep in ("cudart", "cublasLt", "cublas", "nvrtc"):
            try:
                load(dep)
            except ExecutionError:
                pass  # cuDNN reports what it misses when it needs it
    tried = []
    paths = [p for p in [_pathfinder(name)] if p] + candidates(name) + _SONAMES[name]
    found = ctypes.util.find_library(name)
    if found:
        paths.append(found)
    for path in paths:
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ExecutionError(f"cannot load the CUDA library {name!r}; tried " + "; ".join(tried[-6:]))


def bind(lib: ctypes.CDLL, signatures: dict) -> ctypes.CDLL:
    """Set argtypes and restype of every function in `signatures` ({name: (argtypes, restype)})
    on `lib`. Without argtypes a Python int is passed as 32 bits: a pointer would be cut."""
    for fn, (args, res) in signatures.items():
        getattr(lib, fn).argtypes = args
        getattr(lib, fn).restype = res
    return lib
