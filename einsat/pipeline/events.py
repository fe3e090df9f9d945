"""What a run tells its `progress` callback: one `ProgressEvent` per saturation step and phase
boundary (`einsat.progress.ProgressDisplay` shows them; `einsat.progress` re-exports the class)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    """One step of an optimization. `phase`: load, saturate, profile, extract, verify, measure, done."""

    phase: str
    message: str = ""
    step: int | None = None
    nodes: int | None = None
    classes: int | None = None
    elapsed: float | None = None

    def __str__(self) -> str:
        parts = [f"{self.phase:<9}"]
        if self.step is not None:
            parts.append(f"step {self.step:>3}")
        if self.nodes is not None:
            parts.append(f"{self.nodes:>8,} e-nodes")
        if self.classes is not None:
            parts.append(f"{self.classes:>7,} e-classes")
        if self.elapsed is not None:
            parts.append(f"{self.elapsed:6.1f} s")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)
