"""The profile database: measured GPU times of op signatures, as one JSON file per device.

Format (`einsat-profile/1`), times in microseconds (the unit of einsat's cost models):

    {"format": "einsat-profile/1",
     "device": {"name": "NVIDIA H100 80GB HBM3", "kind": "h100", "compute_capability": "9.0",
                "sm_count": 132, "l2_bytes": 52428800, "memory_bytes": ..., "driver": "580.159.04",
                "cuda_driver": 13000, "cuda_runtime": 13000, "cudnn": 92700, "cublas": 130100,
                "cupy": "14.2.0", "tf32": false},
     "created": "2026-11-21T20:00:00Z",
     "method": {"reps": 50, "warmup": 5, "flush_bytes": 268435456, "statistic": "median"},
     "entries": {"<signature key>": {"signature": {<einsat-signatures/1 entry>},
                                     "us": 12.3,        # cold L2 (flushed before each rep)
                                     "warm_us": 10.1,   # back-to-back replays, inputs L2-resident
                                     "p10_us": ..., "p90_us": ..., "reps": 50,
                                     "flops": ..., "bytes": ..., "kernels": 1}},
     "failures": {"<signature key>": "why it could not be measured"}}

`ProfileDB.lookup(op, attrs, ins, outs)` is the interface `einsat.extract.MeasuredCost` reads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from einsat.errors import EinsatError
from einsat.ir.signature import Signature, atomic_write_json, signature_of

FORMAT = "einsat-profile/1"
# whether the onnxruntime sessions einsat times spin-wait between kernels (onnxruntime's
# default): no (`runtime.profiler.ort_session` says why). Part of a CPU profile's machine key.
SPINNING = False
# measured on the GPU machine by einsat.gpu.profiler, committed beside it
PROFILES_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "gpu", "profiles")
MODES = ("warm_us", "us")
# the revision of the inputs the CPU profiler feeds its one-node sessions (`runtime.inputs`),
# kept in an onnxruntime profile's method as "inputs_revision" (`cost.target.TargetCost.add`):
# the failures of a profile of another revision are tried again. 2: gather_nd's index tuples and gather_elements'
# indices drawn within the axis they pick (before, GPT-2's causal-mask GatherND failed)
INPUTS_REVISION = 2


@dataclass
class ProfileDB:
    """Measured times keyed by signature key, and the device they were measured on."""

    device: dict[str, Any] = field(default_factory=dict)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    method: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    failures: dict[str, str] = field(default_factory=dict)  # signature key -> why it was not measured
    mode: str = "warm_us"  # which time `lookup` returns

    # -- reading ---------------------------------------------------------------------------
    def lookup(self, op, attrs: Mapping[str, Any], ins: Sequence, outs: Sequence = ()) -> float | None:
        """The measured time of one application in µs, or None when it was not measured."""
        try:
            sig = signature_of(op, attrs, ins)
        except EinsatError:
            return None
        if sig is None:
            return None
        e = self.entries.get(sig.key)
        if e is None:
            return None
        return float(e.get(self.mode, e["us"]))

    def signature(self, key: str) -> Signature:
        return Signature.from_json(self.entries[key]["signature"])

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    # -- writing ---------------------------------------------------------------------------
    def add(self, sig: Signature, **measured) -> None:
        if "us" not in measured:
            raise EinsatError(f"a profile entry needs 'us' (got {sorted(measured)})")
        self.entries[sig.key] = {"signature": sig.to_json(), **measured}

    def to_json(self) -> dict:
        return {"format": FORMAT, "device": self.device, "created": self.created or _now(),
                "method": self.method, "entries": dict(sorted(self.entries.items())),
                "failures": dict(sorted(self.failures.items()))}

    def save(self, path) -> None:
        atomic_write_json(path, self.to_json())

    @staticmethod
    def from_json(data: Mapping) -> "ProfileDB":
        if data.get("format") != FORMAT:
            raise EinsatError(f"not an einsat profile (format {data.get('format')!r}, expected {FORMAT!r})")
        for key, e in data["entries"].items():
            if "us" not in e or "signature" not in e:
                raise EinsatError(f"profile entry {key!r} lacks 'us' or 'signature'")
        return ProfileDB(dict(data.get("device", {})), dict(data["entries"]), dict(data.get("method", {})),
                         data.get("created", ""), dict(data.get("failures", {})))

    @staticmethod
    def load(path) -> "ProfileDB":
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise EinsatError(f"cannot read the profile {path}: {e}") from None
        try:
            return ProfileDB.from_json(data)
        except EinsatError as e:
            raise EinsatError(f"{path}: {e}") from None

    def merge(self, other: "ProfileDB") -> None:
        """Take `other`'s entries (they win); the devices must be of one kind."""
        if self.device and other.device and self.device.get("kind") != other.device.get("kind"):
            raise EinsatError(f"cannot merge profiles of {self.device.get('kind')} and {other.device.get('kind')}")
        self.device = self.device or other.device
        self.entries.update(other.entries)
        for key in other.entries:
            self.failures.pop(key, None)
        self.failures.update({k: v for k, v in other.failures.items() if k not in self.entries})


