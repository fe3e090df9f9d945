"""What every benchmark's results file records about its run: the commit, the machine, the versions
and the date (`run_meta`), so that a figure quoted from it can be traced to the code that made it."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("numpy", "scipy", "onnx", "onnxruntime", "egglog", "highspy")


def _git(where: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=where).stdout.strip()
    except OSError:
        return ""


def short_commit(where: Path) -> str:
    """The short hash of HEAD in the checkout holding `where` ("?" when git cannot say)."""
    return _git(where, "rev-parse", "--short", "HEAD") or "?"


def dirty(where: Path = ROOT) -> bool:
    """Whether the checkout's einsat/ or benchmarks/ differ from HEAD (a run of uncommitted code;
    results written meanwhile under benchmarks/results are not code)."""
    return bool(_git(where, "status", "--porcelain", "--untracked-files=no", "--", "einsat", "benchmarks",
                     ":(exclude)benchmarks/results"))


def versions() -> dict[str, str]:
    """Python's and the packages' versions (those installed): the imported module's own where it
    has one (what this process runs), else the installed metadata."""
    import importlib

    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = str(importlib.import_module(p).__version__)
        except (ImportError, AttributeError):
            try:
                out[p] = metadata.version(p)
            except metadata.PackageNotFoundError:
                pass
    return out


def run_meta(where: Path = ROOT, **extra) -> dict:
    """A benchmark run's `meta`: `extra` (its settings), the full commit and whether the tree was
    dirty, the machine (processor, CPUs, system, load average now), the versions and the date (UTC)."""
    from einsat.cost.profile_db import cpu_name

    return {**extra, "commit": _git(where, "rev-parse", "HEAD") or "?", "dirty": dirty(where),
            "machine": f"{cpu_name()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
            "load_average": round(os.getloadavg()[0], 2), "versions": versions(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def modeled_meta(commit: str, **extra) -> dict:
    """The `meta` of a modeled benchmark's JSON: `run_meta` with `commit` (the one the rows were
    measured at), marked modeled."""
    return {**run_meta(**extra), "commit": commit, "modeled": True}


def meta_line(meta: dict) -> str:
    """The results file's line naming its run: commit (and whether the tree was dirty), date,
    machine, load average, versions."""
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    return (f"Commit `{meta['commit']}`{' (with uncommitted changes)' if meta.get('dirty') else ''}, "
            f"{meta['date']}; {meta['machine']}, load average {meta['load_average']} at the start; {versions}.")
