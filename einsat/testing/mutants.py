"""`mutant_pairs()`: multi-linear programs, mutants of them, and where exactly they differ.

Each family builds an (original, mutant) pair whose differing output regions are known from the
construction, not computed by the verifier (the corrector is tested against them):

  sound           a random MLTP vs itself wrapped in an inverse layout pair (transpose there and
                  back, flatten and reshape back, pad and slice off, concat with itself and split):
                  no region differs
  output_region   one output box shifted by 1 (an output element when the box has size 1)
  weight_element  a conv whose weight has one element changed: the output channel of that filter,
                  at the positions whose window reads the changed tap inside the input
  padding         a conv with one padding amount one smaller, the output padded back with zeros:
                  the row or column on that side (when its window reads the input at all)
  batch_to_width  PET Figure 1: pairs of images concatenated along the width by reshape/transpose,
                  one "same" conv, and back: the columns at the seam of each pair
  dilated_seams   PET Figure 3: a dilated conv as a regular conv on the input reordered by parity
                  (even rows and columns first): the rows and columns next to the parity seams
  fused_groups    PET Figure 10(a): two convs with different output channels as one grouped conv
                  on the zero-padded weight, split back: no region differs
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from einsat.ir.builder import GraphBuilder
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op
from einsat.verify.regions import Region, mask_of

FAMILIES = ("sound", "output_region", "weight_element", "padding", "batch_to_width", "dilated_seams",
            "fused_groups")


@dataclass(frozen=True)
class MutantPair:
    """`regions[o]` lists the boxes of the original's output `o` where the mutant differs."""

    original: Graph
    mutant: Graph
    regions: dict[str, list[Region]] = field(default_factory=dict)
    family: str = ""

    def mask(self, output: str) -> np.ndarray:
        return mask_of(self.regions.get(output, []), self.original.types[output].shape)


def _wrap(g: Graph, nodes: list[Node], k: int, new_out: str, weights=None) -> Graph:
    outs = list(g.outputs)
    outs[k] = new_out
    return Graph(list(g.nodes) + nodes, g.input_types(), outs, {**g.weights, **(weights or {})}, g.name + "_mutant")


@st.composite
def _sound(draw, programs):
    g = draw(programs)
    k = draw(st.integers(0, len(g.outputs) - 1))
    o = g.outputs[k]
    shape = g.types[o].shape
    kind = draw(st.sampled_from(["transpose", "flatten", "pad", "concat"] if shape else ["transpose", "pad"]))
    if kind == "transpose":
        perm = tuple(draw(st.permutations(range(len(shape)))))
        inv = tuple(int(i) for i in np.argsort(perm))
        nodes = [Node(Op.TRANSPOSE, [o], ["s/t"], {"perm": perm}),
                 Node(Op.TRANSPOSE, ["s/t"], ["s/out"], {"perm": inv})]
    elif kind == "flatten":
        nodes = [Node(Op.RESHAPE, [o], ["s/t"], {"shape": (-1,)}),
                 Node(Op.RESHAPE, ["s/t"], ["s/out"], {"shape": shape})]
    elif kind == "pad":
        pads = tuple(draw(st.integers(0, 2)) for _ in range(2 * len(shape)))
        r = len(shape)
        nodes = [Node(Op.PAD, [o], ["s/t"], {"pads": pads}),
                 Node(Op.SLICE, ["s/t"], ["s/out"], {"starts": pads[:r],
                                                     "ends": tuple(p + n for p, n in zip(pads, shape))})]
    else:
        axis = draw(st.integers(0, len(shape) - 1))
        nodes = [Node(Op.CONCAT, [o, o], ["s/t"], {"axis": axis}),
                 Node(Op.SPLIT, ["s/t"], ["s/out", "s/rest"], {"axis": axis, "sizes": (shape[axis], shape[axis])})]
    return MutantPair(g, _wrap(g, nodes, k, "s/out"), {o: [] for o in g.outputs}, "sound")


