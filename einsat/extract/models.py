"""Cost models by name: the one table of the names `optimize(cost=...)`, `extract(cost=...)` and
`einsat optimize --cost` accept, and the default.

    cost_model("h100")       # the committed H100 profile as a MeasuredCost, else the H100 roofline
    cost_model("h100-roofline")  # the H100 datasheet roofline (fp32), profile or not
    cost_model("h100-tf32")  # the H100 roofline with TF32 tensor cores
    cost_model("cpu")        # onnxruntime on this machine's CPU: measured on demand, cached
                             # (`einsat.extract.target`; `optimize` profiles the candidates)
    cost_model(my_model)     # a CostModel passes through

`register_cost_model(name, factory)` adds a name (a profile measured elsewhere, a model of your
own). Each name builds a fresh model when asked, so a profile committed or registered later is
picked up. The roofline fitted to a committed profile for its fallback (about 0.9 s) is kept in
this process per file state (size, modification time) and across processes in the user's cache
(`profile_db.cache_dir()`, by the SHA-256 of the file): only a changed profile is fitted again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache, partial

from einsat.errors import EinsatError
from einsat.extract.cost import CostModel, RooflineCost
from einsat.extract.profile_db import ProfileDB, cache_dir, committed_profile
from einsat.extract.profiled import CalibratedRoofline, MeasuredCost, Roofline
from einsat.extract.target import cpu_model
from einsat.ir.signature import atomic_write_json

DEFAULT_COST = "h100"


def gpu_model(kind: str) -> CostModel:
    """The committed profile of GPU `kind` (einsat/gpu/profiles/<kind>.json) as a MeasuredCost,
    or the datasheet roofline of `kind` while none is committed."""
    path = committed_profile(kind)
    if path:
        st = os.stat(path)
        return MeasuredCost(ProfileDB.load(path), fallback=_calibrated(path, st.st_size, st.st_mtime_ns))
    return RooflineCost(kind)


@lru_cache(maxsize=8)
def _calibrated(path: str, size: int, mtime_ns: int) -> CalibratedRoofline:
    """The roofline fitted to the profile at `path` as it is at (`size`, `mtime_ns`): from the
    user's cache when a process fitted these very bytes before."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    cached = os.path.join(cache_dir(), f"calibration-{digest}.json")
    try:
        with open(cached) as f:
            data = json.load(f)
        return CalibratedRoofline({k: Roofline(*v) for k, v in data["families"].items()}, data["view_us"],
                                  data["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not fitted yet here, or unreadable: fit again
    db = ProfileDB.load(path)
    fitted = CalibratedRoofline.fit(db)
    try:
        atomic_write_json(cached, {"profile": path, "families": {k: [r.launch_us, r.flops_per_us, r.bytes_per_us]
                                                                 for k, r in fitted.families.items()},
                                   "view_us": fitted.view_us, "kind": db.device.get("kind", "gpu")})
    except OSError:
        pass  # a read-only cache: the next process fits again
    return fitted


COST_MODELS: dict[str, Callable[[], CostModel]] = {
    "h100": partial(gpu_model, "h100"),
    "h200": partial(gpu_model, "h200"),
    "h100-roofline": partial(RooflineCost, "h100"),
    "h200-roofline": partial(RooflineCost, "h200"),
    "h100-tf32": partial(RooflineCost, "h100", tf32=True),
    "h200-tf32": partial(RooflineCost, "h200", tf32=True),
    "cpu": cpu_model,
}


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
