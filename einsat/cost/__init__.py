"""Cost: what a program's e-nodes cost, in microseconds, on the target einsat optimizes for.

    from einsat.cost import cost_model
    model = cost_model("h100")      # the committed H100 profile, else the H100 roofline
    model.cost(op, attrs, ins, outs)

`model`: the contract every cost model keeps (`CostModel`) and the analytic roofline
(`RooflineCost`) over the datasheets in `devices`. `profile_db`: measured times of op signatures,
one JSON file per device (`ProfileDB`). `profiled`: `MeasuredCost` over a profile and the roofline
calibrated on it. `ort_fusion`: the units onnxruntime's CPU provider runs a program as. `target`:
`TargetCost`, the measured model that fills its own profile on the machine (`cost_model("cpu")`).
`models`: the names `optimize(cost=...)`, `extract(cost=...)` and `einsat optimize --cost` accept.

Everything here stands on `einsat.ir` alone: no egglog, no HiGHS, no runtime, so the GPU machine's
profiler writes to the same database (`tests/test_layering.py`).
"""

from einsat.cost.devices import DEVICES, H100, H200, Device
from einsat.cost.model import CostModel, RooflineCost
from einsat.cost.models import COST_MODELS, DEFAULT_COST, cost_model, register_cost_model
from einsat.cost.profiled import MeasuredCost
from einsat.cost.target import TargetCost, cpu_model

__all__ = ["COST_MODELS", "DEFAULT_COST", "DEVICES", "H100", "H200", "CostModel", "Device", "MeasuredCost",
           "RooflineCost", "TargetCost", "cost_model", "cpu_model", "register_cost_model"]
