"""Cost models: the modeled run time of one e-node, in microseconds.

The contract every `CostModel` keeps (extractors rely on it, `tests/cost/test_model.py` checks it):

- **from the node alone**: the cost of an e-node depends only on its op, its attributes and the
  types (shape, dtype) of its input e-classes and of its outputs, never on other choices;
- **non-negative and finite**; sources (graph inputs, weights, constants) cost 0; every op that
  reads a tensor costs strictly more than 0 (so a cheapest program never contains a cycle);
- **monotone**: growing any input or output tensor never lowers the cost;
- **additive**: a program costs the sum of its distinct nodes (a shared value is paid once).

`RooflineCost(device)` is the analytic model; `MeasuredCost` (`einsat.cost.profiled`) reads
per-op timings. The names `optimize(cost=...)` accepts are in `einsat.cost.models`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from einsat.cost.devices import DEVICES, Device
from einsat.errors import EinsatError
from einsat.ir.groups import FUSED_CORE  # fused op -> its core op (the registry's fused_core)
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType


class CostModel(ABC):
    """The modeled cost of e-nodes and programs (see the module docstring for the contract)."""

    name: str = "cost"
    unit: str = "µs"
    # whether the target computes values made from weights alone once, when it loads the program
    # (onnxruntime folds them): then a program may keep a layout of its weights (pad, concat, ...)
    # instead of storing a larger weight (`extract.rebuild`); einsat's own runtimes run every node
    folds_weights_at_load: bool = False
    # whether the target runs layout ops (reshape, transpose, pad, slice, concat, ...) as kernels
    # of their own at their own cost (onnxruntime copies for most of them), rather than mostly
    # folding them away after optimization: then a program's views are part of what it costs
    # (PET's mutant pre-filter charges a mutant its views, `rewrites.mutate.admit.cheaper`)
    views_run: bool = False
    # whether the target is onnxruntime, which runs its com.microsoft contrib ops (skip_layernorm,
    # ...): then the recognition generators add them (`rewrites.algebra.skipnorm`) and the file a
    # run writes may use them (`Result.save`, `ExportContext.contrib`)
    contrib_ops: bool = False

    @abstractmethod
    def node_cost(self, op: Op, attrs: Mapping[str, Any], ins: Sequence[TensorType | None],
                  outs: Sequence[TensorType]) -> float:
        """The cost of one application of `op` (all its outputs together)."""

    def graph_cost(self, graph) -> float:
        """The cost of an `ir.Graph`: the sum over its nodes (each node runs once)."""
        return sum(self.node_cost(node.op, node.attrs, *graph.node_types(node)) for node in graph.nodes)

    def cost_by_op(self, graph) -> dict[str, float]:
        """The cost of an `ir.Graph` by op name (what the report's per-op bars show)."""
        out: dict[str, float] = {}
        for node in graph.nodes:
            out[node.op_name] = out.get(node.op_name, 0.0) + self.node_cost(node.op, node.attrs,
                                                                            *graph.node_types(node))
        return out

    @property
    def label(self) -> str:
        """The model in a few words, for the labels of a report's costs (what `name` stands for)."""
        return self.name

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




def separate_epilogue(op: Op, attrs, ins, outs) -> tuple[tuple[Op, dict, list, list], tuple[float, float]] | None:
    """Where einsat's GPU runtime runs an op as a vendor call plus an element-wise kernel of its
    own after it: ((the core op, its attrs, inputs, outputs), (the kernel's FLOPs, its bytes)),
    else None.

    The facts are the lowering's (`einsat.gpu.lower.fused`, `conv`): `fused_matmul` is a cuBLAS
    GEMM (alpha/beta only) and `fused_conv` a cuDNN convolution forward, each followed by one
    kernel reading the product, the bias and the residual present and writing act(y + bias +
    residual); with neither addend nor activation there is no kernel after. A `conv` or
    `conv_transpose` with a bias runs its bias add as a kernel after cuDNN's call. The kernel
    pays a launch and its bytes, so a fused op's epilogue is not free beside the ops it replaces.
    """
    out = outs[0] if outs else None
    if op in FUSED_CORE:
        addends = [t for t in ins[2:4] if t is not None]
        activation = attrs.get("activation", "none")
        if not addends and activation == "none":
            return None
        from einsat.ir.ops.fused import activation_flops
        core_attrs = {k: v for k, v in attrs.items() if k != "activation"}
        flops = len(addends) * out.size + activation_flops(activation, out)
        moved = 2 * out.nbytes + sum(t.nbytes for t in addends)
        return (FUSED_CORE[op], core_attrs, list(ins[:2]), list(outs)), (float(flops), float(moved))
    if op in (Op.CONV, Op.CONV_TRANSPOSE) and len(ins) > 2 and ins[2] is not None:
        return (op, dict(attrs), list(ins[:2]), list(outs)), (float(out.size), float(2 * out.nbytes + ins[2].nbytes))
    return None


class RooflineCost(CostModel):
    """Roofline time of one kernel: `launch + max(flops / peak, bytes / bandwidth)`.

    Matmul/conv-like ops use the tensor-core peak of their dtype (TF32 for fp32 only with
    `tf32=True`; einsat's GPU backend runs strict fp32 by default), everything else the CUDA-core
    peak. Views cost the device's `view_us`; sources cost 0 (the registry's `tensor_core`, `view`
    and `source` facts). FLOPs and bytes come from the op registry, which counts more of both for
    larger tensors: the model is monotone. An op the GPU runtime runs as a vendor call and an
    element-wise kernel after it (`separate_epilogue`: a fused op's epilogue, a conv's bias) is
    charged both kernels.
    """

    def __init__(self, device: Device | str, tf32: bool = False):
        if isinstance(device, str):
            if device not in DEVICES:
                raise EinsatError(f"unknown device {device!r}; known devices: {sorted(DEVICES)}")
            device = DEVICES[device]
        self.device = device
        self.tf32 = tf32
        self.name = device.name + ("-tf32" if tf32 else "")

    @property
    def label(self) -> str:
        return f"{self.name}: the datasheet roofline"

    def node_cost(self, op, attrs, ins, outs) -> float:
        d = opdef(op)
        if d.source:
            return 0.0
        if d.view:
            return self.device.view_us
        split = separate_epilogue(op, attrs, ins, outs)
        if split is not None:  # the vendor call, then the runtime's element-wise kernel
            (core, core_attrs, core_ins, core_outs), (flops, moved) = split
            dtype = core_outs[0].dtype
            return self.node_cost(core, core_attrs, core_ins, core_outs) + self.kernel_us(dtype, flops, moved, False)
        flops, moved = flops_and_bytes(op, attrs, ins, outs)
        ref = next((t for t in outs if t is not None), None) or next(t for t in ins if t is not None)
        return self.kernel_us(ref.dtype, flops, moved, d.tensor_core is not None)

    def kernel_us(self, dtype, flops: float, moved: float, tensor_core: bool) -> float:
        """One kernel's roofline time."""
        peak = self.device.peak_flops(dtype, tensor_core, self.tf32)
        seconds = max(flops / peak, moved / self.device.bandwidth)
        return self.device.launch_us + seconds * 1e6
