"""The typed mutant grammar (PET §4.2): the mutants of a subprogram, by category, in a fixed order.

Blind enumeration (Algorithm 1) is unbounded over einsat's attributes, so the grammar enumerates
PET's categories over the subprogram's ops and types instead. Every mutant takes the
subprogram's inputs and weights (new weights are ops over them, or exact constants) and gives
outputs of the same shapes, in order:

- **layout**: L⁻¹ ∘ S′ ∘ L for a subprogram whose ops act per image and position (convolutions
  and pools of stride 1, batch norms, element-wise ops with per-channel weights), for every
  layout of `layouts.moves_for`; under the parity layout of a dilated conv, the conv becomes a
  regular one (dilation D -> 1, padding p -> p/D). Figures 1 and 3, §8.3.1.
- **substitution** (one op): average pool -> depthwise conv of 1/(kh·kw); grouped conv -> conv
  on the block-diagonal weight (Table 1, §8.3.2).
- **group** (independent ops of one kind): convolutions -> one grouped conv on the concatenated
  inputs, smaller filter banks zero-padded and smaller kernels enlarged (Figure 10(a); an input
  shared by both is duplicated, Figure 10(b)); matmuls -> one batched matmul of the stacked
  operands (Table 3's batch matmul).

Whether a mutant computes the subprogram, and where not, is the corrector's business (`admit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from einsat.errors import EinsatError
from einsat.ir import groups
from einsat.ir.builder import GraphBuilder, Tensor
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op
from einsat.rewrites.mutate.layouts import Move, apply, moves_for, padding, realise, undo

PER_POSITION = groups.PER_POSITION  # the same function at every spatial position (registry facts)
ELEMENTWISE = groups.LINEAR_POINTWISE  # linear and point-wise: exact over the field
MAX_GROUPS = 4  # grouped convs with more groups are not expanded to a block-diagonal weight


@dataclass(frozen=True)
class Mutant:
    family: str  # "layout", "substitution" or "group"
    what: str    # a one-line description, for reports
    graph: Graph


def mutants(s: Graph) -> list[Mutant]:
    """Every mutant of `s` the grammar knows, layouts first (see the module doc)."""
    out: list[Mutant] = []
    frame = _frame(s)
    if frame is not None:
        shape, data = frame
        dilation = _common_dilation(s)
        for moves in moves_for(shape, dilation):
            g = _try(lambda: _layout(s, data, moves))
            if g is not None:
                out.append(Mutant("layout", _describe(moves), g))
    for family, what, build in _substitutions(s) + _groups(s):
        g = _try(build)
        if g is not None:
            out.append(Mutant(family, what, g))
    return out


class Unfit(Exception):
    """This mutant does not exist for this subprogram (a factor does not divide, ...)."""


def _try(build) -> Graph | None:
    try:
        return build()
    except (Unfit, EinsatError):  # EinsatError: the op's attributes do not fit the new shapes
        return None


def _describe(moves: tuple[Move, ...]) -> str:
    return ", ".join(f"dim {m.src} {'inner' if m.inner else 'outer'} x{m.factor} -> dim {m.dst} "
                     f"{'outer' if m.outer else 'inner'}" for m in moves)


# -- layouts ---------------------------------------------------------------------------------------

def _frame(s: Graph) -> tuple[tuple[int, ...], set[str]] | None:
    """(an [N, C, spatial...] shape, the data values) when every op of `s` acts per position on
    data values sharing N and the spatial sizes; None otherwise."""
    data: set[str] = set()
    for node in s.nodes:
        if node.op not in PER_POSITION or len(node.outputs) != 1:
            return None
        a = node.attrs
        if node.op in (Op.CONV, Op.AVGPOOL) and (any(v != 1 for v in a["stride"]) or a.get("ceil_mode", 0)):
            return None
        out = s.types[node.outputs[0]].shape
        slots = [0] if node.op not in ELEMENTWISE else \
            [k for k, i in enumerate(node.inputs) if _frame_of(s.types[i].shape) == _frame_of(out)]
        data |= {node.inputs[k] for k in slots} | {node.outputs[0]}
    shapes = {_frame_of(s.types[v].shape) for v in data}
    ranks = {s.types[v].rank for v in data}
    if len(shapes) != 1 or ranks.pop() < 3 or data & set(s.weights):
        return None
    rank = s.types[next(iter(data))].rank
    for node in s.nodes:  # parameters of element-wise ops broadcast over N and the spatial dims
        for i in node.inputs:
            if node.op in ELEMENTWISE and i not in data:
                t = (1,) * (rank - s.types[i].rank) + s.types[i].shape
                if t[0] != 1 or any(n != 1 for n in t[2:]):
                    return None
    (frame,) = shapes
    return frame[:1] + (0,) + frame[1:], data


def _frame_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:1] + shape[2:]


def _common_dilation(s: Graph) -> tuple[int, ...]:
    dilations = {n.attrs["dilation"] for n in s.nodes if n.op is Op.CONV}
    return dilations.pop() if len(dilations) == 1 else (1,) * 8


def _layout(s: Graph, data: set[str], moves: tuple[Move, ...]) -> Graph | None:
    parity = {m.src: m.factor for m in moves if m.src == m.dst}
    b = GraphBuilder(f"{s.name}_layout")
    env = _sources(b, s)
    laid: dict[str, Tensor] = {}  # value -> the value in the layout

    def realised(v: str):
        shape = s.types[v].shape
        r = realise(tuple(n + p for n, p in zip(shape, padding(shape, moves))), moves)
        if r is None:
            raise Unfit(f"{_describe(moves)} does not fit {list(shape)}")
        return r

    def into(v: str) -> Tensor:
        if v not in laid:
            t, pad = env[v], padding(s.types[v].shape, moves)
            if any(pad):
                t = b.pad(t, pads=(0,) * len(pad) + pad)
            laid[v] = apply(realised(v), t)
        return laid[v]

    for node in s.nodes:
        attrs = dict(node.attrs)
        if parity and node.op is not Op.CONV:
            if node.op is Op.AVGPOOL:
                return None  # a pool over parity classes has no regular counterpart
        elif parity:
            attrs = _undilated(attrs, parity)
            if attrs is None:
                return None
        ins = [into(i) if i in data else env[i] if i else None for i in node.inputs]
        laid[node.outputs[0]] = y = b.op(node.op, *ins, **attrs)
        if y.shape != realised(node.outputs[0]).shape:
            raise Unfit(f"{node.op.value} does not keep the layout")
    outs = []
    for o in s.outputs:
        back = undo(realised(o), into(o))
        shape = s.types[o].shape
        if back.shape != shape:
            back = b.slice(back, starts=(0,) * len(shape), ends=shape)
        outs.append(back)
    return b.build(*outs)


def _undilated(attrs: dict, parity: dict[int, int]) -> dict | None:
    """A conv's attributes with dilation D -> 1 and padding p -> p/D along the parity-reordered
    dims (D their factor); None when a dim's dilation is not its factor."""
    nsp = len(attrs["dilation"])
    dil, pad = list(attrs["dilation"]), list(attrs["padding"])
    for d, f in parity.items():
        i = d - 2
        if dil[i] != f or pad[i] % f or pad[nsp + i] % f:
            return None
        dil[i], pad[i], pad[nsp + i] = 1, pad[i] // f, pad[nsp + i] // f
    return dict(attrs, dilation=tuple(dil), padding=tuple(pad))


