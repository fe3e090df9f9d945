"""Correction fusion (PET §5.3, Figure 6): two convolutions of one weight become one.

A corrected mutant computes its fixes with the original op restricted to small regions: the
fix convolutions read the same weight as the mutant's convolution. Fully equivalent law, for
convolutions of one weight W with equal dilation, groups and bias, stride 1 along `axis`, and
equal extents and padding along every other spatial axis (and the same batch, for a spatial
axis):

    conv(a, W), conv(b, W) = split_axis(conv(concat_axis(a, 0_g, b), W))

Along a spatial axis the zero gap g keeps each input reading zeros where its own padding was:
g >= a's end padding and g >= b's begin padding (the fused conv pads a's begin and b's end), and
the g + k_eff − 1 − (a's end padding) − (b's begin padding) outputs that straddle the gap are
split off and dropped (g is the least that keeps that count >= 0). Along the batch (axis 0) the
inputs are simply stacked.

`join(...)` decides the law for two convolutions from their shapes and attributes alone (a
`Join`, or None), so that it serves both sides: `fuse(graph)` applies it to a program until no
pair is left (a corrected mutant's fixes join its mutant conv in one kernel), and the e-graph
generator `rewrites.mutate.correction_fusion` applies it to the convolutions of the corrections
in the e-graph, across admissions, leaving the choice to extraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op


@dataclass(frozen=True)
class Join:
    """How two convolutions of one weight become one: `b` padded by `gap` zeros before it along
    `axis` (0: none), `a` and `b` concatenated along `axis`, one conv with `attrs`, its output
    split into `sizes` of which `keep` are the two outputs (a's, then b's)."""

    axis: int
    gap: int
    attrs: Mapping[str, Any]
    sizes: tuple[int, ...]
    keep: tuple[int, int]

    def gap_pads(self, rank: int) -> tuple[int, ...]:
        """ONNX pads (begins, then ends) putting the gap before `b` along the axis."""
        pads = [0] * (2 * rank)
        pads[self.axis] = self.gap
        return tuple(pads)


def join(a_in: tuple[int, ...], a_attrs: Mapping[str, Any], a_out: tuple[int, ...],
         b_in: tuple[int, ...], b_attrs: Mapping[str, Any], b_out: tuple[int, ...],
         w_shape: tuple[int, ...]) -> Join | None:
    """The law for conv(a, W) and conv(b, W) of the given input and output shapes and attributes
    (both over the same weight and bias), or None where it does not apply."""
    same = ("dilation", "groups")
    if any(a_attrs[k] != b_attrs[k] for k in same) or len(a_in) != len(b_in) or len(a_in) < 3:
        return None
    nsp = len(a_in) - 2
    pa, pb = a_attrs["padding"], b_attrs["padding"]
    sa, sb = a_attrs["stride"], b_attrs["stride"]
    if a_in[1:] == b_in[1:] and pa == pb and sa == sb:
        return Join(0, 0, dict(a_attrs), (a_out[0], b_out[0]), (0, 1))
    for axis in range(2, len(a_in)):
        i = axis - 2
        others = [k for k in range(nsp) if k != i]
        if (a_in[:axis] + a_in[axis + 1:] == b_in[:axis] + b_in[axis + 1:] and sa[i] == sb[i] == 1
                and all(pa[k] == pb[k] and pa[nsp + k] == pb[nsp + k] for k in others)
                and all(sa[k] == sb[k] for k in others)):
            span = a_attrs["dilation"][i] * (w_shape[axis] - 1) + 1
            end_a, begin_b = pa[nsp + i], pb[i]
            gap = max(end_a, begin_b, end_a + begin_b - span + 1, 0)
            pad = list(pa)
            pad[nsp + i] = pb[nsp + i]
            junk = gap + span - 1 - end_a - begin_b
            return Join(axis, gap, {**a_attrs, "padding": tuple(pad)}, (a_out[axis], junk, b_out[axis]), (0, 2))
    return None


def fuse(graph: Graph) -> Graph:
    """`graph` with its convolutions of one weight fused pairwise while the law applies."""
    for _ in range(len(graph.nodes)):
        pair = _first_pair(graph)
        if pair is None:
            return graph
        graph = _merged(graph, *pair)
    return graph


def _conv_parts(node: Node) -> tuple[str, str, str]:
    """(data, weight, bias) of a conv node: the one place that reads a conv's input slots."""
    ins = tuple(node.inputs) + ("",) * (3 - len(node.inputs))
    return ins[0], ins[1], ins[2]


def _first_pair(g: Graph) -> tuple[Node, Node, Join] | None:
    convs = [n for n in g.nodes if n.op is Op.CONV]
    for i, a in enumerate(convs):
        for b in convs[i + 1:]:
            plan = _join(g, a, b)
            if plan is not None:
                return a, b, plan
    return None


def _join(g: Graph, a: Node, b: Node) -> Join | None:
    """The law for nodes `a` and `b`, or None (another weight or bias, or one reads the other)."""
    (xa, wa, ba), (xb, wb, bb) = _conv_parts(a), _conv_parts(b)
    if wa != wb or ba != bb or _depends(g, a, b) or _depends(g, b, a):
        return None
    t = g.types
    return join(t[xa].shape, a.attrs, t[a.outputs[0]].shape, t[xb].shape, b.attrs, t[b.outputs[0]].shape,
                t[wa].shape)


def _depends(g: Graph, a: Node, b: Node) -> bool:
    """Whether `b` reads `a`'s output (through any chain of nodes)."""
    stack, seen = [i for i in b.inputs if i], set()
    while stack:
        v = stack.pop()
        if v == a.outputs[0]:
            return True
        node = g.producer(v)
        if node is not None and v not in seen:
            seen.add(v)
            stack.extend(i for i in node.inputs if i)
    return False


def _merged(g: Graph, a: Node, b: Node, plan: Join) -> Graph:
    (xa, w, bias), (xb, _, _) = _conv_parts(a), _conv_parts(b)
    name = f"{a.outputs[0]}+{b.outputs[0]}"
    nodes: list[Node] = []
    if plan.gap:
        nodes.append(Node(Op.PAD, [xb], [f"{name}/gap"], {"pads": plan.gap_pads(g.types[xa].rank)}))
        xb = f"{name}/gap"
    nodes.append(Node(Op.CONCAT, [xa, xb], [f"{name}/in"], {"axis": plan.axis}))
    nodes.append(Node(Op.CONV, [f"{name}/in", w] + ([bias] if bias else []), [f"{name}/out"], dict(plan.attrs)))
    outs = [f"{name}/junk{k}" for k in range(len(plan.sizes))]
    outs[plan.keep[0]], outs[plan.keep[1]] = a.outputs[0], b.outputs[0]
    nodes.append(Node(Op.SPLIT, [f"{name}/out"], outs, {"axis": plan.axis, "sizes": plan.sizes}))
    rest = [n for n in g.nodes if n is not a and n is not b]
    return g.replace(nodes=rest + nodes)
