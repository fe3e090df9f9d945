"""scripts/blas_kernel.py: which OpenBLAS kernel family `make test-blas` reruns the saved-result
tests under (#38). The choice is a table of the default family and the CPU's flags; it must be
another family than the default and one the CPU can run (a newer one stops on an illegal
instruction), and never Prescott where anything else will do."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "blas_kernel.py"
spec = importlib.util.spec_from_file_location("einsat_blas_kernel_script", SCRIPT)
blas_kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(blas_kernel)

AVX512 = {"sse4_2", "avx", "avx2", "fma", "avx512f"}
AVX2 = {"sse4_2", "avx", "avx2", "fma"}
AVX = {"sse4_2", "avx"}
SSE4 = {"sse4_2"}


@pytest.mark.parametrize("default, flags, other", [
    ("SkylakeX", AVX512, "Sandybridge"),    # Intel with AVX-512 (the Xeon), AMD Zen 4 (EPYC here)
    ("Haswell", AVX2, "Sandybridge"),       # FMA kernels -> the one without FMA
    ("Zen", AVX2, "Sandybridge"),
    ("Cooperlake", AVX512, "Sandybridge"),
    ("Sandybridge", AVX, "Nehalem"),        # AVX without AVX2: only older ones run
    ("Sandybridge", AVX2, "Nehalem"),       # OpenBLAS chose Sandybridge: we do not pick newer than it does
    ("Prescott", AVX512, "Haswell"),        # a CPU OpenBLAS does not know falls back to Prescott
    ("Prescott", AVX, "Sandybridge"),
    ("Prescott", SSE4, "Nehalem"),
    ("Nehalem", SSE4, "Prescott"),          # nothing else this CPU can run
    ("Prescott", set(), "Prescott"),
], ids=lambda v: "-".join(sorted(v)) if isinstance(v, set) else v)
def test_x86_the_other_family_is_one_the_cpu_runs(default, flags, other):
    assert blas_kernel.other_family(default, "x86_64", flags) == other


NEEDS = {"Haswell": {"avx2", "fma"}, "Zen": {"avx2", "fma"}, "SkylakeX": {"avx512f"}, "Sandybridge": {"avx"},
         "Nehalem": {"sse4_2"}, "Prescott": set(), "Katmai": set(), "Atom": set()}


def test_x86_never_the_default_and_always_runnable():
    """Every default OpenBLAS may pick on a CPU with these flags gets another family that CPU runs."""
    for default, needs in NEEDS.items():
        for flags in (AVX512, AVX2, AVX, SSE4):
            if needs <= flags:  # OpenBLAS can pick `default` on this CPU
                chosen = blas_kernel.other_family(default, "x86_64", flags)
                assert chosen != default and NEEDS[chosen] <= flags, (default, sorted(flags), chosen)


def test_arm_the_generic_kernels_or_cortex_a57():
    assert blas_kernel.other_family("NEOVERSEN1", "aarch64", set()) == "ARMV8"
    assert blas_kernel.other_family("armv8", "arm64", set()) == "CORTEXA57"


def test_an_unknown_machine_is_a_clear_error():
    with pytest.raises(blas_kernel.NoKernelChoice, match="riscv64"):
        blas_kernel.other_family("RISCV64_GENERIC", "riscv64", set())


def test_a_set_coretype_is_refused(monkeypatch):
    """The default must be known: with OPENBLAS_CORETYPE already set it is not."""
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    with pytest.raises(blas_kernel.NoKernelChoice, match="unset it"):
        blas_kernel.choose()