def _sources(b: GraphBuilder, s: Graph) -> dict[str, Tensor]:
    env = {x: b.input(x, s.types[x].shape, s.types[x].dtype) for x in s.inputs}
    env.update({w: b.weight(w, np.asarray(a)) for w, a in s.weights.items()})
    return env


# -- substitutions -----------------------------------------------------------------------------------

def _substitutions(s: Graph) -> list:
    if len(s.nodes) != 1:
        return []
    (node,) = s.nodes
    out = []
    if node.op is Op.AVGPOOL and not node.attrs["ceil_mode"]:
        out.append(("substitution", "average pool -> depthwise conv of 1/(kh*kw)", lambda: _pool_as_conv(s, node)))
    if node.op is Op.CONV and 1 < node.attrs["groups"] <= MAX_GROUPS:
        out.append(("substitution", "grouped conv -> conv on the block-diagonal weight",
                    lambda: _ungrouped(s, node)))
    return out


def _pool_as_conv(s: Graph, node: Node) -> Graph:
    b = GraphBuilder(f"{s.name}_as_conv")
    env = _sources(b, s)
    x, a = env[node.inputs[0]], node.attrs
    kernel = np.full((x.shape[1], 1) + tuple(a["kernel"]), 1 / prod(a["kernel"]), dtype=x.dtype)
    return b.build(b.conv(x, b.weight("pool_kernel", kernel), stride=a["stride"], padding=a["padding"],
                          groups=x.shape[1]))


