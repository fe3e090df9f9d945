"""What every modeled benchmark's results file records about its run: the commit and the machine."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def short_commit(where: Path) -> str:
    """The short hash of HEAD in the checkout holding `where` ("?" when git cannot say)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=where).stdout.strip() or "?"
    except OSError:
        return "?"


def modeled_meta(commit: str, **extra) -> dict:
    """The `meta` of a modeled benchmark's JSON: `extra` (its settings), the commit, the machine."""
    return {**extra, "commit": commit, "machine": platform.node(), "python": platform.python_version(),
            "modeled": True}
