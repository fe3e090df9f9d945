"""Every generated kernel compiles through CuPy's own NVRTC path for sm_90 (H100/H200), with
the options einsat gives RawKernel and those CuPy adds (tests.gpu.cupy_jit), on a machine
without a GPU. ptxas must report no spills, and each kernel's registers and static shared
memory must fit its launch (a kernel over the limits fails to launch on the device).
Register figures go to build/gpu-static/nvrtc.md."""

from __future__ import annotations

import os
from collections import defaultdict

from einsat.gpu.device import nvrtc_options
from tests.gpu.cupy_jit import compile_like_rawkernel
from tests.gpu.test_codegen_nvcc import generated_kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "build", "gpu-static", "nvrtc.md")
REGISTERS_PER_BLOCK = 65536   # sm_90: 64K 32-bit registers per block (and per SM)
STATIC_SHARED = 48 * 1024     # static __shared__ per block without opting in


def test_every_generated_kernel_compiles_through_cupy_for_sm90(cupy_module, monkeypatch):
    kernels = generated_kernels(monkeypatch)
    figures = defaultdict(list)
    options = None
    for k in kernels.values():
        c = compile_like_rawkernel(cupy_module, k.source, k.name, nvrtc_options(k))
        options = c.options
        assert "-arch=sm_90" in c.options and c.cubin[:4] == b"\x7fELF", (k.name, c.options)
        assert c.spill_bytes == 0, f"{k.name} spills {c.spill_bytes} bytes:\n{c.log}"
        assert 0 < c.registers and c.registers * k.block <= REGISTERS_PER_BLOCK, (k.name, c.registers, k.block)
        assert c.shared_bytes <= STATIC_SHARED, (k.name, c.shared_bytes)
        figures[k.family].append((c.registers, c.shared_bytes))
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        f.write(f"# Generated kernels through CuPy {cupy_module.__version__}'s NVRTC path, sm_90\n\n"
                f"{len(kernels)} kernels, no spills. NVRTC options (CuPy's included): "
                f"`{' '.join(o for o in options if not o.startswith('-I'))}`\n\n"
                "| family | kernels | registers (min-max) | static smem bytes (max) |\n|---|---|---|---|\n")
        for fam, rows in sorted(figures.items()):
            regs = [r for r, _ in rows]
            f.write(f"| {fam} | {len(rows)} | {min(regs)}-{max(regs)} | {max(s for _, s in rows)} |\n")
