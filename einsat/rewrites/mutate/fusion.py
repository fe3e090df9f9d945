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
inputs are simply stacked. `fuse(graph)` applies the law to a program until no pair is left:
a corrected mutant's fixes join its mutant conv in one kernel.
"""

from __future__ import annotations

from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op


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


def _first_pair(g: Graph) -> tuple[Node, Node, int] | None:
    convs = [n for n in g.nodes if n.op is Op.CONV]
    for i, a in enumerate(convs):
        for b in convs[i + 1:]:
            axis = _axis(g, a, b)
            if axis is not None:
                return a, b, axis
    return None


def _axis(g: Graph, a: Node, b: Node) -> int | None:
    """The axis along which the law joins `a` and `b`, or None."""
    (xa, wa, ba), (xb, wb, bb) = _conv_parts(a), _conv_parts(b)
    sa, sb = g.types[xa].shape, g.types[xb].shape
    same = ("dilation", "groups")
    if wa != wb or ba != bb or any(a.attrs[k] != b.attrs[k] for k in same) or len(sa) != len(sb):
        return None
    if _depends(g, a, b) or _depends(g, b, a):
        return None
    nsp = len(sa) - 2
    pa, pb = a.attrs["padding"], b.attrs["padding"]
    if sa[1:] == sb[1:] and pa == pb and a.attrs["stride"] == b.attrs["stride"]:
        return 0
    for axis in range(2, len(sa)):
        i = axis - 2
        others = [k for k in range(nsp) if k != i]
        if (sa[:axis] + sa[axis + 1:] == sb[:axis] + sb[axis + 1:] and a.attrs["stride"][i] == b.attrs["stride"][i] == 1
                and all(pa[k] == pb[k] and pa[nsp + k] == pb[nsp + k] for k in others)
                and all(a.attrs["stride"][k] == b.attrs["stride"][k] for k in others)):
            return axis
    return None


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


def _merged(g: Graph, a: Node, b: Node, axis: int) -> Graph:
    (xa, w, bias), (xb, _, _) = _conv_parts(a), _conv_parts(b)
    ya, yb = a.outputs[0], b.outputs[0]
    rank = g.types[xa].rank
    name = f"{ya}+{yb}"
    attrs = dict(a.attrs)
    nodes: list[Node] = []
    if axis == 0:
        sizes, keep = (g.types[ya].shape[0], g.types[yb].shape[0]), (0, 1)
        joined = [xa, xb]
    else:
        nsp, i = rank - 2, axis - 2
        span = a.attrs["dilation"][i] * (g.types[w].shape[axis] - 1) + 1
        end_a, begin_b = a.attrs["padding"][nsp + i], b.attrs["padding"][i]
        gap = max(end_a, begin_b, end_a + begin_b - span + 1, 0)
        pad = list(a.attrs["padding"])
        pad[nsp + i] = b.attrs["padding"][nsp + i]
        attrs["padding"] = tuple(pad)
        junk = gap + span - 1 - end_a - begin_b
        sizes = (g.types[ya].shape[axis], junk, g.types[yb].shape[axis])
        keep = (0, 2)
        if gap:
            pads = [0] * (2 * rank)
            pads[axis] = gap
            nodes.append(Node(Op.PAD, [xb], [f"{name}/gap"], {"pads": tuple(pads)}))
            xb = f"{name}/gap"
        joined = [xa, xb]
    nodes.append(Node(Op.CONCAT, joined, [f"{name}/in"], {"axis": axis}))
    nodes.append(Node(Op.CONV, [f"{name}/in", w] + ([bias] if bias else []), [f"{name}/out"], attrs))
    outs = [f"{name}/junk{k}" for k in range(len(sizes))]
    outs[keep[0]], outs[keep[1]] = ya, yb
    nodes.append(Node(Op.SPLIT, [f"{name}/out"], outs, {"axis": axis, "sizes": sizes}))
    rest = [n for n in g.nodes if n is not a and n is not b]
    return g.replace(nodes=rest + nodes)
