"""Cost models by name: the one table of the names `optimize(cost=...)`, `extract(cost=...)` and
`einsat optimize --cost` accept, and the default.

    cost_model("h100")       # the committed H100 profile as a MeasuredCost, else the H100 roofline
    cost_model("h100-roofline")  # the H100 datasheet roofline (fp32), profile or not
    cost_model("h100-tf32")  # the H100 roofline with TF32 tensor cores
    cost_model("cpu")        # onnxruntime on this machine's CPU: measured on demand, cached
                             # (`einsat.cost.target`; `optimize` profiles the candidates)
    cost_model(my_model)     # a CostModel passes through

`register_cost_model(name, factory)` adds a name (a profile measured elsewhere, a model of your
own). Each name builds a fresh model when asked, so a profile committed or registered later is
picked up. A committed profile carries the roofline fitted to it for its fallback
(`profiled.calibrated_fallback`, written by scripts/gpu_report.py): it is rebuilt, not fitted again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from einsat.cost.model import CostModel, RooflineCost
from einsat.cost.profile_db import ProfileDB, committed_profile
from einsat.cost.profiled import MeasuredCost, calibrated_fallback
from einsat.cost.target import cpu_model
from einsat.errors import EinsatError

DEFAULT_COST = "h100"
GPU_KINDS = ("h100", "h200")  # the GPUs the names below stand for: "<kind>", "<kind>-roofline", "<kind>-tf32"


def gpu_model(kind: str) -> CostModel:
    """The committed profile of GPU `kind` (einsat/gpu/profiles/<kind>.json) as a MeasuredCost,
    or the datasheet roofline of `kind` while none is committed."""
    path = committed_profile(kind)
    if path:
        db = ProfileDB.load(path)  # `mode` warm_us: what MeasuredCost reads
        return MeasuredCost(db, fallback=calibrated_fallback(db, kind))
    return RooflineCost(kind)


COST_MODELS: dict[str, Callable[[], CostModel]] = {
    "h100": partial(gpu_model, "h100"),
    "h200": partial(gpu_model, "h200"),
    "h100-roofline": partial(RooflineCost, "h100"),
    "h200-roofline": partial(RooflineCost, "h200"),
    "h100-tf32": partial(RooflineCost, "h100", tf32=True),
    "h200-tf32": partial(RooflineCost, "h200", tf32=True),
    "cpu": cpu_model,
}


def gpu_kind(name: str) -> str | None:
    """The GPU a cost model's name stands for ("h100-tf32" -> "h100"), None for another target."""
    kind = name.removesuffix("-roofline").removesuffix("-tf32")
    return kind if kind in GPU_KINDS else None


def register_cost_model(name: str, factory: Callable[[], CostModel]) -> None:
    """Make `cost_model(name)` (and `optimize(cost=name)`) build models with `factory`."""
    COST_MODELS[name] = factory


def cost_model(spec: str | CostModel = DEFAULT_COST) -> CostModel:
    """A cost model from its name (see `COST_MODELS`) or the model itself."""
    if isinstance(spec, CostModel):
        return spec
    if spec not in COST_MODELS:
        raise EinsatError(f"unknown cost model {spec!r}; choose one of {sorted(COST_MODELS)} "
                          "or pass a CostModel")
    return COST_MODELS[spec]()
