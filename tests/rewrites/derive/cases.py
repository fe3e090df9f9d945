"""The EinNet cases of the done-when list, with the paper's shapes (Table 3) and small ones of our own,
and the test cost model under which their derived forms are cheaper."""

from __future__ import annotations

import numpy as np

from einsat.cost.model import CostModel, RooflineCost
from einsat.ir import GraphBuilder, Op
from einsat.ir.graph import Graph

F32 = np.float32


def conv3x3(n=1, c=512, size=7, f=512, dtype=F32) -> Graph:
    """EinNet Fig. 3/5 (Table 3: [1, 512, 7, 7] * [512, 512, 3, 3], padding 1)."""
    b = GraphBuilder("conv3x3")
    x = b.input("x", (n, c, size, size), dtype)
    return b.build(b.conv(x, b.weight("w", (f, c, 3, 3), dtype), padding=1))


def conv5x5(n=16, c=32, size=224, f=1, dtype=F32) -> Graph:
    """EinNet Fig. 6 (Table 3: [16, 32, 224, 224] * [1, 32, 5, 5], padding 2)."""
    b = GraphBuilder("conv5x5")
    x = b.input("x", (n, c, size, size), dtype)
    return b.build(b.conv(x, b.weight("w", (f, c, 5, 5), dtype), padding=2))


def conv_transpose(n=16, c=448, size=2, f=256, dtype=F32) -> Graph:
    """EinNet §7.3 (Table 3: [16, 448, 2, 2] * [448, 256, 4, 4], stride 2, padding 1)."""
    b = GraphBuilder("conv_transpose")
    x = b.input("x", (n, c, size, size), dtype)
    return b.build(b.conv_transpose(x, b.weight("w", (c, f, 4, 4), dtype), stride=2, padding=1))


def g2bmm(z=8, m=2000, k=64, width=200, dilation=4, dtype=F32) -> Graph:
    """EinNet Fig. 14 (Table 3: [8, 10000, 64], width 1000, dilation 4; the CPU size of the
    workload: 2000 rows, width 200)."""
    b = GraphBuilder("g2bmm")
    q, kk = b.input("q", (z, m, k), dtype), b.input("k", (z, m, k), dtype)
    return b.build(b.g2bmm(q, kk, width=width, dilation=dilation))


def gcn_pair(n=1, c=16, size=12, f=8, k=5, dtype=F32) -> Graph:
    """EinNet Fig. 15: GCN's (k×1 → 1×k) + (1×k → k×1) separable convolutions of one input."""
    b = GraphBuilder("gcn_pair")
    x = b.input("x", (n, c, size, size), dtype)

    def conv(t, kernel, pad, name):
        return b.conv(t, b.weight(name, (f, t.shape[1]) + kernel, dtype), padding=pad)

    left = conv(conv(x, (k, 1), (k // 2, 0), "w1"), (1, k), (0, k // 2), "w2")
    right = conv(conv(x, (1, k), (0, k // 2), "w3"), (k, 1), (k // 2, 0), "w4")
    return b.build(b.add(left, right))


class DerivedCheaper(CostModel):
    """A test cost model under which EinNet's derived forms win, as they do on the paper's GPUs:
    the roofline (eOperators are charged their bytes, every kernel a launch), except that a
    direct 5×5 or transposed convolution costs ten times its roofline (cuDNN's slow algorithms
    in Table 3), any other convolution three times, and a band product with dilation D costs D
    times (strided rows: Table 3's L2 traffic). With `winograd`, a 3×3 convolution costs a
    quarter of its roofline instead (cuDNN's Winograd, Table 3's Fig. 6 row)."""

    name = "derived-cheaper"

    def __init__(self, winograd: bool = False):
        self.base = RooflineCost("h100")
        self.winograd = winograd  # 3×3 convolutions (dilation 1) at Winograd's speed: ahead of GEMMs

    def node_cost(self, op, attrs, ins, outs):
        cost = self.base.node_cost(op, attrs, ins, outs)
        if op is Op.CONV and self.winograd and ins[1].shape[2:] == (3, 3) and attrs["dilation"] == (1, 1):
            return cost / 4
        if op is Op.CONV_TRANSPOSE or (op is Op.CONV and max(ins[1].shape[2:]) >= 5):
            return 10 * cost
        if op is Op.CONV:
            return 3 * cost
        if op is Op.G2BMM:
            return attrs["dilation"] * cost
        return cost


def source(g: Graph):
    """(expression, input types, weight positions, FLOPs) of a one-op graph's op."""
    node = g.nodes[0]
    types = [g.types[i] for i in node.inputs]
    d = node.definition
    flops = d.flops(types, [g.types[o] for o in node.outputs], node.attrs)
    const = frozenset(k for k, i in enumerate(node.inputs) if i in g.weights)
    return d.expression(types, node.attrs), types, const, flops
