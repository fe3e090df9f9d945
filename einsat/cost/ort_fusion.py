"""The units a program runs as on onnxruntime's CPU provider: its fusion groups.

onnxruntime fuses a convolution with the bias or residual Add and the activation after it
(ConvAddFusion, ConvActivationFusion, ConvAddActivationFusion) and a matmul with the Add of a
bias (MatMulAddFusion into Gemm) and an activation: the intermediate tensors are never written,
and the Add and activation cost next to nothing. A sum of one-node times charges them in full.
So a whole program is predicted unit by unit: each fusion group is costed as einsat's own fused
op (`fused_conv`, `fused_matmul`), whose one-node model exports to exactly the group onnxruntime
fuses back, and whose time the profiler measures as that unit.

    units = ort_units(graph)       # [Unit], every node in exactly one unit, in program order

A group grows from a conv (or a fused conv without epilogue) or a matmul along its value's only
consumer, while that value is no graph output: for a conv, any batchnorms with constant
statistics and Muls or Adds of constant per-channel values (folded into its weights and bias);
one Add of a residual of the output's shape (for a matmul, or a bias vector of the output's
last extent); then one activation (relu, sigmoid, tanh), which ends it. A node computed from
weights alone (a layout of weights that `extract.rebuild` keeps instead of storing a larger
weight) is a `constant` unit: onnxruntime folds it at load time.

onnxruntime also runs convolutions and poolings in a blocked channel layout (NCHWc, its
`NchwcTransformer`), with a `ReorderInput` kernel before and a `ReorderOutput` kernel after
each, which it leaves out between two such ops and through the element-wise ops and concats
that carry the layout. A one-node session pays both reorders; `blocked_layout` says which values
of a program stay in the blocked layout, so that `TargetCost.layout_savings_us` can take the
reorders a program does not run off the units' one-node times.
Pure: depends on `einsat.ir` alone.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from einsat.ir.graph import Graph, Node
from einsat.ir.groups import FUSION_HEADS, NCHWC_BLOCKED, NCHWC_CARRIED
from einsat.ir.ops.fused import ACTIVATIONS
from einsat.ir.registry import Op
from einsat.ir.types import TensorType

ACTIVATION_OPS = {op: name for name, op in ACTIVATIONS.items() if op is not None}  # the fused ops' activations
HEADS = FUSION_HEADS  # the ops an activation fuses onto: matmul, conv and their fused forms
# ops whose one-node onnxruntime session may run in the blocked layout, reorders around them
LAYOUT_OPS = NCHWC_BLOCKED  # the registry's nchwc = "blocked"
# ops onnxruntime runs in the blocked layout when their input comes in it (its NchwcTransformer):
# activations, batchnorm and the global pooling by their data input; Add and Mul of two blocked
# tensors of one shape; a Concat along the channels of blocked inputs whose channel counts are
# multiples of the block
CARRY_OPS = NCHWC_CARRIED  # the registry's nchwc = "carried"
REORDER_IN, REORDER_OUT = "ReorderInput", "ReorderOutput"  # onnxruntime's kernels of the layout change
# onnxruntime kernels a fused convolution's one-node session runs apart (its residual arrives in
# the plain layout) and a blocked convolution runs inside its own kernel
EPILOGUE_KERNELS = frozenset({"Add", "Sum", "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid"})


@dataclass(frozen=True)
class Unit:
    """Nodes onnxruntime runs as one kernel, and the op application that stands for them."""

    nodes: tuple[Node, ...]
    op: Op
    attrs: dict[str, Any]
    ins: tuple[TensorType | None, ...]
    outs: tuple[TensorType, ...]
    constant: bool = False  # computed from weights alone: onnxruntime folds it at load time

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1


def _single(node: Node, graph: Graph, uses: dict[str, list[Node]]) -> Node | None:
    """The only consumer of `node`'s only output, unless that output is a graph output."""
    if len(node.outputs) != 1 or node.outputs[0] in graph.outputs:
        return None
    users = uses.get(node.outputs[0], [])
    return users[0] if len(users) == 1 else None


def _head(node: Node, graph: Graph):
    """(fused op, attrs, inputs) of a group started at `node`, or None when none can start."""
    ins, _ = graph.node_types(node)
    a = dict(node.attrs)
    if node.op is Op.CONV:
        return Op.FUSED_CONV, {**a, "activation": "none"}, [*ins, *[None] * (3 - len(ins))]
    if node.op is Op.FUSED_CONV and a["activation"] == "none" and (len(ins) < 4 or ins[3] is None):
        return Op.FUSED_CONV, a, [*ins[:3], *[None] * (3 - len(ins[:3]))]
    if node.op is Op.MATMUL:
        return Op.FUSED_MATMUL, {"activation": "none"}, [*ins, None]
    if node.op is Op.FUSED_MATMUL and a["activation"] == "none" and (len(ins) < 4 or ins[3] is None):
        return Op.FUSED_MATMUL, a, [*ins[:3], *[None] * (3 - len(ins[:3]))]
    return None