@st.composite
def _region(draw, shape):
    starts = [draw(st.integers(0, n - 1)) for n in shape]
    ends = [draw(st.integers(s + 1, n)) for s, n in zip(starts, shape)]
    return Region(starts, ends)


@st.composite
def _output_region(draw, programs):
    g = draw(programs)
    k = draw(st.integers(0, len(g.outputs) - 1))
    o = g.outputs[k]
    r = draw(_region(g.types[o].shape))
    ones = {"c/ones": np.ones(r.shape, dtype=g.types[o].dtype)}
    nodes = [Node(Op.SLICE, [o], ["c/part"], {"starts": r.starts, "ends": r.ends}),
             Node(Op.ADD, ["c/part", "c/ones"], ["c/fix"]),
             Node(Op.CORRECT, [o, "c/fix"], ["c/out"], {"region": r.attr})]
    regions = {x: [] for x in g.outputs}
    regions[o] = [r]
    return MutantPair(g, _wrap(g, nodes, k, "c/out", ones), regions, "output_region")


@st.composite
def _conv_setup(draw, max_side=6):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    h, w = draw(st.integers(2, max_side)), draw(st.integers(2, max_side))
    groups = draw(st.sampled_from([d for d in (1, 2, 3) if c % d == 0]))
    f = groups * draw(st.integers(1, 2))
    k = draw(st.sampled_from([1, 2, 3]))
    seed = draw(st.integers(0, 2**16))
    return n, c, h, w, groups, f, k, seed


def _conv_graph(name, x_shape, weight, seed, **attrs):
    b = GraphBuilder(name, seed=seed)
    x = b.input("x", x_shape)
    return b.build(b.conv(x, b.weight("w", weight), **attrs))


def _taps_inside(lo: int, hi: int, size: int, stride: int, pad: int, tap_offset: int) -> tuple[int, int]:
    """Output rows o in [lo, hi) whose tap at `tap_offset` reads row o·stride − pad + tap_offset
    inside [0, size): an interval."""
    rows = [o for o in range(lo, hi) if 0 <= o * stride - pad + tap_offset < size]
    return (rows[0], rows[-1] + 1) if rows else (0, 0)