def committed_profile(kind: str) -> str | None:
    """The path of the committed profile of a device kind ("h100", "h200"), if there is one."""
    path = os.path.join(PROFILES_DIR, f"{kind}.json")
    return path if os.path.exists(path) else None


def device_kind(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; unknown names become a lower-case slug."""
    low = name.lower()
    for kind in ("h200", "h100", "a100", "l40s", "l4", "a10"):
        if kind in low:
            return kind
    return "".join(c if c.isalnum() else "-" for c in low).strip("-") or "gpu"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the profile cache: measurements taken on demand on the machine at hand ---------------------
def cache_dir() -> str:
    """Where einsat keeps the profiles it measures: `$XDG_CACHE_HOME/einsat/profiles`
    (`~/.cache/einsat/profiles` when XDG_CACHE_HOME is unset or not absolute, as the XDG
    base-directory specification says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "einsat", "profiles")


def machine_key(machine: Mapping[str, Any]) -> str:
    """A file name for the profile of `machine` (a dict naming the hardware, the backend and the
    versions): readable kind and backend, then a digest of everything, so a profile is reused
    only on the same processor with the same library versions."""
    import hashlib
    digest = hashlib.sha256(json.dumps(dict(machine), sort_keys=True, default=str).encode()).hexdigest()[:16]
    kind = "".join(c if c.isalnum() else "-" for c in str(machine.get("kind", "device")))
    backend = "".join(c if c.isalnum() else "-" for c in str(machine.get("backend", "")))
    return f"{kind}-{backend}-{digest}" if backend else f"{kind}-{digest}"


def cache_path(machine: Mapping[str, Any]) -> str:
    """The cached profile of `machine` (see `cache_dir` and `machine_key`)."""
    return os.path.join(cache_dir(), machine_key(machine) + ".json")


def cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what `platform` knows of it."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return cpu


def cpu_machine(threads: int = 1) -> dict[str, Any]:
    """What a CPU profile (onnxruntime's CPU execution provider) is valid for: the processor,
    core count, system, threads, the versions of the libraries that run the ops and the
    revision of einsat's ONNX export that makes the nodes timed."""
    import platform
    import sys
    from importlib import metadata

    from einsat.ir.onnx.export import EXPORT_REVISION

    cpu = cpu_name()
    versions = {}
    for pkg in ("onnxruntime", "onnx", "numpy"):
        # the version of the module this process runs, not the installed metadata read from disk
        # again: a package manager rewriting the environment's dist-info meanwhile made that
        # read fail now and then, and the profile's key (so its file) changed in mid-run
        # (a loaded module's: importing one by a computed name would cross the layers, tests/test_layering.py)
        loaded = getattr(sys.modules.get(pkg), "__version__", None)
        if loaded is not None:
            versions[pkg] = str(loaded)
            continue
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "absent"
    return {"kind": "cpu", "backend": "onnxruntime", "name": cpu, "cpus": os.cpu_count() or 1,
            "system": f"{platform.system()} {platform.machine()}", "threads": threads,
            "python": platform.python_version(), "format": FORMAT, "export": EXPORT_REVISION,
            "spinning": SPINNING, **versions}