def _absorb_add(op: Op, ins: list, add: Node, value: str, graph: Graph, out: TensorType) -> list | None:
    """`ins` with the Add's other operand as a residual (or a matmul's bias), or None."""
    if add.op is not Op.ADD or list(add.inputs).count(value) != 1:
        return None
    other = add.inputs[1] if add.inputs[0] == value else add.inputs[0]
    t = graph.types[other]
    if graph.types[add.outputs[0]] != out:
        return None
    if t == out:
        return [*ins[:3], t]
    if op is Op.FUSED_MATMUL and ins[2] is None and t.shape == out.shape[-1:]:
        return [ins[0], ins[1], t]
    return None


def _per_channel(t: TensorType, out: TensorType) -> bool:
    """A constant onnxruntime folds into a conv's weights or bias: a scalar or one value per
    output channel ([C], [C, 1, 1] or [1, C, 1, 1])."""
    c = out.shape[1] if out.rank > 1 else -1
    return t.size == 1 or (t.size == c and t.shape[-(out.rank - 1):] == (c,) + (1,) * (out.rank - 2)) \
        or t.shape == (c,) and out.rank == 2


def _folds_into_conv(nxt: Node, value: str, graph: Graph, out: TensorType) -> bool:
    """A batchnorm with constant statistics (ConvBNFusion), or a Mul or Add of a constant
    per-channel value (ConvMulFusion, ConvAddFusion): onnxruntime folds it into the conv."""
    if graph.types[nxt.outputs[0]] != out:
        return False
    if nxt.op is Op.BATCHNORM:
        return nxt.inputs[0] == value and all(i in graph.weights for i in nxt.inputs[1:] if i)
    if nxt.op in (Op.MUL, Op.ADD) and list(nxt.inputs).count(value) == 1:
        other = nxt.inputs[1] if nxt.inputs[0] == value else nxt.inputs[0]
        return other in graph.weights and _per_channel(graph.types[other], out)
    return False


def ort_units(graph: Graph) -> list[Unit]:
    """Every node of `graph` in exactly one unit (see the module docstring), in program order."""
    uses = graph.consumers()
    taken: set[int] = set()
    units: list[Unit] = []
    const = set(graph.weights)
    for node in graph.nodes:
        if id(node) in taken:
            continue
        if all(i in const for i in node.inputs if i) and node.definition.foldable:
            const.update(node.outputs)
            ins, outs = graph.node_types(node)
            units.append(Unit((node,), node.op, dict(node.attrs), tuple(ins), tuple(outs), constant=True))
            continue
        head = _head(node, graph) if node.op in HEADS else None
        if head is None:
            ins, outs = graph.node_types(node)
            units.append(Unit((node,), node.op, dict(node.attrs), tuple(ins), tuple(outs)))
            continue
        op, attrs, ins = head
        out = graph.types[node.outputs[0]]
        group, cur = [node], node
        nxt = _single(cur, graph, uses)
        while nxt is not None and id(nxt) not in taken:  # an Add of two products joins the first's group
            if op is Op.FUSED_CONV and _folds_into_conv(nxt, cur.outputs[0], graph, out):
                if nxt.op in (Op.BATCHNORM, Op.ADD) and ins[2] is None:  # a bias appears
                    ins = [ins[0], ins[1], TensorType((out.shape[1],), out.dtype), *ins[3:]]
            elif nxt.op is Op.ADD and len(ins) <= 3:  # a fourth input is the residual, taken once
                grown = _absorb_add(op, ins, nxt, cur.outputs[0], graph, out)
                if grown is None:
                    break
                ins = grown
            elif nxt.op in ACTIVATION_OPS and attrs.get("activation", "none") == "none":
                attrs = {**attrs, "activation": ACTIVATION_OPS[nxt.op]}
                group.append(nxt)
                break
            else:
                break
            group.append(nxt)
            cur = nxt
            nxt = _single(cur, graph, uses)
        if len(group) == 1:
            ins_, outs = graph.node_types(node)
            units.append(Unit((node,), node.op, dict(node.attrs), tuple(ins_), tuple(outs)))
            continue
        while ins and ins[-1] is None:
            ins = ins[:-1]
        taken.update(id(n) for n in group)
        units.append(Unit(tuple(group), op, attrs, tuple(ins), (out,)))
    return units