@st.composite
def _weight_element(draw):
    n, c, h, w, groups, f, k, seed = draw(_conv_setup())
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), 1)
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    span = (dil[0] * (k - 1) + 1, k)
    if h + pad[0] + pad[2] < span[0] or w + pad[1] + pad[3] < span[1]:
        pad = (span[0], span[1], span[0], span[1])
    weight = np.random.default_rng(seed).standard_normal((f, c // groups, k, k)).astype(np.float32)
    attrs = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    original = _conv_graph("conv", (n, c, h, w), weight, seed, **attrs)
    idx = tuple(draw(st.integers(0, d - 1)) for d in weight.shape)
    changed = weight.copy()
    changed[idx] += 1.0
    mutant = _conv_graph("conv_changed_weight", (n, c, h, w), changed, seed, **attrs)
    o = original.outputs[0]
    _, _, ho, wo = original.types[o].shape
    r0, r1 = _taps_inside(0, ho, h, stride[0], pad[0], idx[2] * dil[0])
    c0, c1 = _taps_inside(0, wo, w, stride[1], pad[1], idx[3] * dil[1])
    region = [Region((0, idx[0], r0, c0), (n, idx[0] + 1, r1, c1))] if r1 > r0 and c1 > c0 else []
    return MutantPair(original, mutant, {o: region}, "weight_element")


@st.composite
def _padding(draw):
    n, c, h, w, groups, f, k, seed = draw(_conv_setup())
    side = draw(st.integers(0, 3))               # top, left, bottom, right (ONNX pads order)
    pad = [draw(st.integers(0, 2)) for _ in range(4)]
    pad[side] = max(pad[side], 1)
    weight = np.random.default_rng(seed).standard_normal((f, c // groups, k, k)).astype(np.float32)
    for d, size in ((0, h), (1, w)):  # the conv must still fit with one padding less
        pad[d] += max(0, k + (side % 2 == d) - size - pad[d] - pad[d + 2])
    original = _conv_graph("conv", (n, c, h, w), weight, seed, padding=tuple(pad), groups=groups)
    less = list(pad)
    less[side] -= 1
    b = GraphBuilder("conv_less_padding", seed=seed)
    x = b.input("x", (n, c, h, w))
    y = b.conv(x, b.weight("w", weight), padding=tuple(less), groups=groups)
    back = [0] * 8
    back[2 + (side % 2) + 4 * (side // 2)] = 1
    mutant = b.build(b.pad(y, pads=tuple(back)))
    o = original.outputs[0]
    shape = original.types[o].shape
    # the wrong row (or column) on that side, where its windows read any of the input
    rows = _reading(shape[2], h, pad[0], k)
    cols = _reading(shape[3], w, pad[1], k)
    dim = 2 + side % 2
    line = 0 if side < 2 else shape[dim] - 1
    lo, hi = [0, 0, rows[0], cols[0]], [n, f, rows[1], cols[1]]
    lo[dim], hi[dim] = max(lo[dim], line), min(hi[dim], line + 1)
    ok = all(a < b for a, b in zip(lo, hi))
    return MutantPair(original, mutant, {o: [Region(lo, hi)] if ok else []}, "padding")


def _reading(out: int, size: int, pad: int, k: int) -> tuple[int, int]:
    """The output positions (an interval) whose stride-1 window of k reads inside [0, size)."""
    rows = [o for o in range(out) if any(0 <= o - pad + t < size for t in range(k))]
    return (rows[0], rows[-1] + 1) if rows else (0, 0)


def batch_to_width(n, c, h, w, weight, seed, name="batch_to_width") -> Graph:
    """PET Figure 1's mutant: images 2i and 2i+1 side by side along the width, one conv, back."""
    f, k = weight.shape[0], weight.shape[2]
    b = GraphBuilder(name, seed=seed)
    x = b.input("x", (n, c, h, w))
    t = b.reshape(b.transpose(b.reshape(x, shape=(n // 2, 2, c, h, w)), perm=(0, 2, 3, 1, 4)),
                  shape=(n // 2, c, h, 2 * w))
    y = b.conv(t, b.weight("w", weight), padding=(k - 1) // 2)
    y = b.reshape(b.transpose(b.reshape(y, shape=(n // 2, f, h, 2, w)), perm=(0, 3, 1, 2, 4)), shape=(n, f, h, w))
    return b.build(y)


@st.composite
def _batch_to_width(draw):
    n = 2 * draw(st.integers(1, 2))
    c, f = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 5)), draw(st.integers(2, 6))
    k = draw(st.sampled_from([1, 3]))
    seed = draw(st.integers(0, 2**16))
    weight = np.random.default_rng(seed).standard_normal((f, c, k, k)).astype(np.float32)
    original = _conv_graph("conv", (n, c, h, w), weight, seed, padding=(k - 1) // 2)
    p = (k - 1) // 2
    regions = []
    for i in range(n):
        lo, hi = (w - p, w) if i % 2 == 0 else (0, p)
        if hi > lo:
            regions.append(Region((i, 0, 0, lo), (i + 1, f, h, hi)))
    return MutantPair(original, batch_to_width(n, c, h, w, weight, seed), {original.outputs[0]: regions},
                      "batch_to_width")


def dilated_as_regular(n, c, h, w, weight, seed, name="dilated_as_regular") -> Graph:
    """PET Figure 3's mutant: rows and columns reordered by parity, a regular 3x3 conv, back."""
    f = weight.shape[0]
    b = GraphBuilder(name, seed=seed)
    x = b.input("x", (n, c, h, w))
    t = b.transpose(b.reshape(x, shape=(n, c, h // 2, 2, w // 2, 2)), perm=(0, 1, 3, 2, 5, 4))
    y = b.conv(b.reshape(t, shape=(n, c, h, w)), b.weight("w", weight), padding=1)
    y = b.transpose(b.reshape(y, shape=(n, f, 2, h // 2, 2, w // 2)), perm=(0, 1, 3, 2, 5, 4))
    return b.build(b.reshape(y, shape=(n, f, h, w)))


@st.composite
def _dilated_seams(draw):
    n, c, f = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h, w = 2 * draw(st.integers(1, 3)), 2 * draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    weight = np.random.default_rng(seed).standard_normal((f, c, 3, 3)).astype(np.float32)
    original = _conv_graph("dilated_conv", (n, c, h, w), weight, seed, dilation=2, padding=2)
    regions = [Region((0, 0, r, 0), (n, f, r + 1, w)) for r in sorted({1, h - 2})]
    regions += [Region((0, 0, 0, q), (n, f, h, q + 1)) for q in sorted({1, w - 2})]
    return MutantPair(original, dilated_as_regular(n, c, h, w, weight, seed), {original.outputs[0]: regions},
                      "dilated_seams")


def fused_groups(x_shape, w1, w2, seed, name="fused_groups") -> Graph:
    """PET Figure 10(a)'s mutant: conv(x, w1) and conv(x, w2) (fewer filters) as one grouped conv
    on concat(x, x) with w2 zero-padded to w1's filter count, split back."""
    f1, f2 = w1.shape[0], w2.shape[0]
    b = GraphBuilder(name, seed=seed)
    x = b.input("x", x_shape)
    w2p = b.pad(b.weight("w2", w2), pads=(0, 0, 0, 0, f1 - f2, 0, 0, 0))
    wc = b.concat(b.weight("w1", w1), w2p, axis=0)
    k = w1.shape[2]
    y = b.conv(b.concat(x, x, axis=1), wc, groups=2, padding=(k - 1) // 2)
    sizes = (f1, f2) + ((f1 - f2,) if f1 > f2 else ())
    parts = b.split(y, axis=1, sizes=sizes)
    return b.build(parts[0], parts[1])


@st.composite
def _fused_groups(draw):
    n, c, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    f2 = draw(st.integers(1, 3))
    f1 = f2 + draw(st.integers(0, 2))
    k = draw(st.sampled_from([1, 3]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((f1, c, k, k)).astype(np.float32)
    w2 = rng.standard_normal((f2, c, k, k)).astype(np.float32)
    b = GraphBuilder("two_convs", seed=seed)
    x = b.input("x", (n, c, h, w))
    original = b.build(b.conv(x, b.weight("w1", w1), padding=(k - 1) // 2),
                       b.conv(x, b.weight("w2", w2), padding=(k - 1) // 2))
    return MutantPair(original, fused_groups((n, c, h, w), w1, w2, seed),
                      {o: [] for o in original.outputs}, "fused_groups")


def mutant_pairs(families=FAMILIES, programs=None) -> st.SearchStrategy:
    """(original, mutant, regions) from the named `families` (see the module docstring); the
    program-based families draw their originals from `programs` (default: small MLTPs)."""
    if programs is None:
        from einsat.testing.programs import multilinear_programs
        programs = multilinear_programs(max_nodes=3, max_side=4)
    makers = {"sound": lambda: _sound(programs), "output_region": lambda: _output_region(programs),
              "weight_element": _weight_element, "padding": _padding, "batch_to_width": _batch_to_width,
              "dilated_seams": _dilated_seams, "fused_groups": _fused_groups}
    unknown = set(families) - set(makers)
    if unknown:
        raise ValueError(f"unknown mutant families {sorted(unknown)}; choose from {FAMILIES}")
    return st.one_of([makers[f]() for f in families])
