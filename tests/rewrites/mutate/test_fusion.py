"""Correction fusion: two convs of one weight as one conv over both inputs joined by a zero gap.

Soundness: hypothesis draws pairs of convs (any paddings along the joined axis, dilation, kernel),
both programs run on NumPy and over the field. Goal: PET Figure 1's corrected mutant becomes one
conv (Figure 6); the gap is the least that works.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from einsat import GraphBuilder, Op
from einsat.rewrites.mutate.admit import admit
from einsat.rewrites.mutate.fusion import fuse
from einsat.testing.egraphs import same_outputs
from einsat.testing.mutants import batch_to_width
from einsat.verify import find_differences


@st.composite
def conv_pairs(draw):
    axis = draw(st.sampled_from([0, 2, 3]))
    n, c, f = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    k, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    span = d * (k - 1) + 1
    shape = [n, c, draw(st.integers(span, 6)), draw(st.integers(span, 6))]
    pads = [draw(st.integers(0, span - 1)) for _ in range(4)]
    other = list(shape)
    other[axis] = draw(st.integers(span if axis else 1, 6))
    pads_b = list(pads)
    if axis:  # the paddings along the joined axis may differ
        i = axis - 2
        pads_b[i], pads_b[2 + i] = draw(st.integers(0, span - 1)), draw(st.integers(0, span - 1))
    b = GraphBuilder("pair", seed=draw(st.integers(0, 99)))
    w = b.weight("w", (f, c, k, k))
    ya = b.conv(b.input("a", tuple(shape)), w, padding=tuple(pads), dilation=d)
    yb = b.conv(b.input("b", tuple(other)), w, padding=tuple(pads_b), dilation=d)
    return b.build(ya, yb), axis


@given(conv_pairs())
def test_two_convs_of_one_weight_are_one_conv_over_both_inputs(case):
    g, axis = case
    fused = fuse(g)
    (conv,) = [n for n in fused.nodes if n.op is Op.CONV]
    (cat,) = [n.attrs["axis"] for n in fused.nodes if n.op is Op.CONCAT]
    assert cat in (axis, 0)  # stacked in the batch when nothing else differs
    same_outputs(g, fused, rtol=1e-5, atol=1e-5)
    assert find_differences(g, fused).equivalent


def test_convs_that_differ_elsewhere_are_left_alone():
    b = GraphBuilder("apart")
    w = b.weight("w", (2, 2, 3, 3))
    g = b.build(b.conv(b.input("a", (1, 2, 5, 5)), w, padding=1), b.conv(b.input("b", (1, 2, 4, 6)), w, padding=1))
    assert fuse(g) is g  # other extents along both spatial axes
    b = GraphBuilder("chain")
    w = b.weight("w", (2, 2, 3, 3))
    g = b.build(b.conv(b.conv(b.input("a", (1, 2, 5, 5)), w, padding=1), w, padding=1))
    assert fuse(g) is g  # the second reads the first


def test_figure_6_the_fixes_join_the_mutant_conv():
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = GraphBuilder("conv")
    original = b.build(b.conv(b.input("x", (4, 3, 5, 6)), b.weight("w", w), padding=1))
    fixed = admit(original, batch_to_width(4, 3, 5, 6, w, seed=0)).graph
    assert sum(n.op is Op.CONV for n in fixed.nodes) == 3  # the mutant conv and two fix convs
    fused = fuse(fixed)
    (conv,) = [n for n in fused.nodes if n.op is Op.CONV]
    # the pairs of images side by side (12 columns), then 1 zero, 2 seam columns, 1 zero, 2 more
    assert fused.types[conv.inputs[0]].shape == (2, 3, 5, 12 + 1 + 2 + 1 + 2)
    assert find_differences(original, fused).equivalent


def test_the_gap_is_the_least_that_keeps_the_paddings():
    """conv(a) with padding 1 at its end, conv(b) with 1 at its begin: gap 1 is exact, 0 is not."""
    w = np.random.default_rng(1).standard_normal((2, 2, 3, 3)).astype(np.float32)
    b = GraphBuilder("pair")
    a_, b_ = b.input("a", (1, 2, 4, 5)), b.input("b", (1, 2, 4, 6))
    wt = b.weight("w", w)
    g = b.build(b.conv(a_, wt, padding=1), b.conv(b_, wt, padding=1))
    (pad,) = [n for n in fuse(g).nodes if n.op is Op.PAD]
    assert pad.attrs["pads"][3] == 1
    for gap, exact in ((1, True), (0, False)):
        b = GraphBuilder("by_hand")
        a_, b_ = b.input("a", (1, 2, 4, 5)), b.input("b", (1, 2, 4, 6))
        joined = b.concat(a_, b.pad(b_, pads=(0, 0, 0, gap, 0, 0, 0, 0)), axis=3)
        parts = b.split(b.conv(joined, b.weight("w", w), padding=1), axis=3, sizes=(5, gap, 6))
        assert find_differences(g, b.build(parts[0], parts[2])).equivalent == exact
