"""NumPy's BLAS kernel on this machine, and another one to run the tests under (`make test-blas`, #38).

NumPy's wheels carry OpenBLAS built with DYNAMIC_ARCH: it picks its kernels by CPU at load time
(SkylakeX on a CPU with AVX-512, Haswell or Zen on one with AVX2 and FMA, Sandybridge with AVX
alone, NEOVERSEN1, ARMV8... on ARM), and each kernel sums in its own order, with or without fused
multiply-adds, so the last bits of a product differ from one machine to another. A test that
compares with a saved program or figure must hold under all of them; `make test-blas` reruns
those tests (pytest's `saved_results` marker) with `OPENBLAS_CORETYPE` set to another family than
the one `make test` ran under, so a dependence on the kernel fails here before it fails for a user.
That one is the family OpenBLAS picks for this CPU or, where the environment already sets
`OPENBLAS_CORETYPE` (as a CI machine may, to stand in for another CPU), the family it set: the
other family is chosen against the kernel NumPy runs in this process, and differs from both.

    python scripts/blas_kernel.py            # what NumPy's BLAS is and which kernel it runs
    python scripts/blas_kernel.py --other    # prints another kernel family this CPU can run

The other family: Sandybridge (AVX, no FMA) where the default has FMA (Haswell, Zen, SkylakeX,
Cooperlake, SapphireRapids); where it has not, Haswell if the CPU has AVX2 and FMA (OpenBLAS
falls back to Prescott on a CPU it does not know), else Sandybridge if it has AVX, else
Nehalem; on ARM, ARMV8 (the
generic kernels), or CORTEXA57 where ARMV8 is the default. Only a family the CPU can run (an
older one, or one whose instructions /proc/cpuinfo lists): a newer one would stop on an illegal
instruction. Never Prescott where anything else will do: scipy-openblas 0.3.34's Prescott sgemm
crashes the process at random on an AVX-512 CPU (a 9x288 by 288x128 float32 product, in plain
NumPy, segfaults in about 4 of 10 processes of 1000 products). `--other` checks in a fresh
process that OpenBLAS took the family (its core name differs from the default's) and fails,
saying why, where NumPy's BLAS is not an OpenBLAS with DYNAMIC_ARCH.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import platform
import subprocess
import sys

# OpenBLAS's x86-64 families whose kernels use fused multiply-adds (Zen runs Haswell's kernels)
FMA_FAMILIES = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"}
_CORENAME_SYMBOLS = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                     "openblas_get_corename")


class NoKernelChoice(RuntimeError):
    """NumPy's BLAS cannot be switched to another kernel family here."""


def _openblas_config() -> dict:
    """numpy.show_config's BLAS section ({} where NumPy does not say)."""
    import numpy as np
    try:
        return (np.show_config(mode="dicts") or {}).get("Build Dependencies", {}).get("blas", {}) or {}
    except (TypeError, ValueError, AttributeError):  # an old NumPy without mode="dicts"
        return {}


def _library_paths() -> list[str]:
    """The OpenBLAS libraries NumPy's wheel carries (numpy.libs on Linux, numpy/.dylibs on macOS)."""
    import numpy as np
    here = os.path.dirname(os.path.abspath(np.__file__))
    found = []
    for folder in (os.path.join(here, "..", "numpy.libs"), os.path.join(here, ".dylibs"), here):
        found += sorted(glob.glob(os.path.join(folder, "*openblas*")))
    return [os.path.abspath(p) for p in found]


def corename() -> str | None:
    """The kernel family NumPy's OpenBLAS runs in this process, as OpenBLAS names it (None: unknown)."""
    try:
        from threadpoolctl import threadpool_info
        for lib in threadpool_info():
            if lib.get("internal_api") == "openblas" and "numpy" in (lib.get("filepath") or ""):
                return lib.get("architecture")
    except ImportError:
        pass
    import numpy as np
    np.ones((2, 2)) @ np.ones((2, 2))  # OpenBLAS is loaded with numpy's extension; make sure
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _CORENAME_SYMBOLS:
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