def _ungrouped(s: Graph, node: Node) -> Graph:
    b = GraphBuilder(f"{s.name}_ungrouped")
    env = _sources(b, s)
    x, w = env[node.inputs[0]], env[node.inputs[1]]
    g, (f, cg), rank = node.attrs["groups"], w.shape[:2], len(w.shape)
    blocks = []
    for i in range(g):
        part = b.slice(w, starts=(i * f // g,) + (0,) * (rank - 1), ends=((i + 1) * f // g,) + w.shape[1:])
        pads = [0] * (2 * rank)
        pads[1], pads[rank + 1] = i * cg, (g - 1 - i) * cg
        blocks.append(b.pad(part, pads=tuple(pads)))
    bias = env[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    return b.build(b.conv(x, b.concat(*blocks, axis=0), bias, **dict(node.attrs, groups=1)))


# -- groups of independent ops -------------------------------------------------------------------------

def _groups(s: Graph) -> list:
    ops = {n.op for n in s.nodes}
    chained = any(s.producer(i) is not None for n in s.nodes for i in n.inputs if i)
    if len(s.nodes) < 2 or len(ops) != 1 or len(s.outputs) != len(s.nodes) or chained:
        return []
    if ops == {Op.CONV}:
        return [("group", f"{len(s.nodes)} convs -> one grouped conv", lambda: _grouped_convs(s))]
    if ops == {Op.MATMUL}:
        return [("group", f"{len(s.nodes)} matmuls -> one batched matmul", lambda: _batched_matmuls(s))]
    return []


def _grouped_convs(s: Graph) -> Graph | None:
    nodes = [s.producer(o) for o in s.outputs]
    first = nodes[0].attrs
    if any(n.attrs["groups"] != 1 or (len(n.inputs) > 2 and n.inputs[2]) for n in nodes):
        return None
    if any((n.attrs["stride"], n.attrs["dilation"]) != (first["stride"], first["dilation"]) for n in nodes):
        return None
    xs = {s.types[n.inputs[0]].shape for n in nodes}
    ws = [s.types[n.inputs[1]].shape for n in nodes]
    kernel = tuple(max(w[2 + i] for w in ws) for i in range(len(ws[0]) - 2))
    nsp, fmax = len(kernel), max(w[0] for w in ws)
    grow = [tuple(k - w[2 + i] for i, k in enumerate(kernel)) for w in ws]
    if len(xs) != 1 or any(d % 2 for g in grow for d in g) or (any(map(any, grow)) and set(first["dilation"]) != {1}):
        return None
    pads = {tuple(p + g[i % nsp] // 2 for i, p in enumerate(n.attrs["padding"])) for n, g in zip(nodes, grow)}
    if len(pads) != 1:
        return None
    b = GraphBuilder(f"{s.name}_grouped")
    env = _sources(b, s)
    parts, sizes, keep = [], [], []
    for n, w, g in zip(nodes, ws, grow):
        half = tuple(d // 2 for d in g)
        pad = (0, 0) + half + (fmax - w[0], 0) + half
        parts.append(b.pad(env[n.inputs[1]], pads=pad) if any(pad) else env[n.inputs[1]])
        keep.append(len(sizes))
        sizes += [w[0]] + ([fmax - w[0]] if fmax > w[0] else [])
    y = b.conv(b.concat(*[env[n.inputs[0]] for n in nodes], axis=1), b.concat(*parts, axis=0),
               stride=first["stride"], dilation=first["dilation"], padding=pads.pop(), groups=len(nodes))
    pieces = b.split(y, axis=1, sizes=tuple(sizes))
    return b.build(*[pieces[k] for k in keep])


def _batched_matmuls(s: Graph) -> Graph | None:
    nodes = [s.producer(o) for o in s.outputs]
    shapes = {(s.types[n.inputs[0]].shape, s.types[n.inputs[1]].shape) for n in nodes}
    if len(shapes) != 1 or any(len(t) != 2 for t in shapes.pop()):
        return None
    b = GraphBuilder(f"{s.name}_batched")
    env = _sources(b, s)

    def stacked(slot: int) -> Tensor:
        return b.concat(*[b.reshape(env[n.inputs[slot]], shape=(1,) + env[n.inputs[slot]].shape)
                          for n in nodes], axis=0)

    y = b.batchmatmul(stacked(0), stacked(1))
    pieces = b.split(y, axis=0, sizes=(1,) * len(nodes))
    return b.build(*[b.reshape(p, shape=p.shape[1:]) for p in pieces])