def unit_outputs(unit: Unit) -> tuple[str, ...]:
    """The values a unit produces for the rest of the program (its last node's outputs)."""
    return tuple(unit.nodes[-1].outputs)


def unit_inputs(unit: Unit, graph: Graph, folded: Collection[str] = ()) -> list[str]:
    """The values a unit reads from other units or the program's inputs (weights, and the
    `folded` values that constant units compute from them, left out), its head's data input first."""
    inside = {o for n in unit.nodes for o in n.outputs}
    out: list[str] = []
    for n in unit.nodes:
        for i in n.inputs:
            if i and i not in inside and i not in graph.weights and i not in folded and i not in out:
                out.append(i)
    return out


def unit_residuals(unit: Unit, graph: Graph, folded: Collection[str] = ()) -> list[str]:
    """The values a fused unit adds after its head (a residual), weights and `folded` values left
    out; a value may also be the head's own input (a conv's output plus its input)."""
    inside = {o for n in unit.nodes for o in n.outputs}
    return [i for n in unit.nodes[1:] for i in n.inputs
            if i and i not in inside and i not in graph.weights and i not in folded]


def _carries(unit: Unit, graph: Graph, ins: list[str], blocked: set[str], block: int) -> bool:
    """Whether onnxruntime runs the `CARRY_OPS` unit `unit` in the blocked layout."""
    if unit.op not in CARRY_OPS or unit.fused or not ins or ins[0] not in blocked:
        return False
    node = unit.nodes[0]
    if unit.op in (Op.ADD, Op.MUL, Op.CONCAT):  # every operand a blocked tensor, none a weight
        if len([i for i in node.inputs if i]) != len(ins) or not all(i in blocked for i in ins):
            return False
        if unit.op is Op.CONCAT:
            rank = len(graph.types[ins[0]].shape)
            return node.attrs.get("axis") in (1, 1 - rank) and all(graph.types[i].shape[1] % block == 0 for i in ins)
        return len({graph.types[i].shape for i in ins}) == 1
    return True


def blocked_layout(graph: Graph, units: list[Unit], reorders: list[bool], folded: Collection[str] = (),
                   block: int = 8) -> tuple[set[str], set[str]]:
    """(blocked, staying): the values of `graph` onnxruntime computes in its blocked NCHWc layout
    (`block` channels a block), and those of them that no op takes back to the plain layout.

    Blocked: the outputs of the units that run in the layout (`reorders[k]`: unit k's one-node
    session reordered around it), unless a residual they add arrives plain (onnxruntime then
    adds it after a reorder); and of the `CARRY_OPS` units whose inputs are blocked (`_carries`).
    Staying: a blocked value that is no graph output and whose every consumer takes it blocked:
    a unit that runs in the layout, or a carrying unit whose own outputs stay (a global pooling's
    output, a pixel a channel, is reordered at next to no cost). `units` are the program's, in
    order; `folded`: values computed from weights alone."""
    # a fused unit stands at its head's place, and may add a residual computed by a later unit:
    # both sets grow to their fixpoint (monotone: a value once blocked or staying stays so)
    ins = [[] if u.constant else unit_inputs(u, graph, folded) for u in units]
    residual = [[] if u.constant else unit_residuals(u, graph, folded) for u in units]
    blocked: set[str] = set()
    carrying = [False] * len(units)
    changed = True
    while changed:
        changed = False
        for k, (unit, reordered) in enumerate(zip(units, reorders)):
            if unit.constant or all(o in blocked for o in unit_outputs(unit)):
                continue
            carrying[k] = not reordered and _carries(unit, graph, ins[k], blocked, block)
            if (reordered and all(i in blocked for i in residual[k])) or carrying[k]:
                blocked.update(unit_outputs(unit))
                changed = True
    consumers: dict[str, list[int]] = {}
    for k, values in enumerate(ins):
        for i in values:
            consumers.setdefault(i, []).append(k)
    outputs = set(graph.outputs)
    staying: set[str] = set()
    changed = True
    while changed:
        changed = False
        for k in reversed(range(len(units))):
            for o in unit_outputs(units[k]):
                if o in staying or o not in blocked or o in outputs:
                    continue
                if all(reorders[c] or (carrying[c] and (units[c].op is Op.GLOBAL_AVGPOOL
                                                       or all(v in staying for v in unit_outputs(units[c]))))
                       for c in consumers.get(o, ())):
                    staying.add(o)
                    changed = True
    return blocked, staying
