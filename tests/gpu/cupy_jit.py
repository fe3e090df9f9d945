"""Compiling a kernel through CuPy's own NVRTC path on a machine without a GPU.

`cp.RawKernel(source, name, options).compile()` goes `compile_with_cache` -> CuPy's option
assembly (its include folders, the CUDA headers it finds, `-ftz=true`, `-arch=sm_XX`,
`--device-as-default-execution-space`) -> NVRTC -> `Module.load` of the cubin. Two steps of it
need a device: reading the device's architecture, and loading the cubin. `compile_like_rawkernel`
runs the same path with those two replaced (the architecture given, the cubin kept instead of
loaded) and the disk cache bypassed; everything else is CuPy's code as it runs on a GPU.

CuPy offers no public way to compile for an architecture without a device, so this reaches
into `cupy.cuda.compiler` (its private `_get_arch_for_options_for_nvrtc`, `_NVRTCProgram`,
`_kernel_cache_backend`), here and nowhere else.
"""

from __future__ import annotations

import io
import re
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Compiled:
    cubin: bytes
    options: tuple[str, ...]   # what NVRTC was given, CuPy's additions included
    log: str                   # NVRTC's log, ptxas's report included
    registers: int
    spill_bytes: int
    shared_bytes: int


@contextmanager
def _without_device(cupy):
    from cupy.cuda import compiler, function

    class KeptModule(function.Module):
        def load(self, cubin):
            self.cubin = cubin

    class NoCache:
        def load(self, name):
            return None

        def save(self, *args):
            pass

    seen: list[tuple[str, ...]] = []

    class Recording(compiler._NVRTCProgram):
        def compile(self, options=(), log_stream=None):
            seen.append(tuple(options))
            return super().compile(options, log_stream)

    saved = {k: getattr(compiler, k) for k in ("function", "_get_arch_for_options_for_nvrtc", "_NVRTCProgram",
                                                 "_kernel_cache_backend")}
    compiler.function = type("function", (), {"Module": KeptModule})
    compiler._get_arch_for_options_for_nvrtc = saved["_get_arch_for_options_for_nvrtc"].__wrapped__  # no device
    compiler._NVRTCProgram = Recording
    compiler._kernel_cache_backend = NoCache()
    try:
        yield seen
    finally:
        for k, v in saved.items():
            setattr(compiler, k, v)


def compile_like_rawkernel(cupy, source: str, name: str, options: tuple[str, ...], arch: str = "90") -> Compiled:
    """Compile `source` as `cupy.RawKernel(source, name, options)` would on an sm_`arch` device,
    with ptxas's resource report (`-Xptxas=-v`) in the log."""
    from cupy._core import core
    log = io.StringIO()
    with _without_device(cupy) as seen:
        # the arguments RawKernel's _get_raw_module passes for a source kernel
        mod = core.compile_with_cache(source, tuple(options) + ("-Xptxas=-v",), arch=arch, prepend_cupy_headers=False,
                                      backend="nvrtc", log_stream=log)
    text = log.getvalue()
    entry = re.search(rf"Compiling entry function '{re.escape(name)}' for 'sm_{arch}'(.*?)(?:Compile time|\Z)", text,
                      re.S)
    if entry is None:
        raise AssertionError(f"ptxas compiled no entry function {name!r} for sm_{arch}:\n{text[-2000:]}")
    report = entry.group(1)
    regs = re.search(r"Used (\d+) registers", report)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
    smem = re.search(r"(\d+) bytes smem", report)
    return Compiled(mod.cubin, seen[-1], text, int(regs.group(1)) if regs else 0, sum(spills),
                    int(smem.group(1)) if smem else 0)