def describe() -> dict:
    config = _openblas_config()
    return {"blas": config.get("name"), "version": config.get("version"),
            "configuration": " ".join((config.get("openblas configuration") or "").split()),
            "corename": corename(), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "machine": platform.machine()}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def other_family(default: str, machine: str, flags: set[str], avoid: tuple[str, ...] = ()) -> str:
    """Another kernel family than `default` (and than those in `avoid`) that a CPU with `flags`
    runs (see the module's text)."""
    d = default.lower()
    taken = {d} | {a.lower() for a in avoid}
    if machine.lower() in {"x86_64", "amd64"}:
        options = []
        if d in FMA_FAMILIES:
            options.append("Sandybridge")  # every CPU that runs FMA kernels has AVX
        if d not in FMA_FAMILIES and d != "sandybridge" and {"avx2", "fma"} <= flags:
            options.append("Haswell")      # a CPU OpenBLAS does not know falls back to Prescott
        if d != "sandybridge" and "avx" in flags:
            options.append("Sandybridge")
        if d == "sandybridge" or "sse4_2" in flags:
            options.append("Nehalem")
        options.append("Prescott")
    elif machine.lower() in {"aarch64", "arm64"}:
        options = ["ARMV8", "CORTEXA57"]
    else:
        raise NoKernelChoice(f"no other OpenBLAS kernel family known for a {machine} CPU")
    return next((o for o in options if o.lower() not in taken), options[-1])


def _corename_under(family: str | None) -> str | None:
    """The core name NumPy's OpenBLAS reports in a fresh process under OPENBLAS_CORETYPE=family
    (None: without the variable, the CPU's own family)."""
    code = "import json, sys; sys.path.insert(0, %r); import blas_kernel; print(json.dumps(blas_kernel.corename()))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if family is not None:
        env["OPENBLAS_CORETYPE"] = family
    out = subprocess.run([sys.executable, "-c", code % os.path.dirname(os.path.abspath(__file__))],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise NoKernelChoice(f"NumPy under OPENBLAS_CORETYPE={family or '(unset)'} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def choose() -> tuple[str, str, str]:
    """(the family NumPy runs in this process, another one, the core name OpenBLAS reports under
    it), checked in a fresh process; NoKernelChoice says why there is none. Where the environment
    sets OPENBLAS_CORETYPE, the family in use is the one it set (what `make test` ran under), and
    the other one must differ from the CPU's own too."""
    info = describe()
    if "openblas" not in (info["blas"] or "").lower() and info["corename"] is None:
        raise NoKernelChoice(f"NumPy's BLAS is {info['blas'] or 'unknown'}, not OpenBLAS: its kernel cannot be "
                             "switched with OPENBLAS_CORETYPE")
    if info["configuration"] and "DYNAMIC_ARCH" not in info["configuration"]:
        raise NoKernelChoice(f"NumPy's OpenBLAS is built for one CPU ({info['configuration']}), without "
                             "DYNAMIC_ARCH: OPENBLAS_CORETYPE cannot switch its kernel")
    if not info["corename"]:
        raise NoKernelChoice("cannot read which kernel NumPy's OpenBLAS runs (no openblas_get_corename in "
                             f"{_library_paths() or 'numpy.libs'}, no threadpoolctl)")
    # where the environment sets the family, the CPU's own one, read in a process without the variable
    own = _corename_under(None) if info["OPENBLAS_CORETYPE"] else info["corename"]
    family = other_family(info["corename"], info["machine"], _cpu_flags(), avoid=(own,) if own else ())
    in_use = {info["corename"].lower(), (own or info["corename"]).lower()}
    taken = _corename_under(family)
    if not taken or taken.lower() in in_use:
        raise NoKernelChoice(f"OPENBLAS_CORETYPE={family} left NumPy's OpenBLAS on {taken or 'an unknown kernel'} "
                             f"(in use here: {info['corename']})")
    return info["corename"], family, taken


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--other", action="store_true",
                   help="print another kernel family than the default (on stdout; what it chose on stderr)")
    args = p.parse_args(argv)
    if not args.other:
        print(json.dumps(describe(), indent=1))
        return 0
    try:
        default, family, taken = choose()
    except NoKernelChoice as e:
        print(f"blas_kernel: {e}", file=sys.stderr)
        return 2
    where = (f"under OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} from the environment"
             if os.environ.get("OPENBLAS_CORETYPE") else "here")
    print(f"NumPy's OpenBLAS runs {default} kernels {where}; the tests run again under OPENBLAS_CORETYPE={family} "
          f"(OpenBLAS reports {taken})", file=sys.stderr)
    print(family)
    return 0


if __name__ == "__main__":
    sys.exit(main())
