"""Cost models: the modeled run time of one e-node, in microseconds.

The contract every `CostModel` keeps (extractors rely on it, `tests/extract/test_cost.py` checks it):

- **from the node alone**: the cost of an e-node depends only on its op, its attributes and the
  types (shape, dtype) of its input e-classes and of its outputs, never on other choices;
- **non-negative and finite**; sources (graph inputs, weights, constants) cost 0; every op that
  reads a tensor costs strictly more than 0 (so a cheapest program never contains a cycle);
- **monotone**: growing any input or output tensor never lowers the cost;
- **additive**: a program costs the sum of its distinct nodes (a shared value is paid once).

`RooflineCost(device)` is the analytic default; `ProfiledCost(db, fallback)` is the hook for
per-op GPU timings. Models are looked up by name (`cost_model("h100")`), and a profiled model can
be registered under a device's name with `register_cost_model`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from einsat.errors import EinsatError
from einsat.extract.devices import DEVICES, Device
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType


class CostModel(ABC):
    """The modeled cost of e-nodes and programs (see the module docstring for the contract)."""

    name: str = "cost"
    unit: str = "µs"

    @abstractmethod
    def node_cost(self, op: Op, attrs: Mapping[str, Any], ins: Sequence[TensorType | None],
                  outs: Sequence[TensorType]) -> float:
        """The cost of one application of `op` (all its outputs together)."""

    def graph_cost(self, graph) -> float:
        """The cost of an `ir.Graph`: the sum over its nodes (each node runs once)."""
        return sum(self.node_cost(node.op, node.attrs, *graph.node_types(node)) for node in graph.nodes)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def flops_and_bytes(op: Op, attrs, ins, outs) -> tuple[float, float]:
    """The registry's FLOP and byte counts; an op without a FLOP count is charged its bytes only."""
    moved = sum(t.nbytes for t in ins if t is not None) + sum(t.nbytes for t in outs)
    try:
        d = opdef(op)
    except EinsatError:
        return 0.0, float(moved)
    try:
        flops = float(d.flops(ins, outs, attrs))
    except NotImplementedError:
        flops = 0.0
    return flops, float(d.bytes(ins, outs, attrs))


class RooflineCost(CostModel):
    """Roofline time of one kernel: `launch + max(flops / peak, bytes / bandwidth)`.

    Matmul/conv-like ops use the tensor-core peak of their dtype (TF32 for fp32 only with
    `tf32=True`; einsat's GPU backend runs strict fp32 by default), everything else the CUDA-core
    peak. Views cost the device's `view_us`; sources cost 0 (the registry's `tensor_core`, `view`
    and `source` facts). FLOPs and bytes come from the op registry, which counts more of both for
    larger tensors: the model is monotone.
    """

    def __init__(self, device: Device | str = "h100", tf32: bool = False):
        if isinstance(device, str):
            if device not in DEVICES:
                raise EinsatError(f"unknown device {device!r}; known devices: {sorted(DEVICES)}")
            device = DEVICES[device]
        self.device = device
        self.tf32 = tf32
        self.name = device.name + ("-tf32" if tf32 else "")

    def node_cost(self, op, attrs, ins, outs) -> float:
        d = opdef(op)
        if d.source:
            return 0.0
        if d.view:
            return self.device.view_us
        flops, moved = flops_and_bytes(op, attrs, ins, outs)
        ref = next((t for t in outs if t is not None), None) or next(t for t in ins if t is not None)
        peak = self.device.peak_flops(ref.dtype, d.tensor_core is not None, self.tf32)
        seconds = max(flops / peak, moved / self.device.bandwidth)
        return self.device.launch_us + seconds * 1e6


class ProfiledCost(CostModel):
    """Measured per-op GPU timings, with a fallback model for ops the profile lacks.

    `db` is any object with `lookup(op, attrs, ins, outs) -> float | None` (µs, None when the
    profile has no entry); `einsat.gpu`'s profiler writes the database and provides the loader.
    The fallback should be a roofline calibrated on the same device. Measured times are clamped
    to be at least the fallback's view cost, so that the positivity contract holds.
    """

    def __init__(self, db, fallback: CostModel, name: str | None = None):
        self.db = db
        self.fallback = fallback
        self.name = name or f"profiled-{fallback.name}"

    def node_cost(self, op, attrs, ins, outs) -> float:
        if opdef(op).source:
            return 0.0
        measured = self.db.lookup(op, attrs, ins, outs)
        if measured is None:
            return self.fallback.node_cost(op, attrs, ins, outs)
        floor = getattr(getattr(self.fallback, "device", None), "view_us", 1e-3)
        return max(float(measured), floor)


def _device_model(kind: str) -> CostModel:
    """The committed GPU profile of `kind` (einsat/gpu/profiles/<kind>.json) as a ProfiledCost,
    or the analytic roofline while none is committed."""
    from einsat.extract.profiled import profiled_or_roofline
    return profiled_or_roofline(kind)


_COST_MODELS: dict[str, Callable[[], CostModel]] = {
    "h100": lambda: _device_model("h100"),
    "h200": lambda: _device_model("h200"),
    "h100-tf32": lambda: RooflineCost("h100", tf32=True),
    "h200-tf32": lambda: RooflineCost("h200", tf32=True),
}


def register_cost_model(name: str, factory: Callable[[], CostModel]) -> None:
    """Make `cost_model(name)` (and `optimize(cost=name)`) build models with `factory`.

    The GPU profiler registers `ProfiledCost` under a device's name once a profile exists.
    """
    _COST_MODELS[name] = factory


def cost_model(spec: str | CostModel) -> CostModel:
    """A cost model from its name ("h100", "h200", "h100-tf32", ...) or the model itself."""
    if isinstance(spec, CostModel):
        return spec
    if spec not in _COST_MODELS:
        raise EinsatError(f"unknown cost model {spec!r}; choose one of {sorted(_COST_MODELS)} "
                          "or pass a CostModel")
    return _COST_MODELS[spec]()
