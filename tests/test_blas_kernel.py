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


def _machine(monkeypatch, in_use, set_to, own, flags, takes=lambda family: family):
    """choose() on a scripted machine: NumPy runs `in_use` in this process, the environment sets
    OPENBLAS_CORETYPE=`set_to` (None: unset), the CPU's own family is `own`, and a fresh process
    under OPENBLAS_CORETYPE=f reports takes(f)."""
    if set_to is None:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_CORETYPE", set_to)
    monkeypatch.setattr(blas_kernel, "describe", lambda: {
        "blas": "scipy-openblas", "version": "0.3.34", "configuration": "OpenBLAS 0.3.34 DYNAMIC_ARCH",
        "corename": in_use, "OPENBLAS_CORETYPE": set_to, "machine": "x86_64"})
    monkeypatch.setattr(blas_kernel, "_cpu_flags", lambda: flags)
    asked = []

    def corename_under(family):
        asked.append(family)
        return own if family is None else takes(family)
    monkeypatch.setattr(blas_kernel, "_corename_under", corename_under)
    return asked


def test_the_cpus_own_family_when_nothing_is_set(monkeypatch):
    asked = _machine(monkeypatch, "SkylakeX", None, "SkylakeX", AVX512)
    assert blas_kernel.choose() == ("SkylakeX", "Sandybridge", "Sandybridge")
    assert asked == ["Sandybridge"]


def test_a_coretype_set_by_the_environment_is_the_family_the_suite_ran_under(monkeypatch):
    """A CI machine that sets OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU ran `make test` under
    Haswell's kernels: the rerun takes a family other than Haswell and other than SkylakeX."""
    asked = _machine(monkeypatch, "Haswell", "Haswell", "SkylakeX", AVX512)
    assert blas_kernel.choose() == ("Haswell", "Sandybridge", "Sandybridge")
    assert asked == [None, "Sandybridge"]


def test_the_other_family_is_not_the_cpus_own_either(monkeypatch):
    """Sandybridge set on a CPU whose own family is Nehalem: Nehalem (Sandybridge's other) is the
    kernel a plain run gets, so the rerun takes the one after it."""
    _machine(monkeypatch, "Sandybridge", "Sandybridge", "Nehalem", AVX)
    assert blas_kernel.choose() == ("Sandybridge", "Prescott", "Prescott")


def test_a_family_openblas_does_not_take_is_a_clear_error(monkeypatch):
    _machine(monkeypatch, "Haswell", "Haswell", "SkylakeX", AVX512, takes=lambda family: "SkylakeX")
    with pytest.raises(blas_kernel.NoKernelChoice, match="left NumPy's OpenBLAS on SkylakeX"):
        blas_kernel.choose()
