"""The target a run optimizes for, in one line the CLI prints before its search: which machine the
cost model stands for, whether its figures are modeled or measured here, and, when the target is a
GPU this machine does not have, that the written file is meant for that GPU and not for this CPU."""

from __future__ import annotations


def target_line(cost: str, threads: int | None = None) -> str:
    from einsat.cost.models import cost_model, gpu_kind
    from einsat.gpu.device import cuda_driver_present

    if cost == "cpu":
        count = threads or 1
        return (f"target: this machine's CPU, onnxruntime at {count} intra-op thread{'s' if count > 1 else ''} "
                f"(measured here)")
    line = f"target: {cost_model(cost).label} (speed-ups modeled)"
    if gpu_kind(cost) is not None and not cuda_driver_present():
        line += ("; this machine has no NVIDIA GPU: the program is chosen for that GPU, not for this CPU "
                 "(on onnxruntime here it may run slower; --cost cpu optimizes for this machine)")
    return line
