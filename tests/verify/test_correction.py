import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import einsat
from einsat.ir import Graph, GraphBuilder, Node, Op
from einsat.testing.strategies import multilinear_programs, programs
from einsat.verify import Region, correct, find_differences, restrict
from einsat.verify.numeric import equivalent


@st.composite
def program_and_region(draw, strategy):
    g = draw(strategy)
    out = draw(st.sampled_from(g.outputs))
    shape = g.types[out].shape
    starts = [draw(st.integers(0, n - 1)) for n in shape]
    ends = [draw(st.integers(s + 1, n)) for s, n in zip(starts, shape)]
    return g, out, Region(starts, ends)


def sliced(g: Graph, out: str, region: Region) -> Graph:
    """The whole program, then a slice: the reference for a restriction."""
    node = Node(Op.SLICE, [out], ["whole_sliced"], {"starts": region.starts, "ends": region.ends,
                                                     "steps": region.steps})
    return Graph(list(g.nodes) + [node], g.input_types(), ["whole_sliced"], g.weights, g.name)


@given(program_and_region(programs(max_nodes=5)))
def test_a_restriction_computes_the_region_numerically(case):
    g, out, region = case
    assert equivalent(sliced(g, out, region), restrict(g, out, region))


@st.composite
def program_and_strided_region(draw, strategy):
    g, out, region = draw(program_and_region(strategy))
    steps = [draw(st.integers(1, 3)) for _ in region.starts]
    return g, out, Region(region.starts, region.ends, steps)


@given(program_and_strided_region(multilinear_programs(max_nodes=5)))
def test_a_strided_restriction_computes_every_step_th_position_exactly(case):
    g, out, region = case
    assert find_differences(sliced(g, out, region), restrict(g, out, region)).equivalent


def test_a_dilated_conv_on_every_other_row_is_a_regular_conv_on_the_rows_it_reads():
    """Rows 0, 2, 4, ... of a dilation-2 conv read only even input rows: one regular conv."""
    b = GraphBuilder("dilated")
    x = b.input("x", (1, 2, 10, 9))
    g = b.build(b.conv(x, b.weight("w", (3, 2, 3, 3)), dilation=2, padding=2, name="y"))
    region = Region((0, 0, 0, 0), (1, 3, 10, 9), (1, 1, 2, 1))
    r = restrict(g, "y", region)
    (conv,) = [n for n in r.nodes if n.op is Op.CONV]
    assert conv.attrs["dilation"] == (1, 2) and conv.attrs["stride"] == (1, 1)
    assert r.types[conv.inputs[0]].shape[2] == 5  # the even rows
    assert find_differences(sliced(g, "y", region), r).equivalent
    assert equivalent(sliced(g, "y", region), r)


@given(program_and_region(multilinear_programs(max_nodes=5)))
def test_a_restriction_computes_the_region_exactly_over_the_field(case):
    g, out, region = case
    assert find_differences(sliced(g, out, region), restrict(g, out, region)).equivalent


def test_a_conv_region_reads_only_its_window_rows_with_the_padding_adjusted():
    b = GraphBuilder("conv")
    x = b.input("x", (1, 2, 8, 8))
    g = b.build(b.conv(x, b.weight("w", (3, 2, 3, 3)), padding=1, name="y"))
    r = restrict(g, "y", Region((0, 1, 0, 2), (1, 2, 1, 5)))  # filter 1, top row, columns 2..4
    conv = next(n for n in r.nodes if n.op is Op.CONV)
    xs = r.types[conv.inputs[0]].shape
    assert xs == (1, 2, 2, 5)                       # rows 0..1, columns 1..5 of the input
    assert conv.attrs["padding"] == (1, 0, 0, 0)    # only the top padding is left
    assert r.types[conv.inputs[1]].shape == (1, 2, 3, 3)
    assert r.flops() < g.flops() / 10


def test_concat_and_split_regions_read_only_the_pieces_they_overlap():
    b = GraphBuilder("pieces")
    x, y = b.input("x", (2, 3)), b.input("y", (4, 3))
    c = b.concat(b.relu(x), b.relu(y), axis=0, name="c")
    g = b.build(c)
    r = restrict(g, "c", Region((3, 0), (5, 2)))    # inside y's part only
    assert [n.op for n in r.nodes if n.op is not Op.IDENTITY] == [Op.SLICE, Op.RELU]
    xs = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2, "y": np.arange(12, dtype=np.float32).reshape(4, 3) - 5}
    np.testing.assert_array_equal(einsat.run(r, xs)[r.outputs[0]], einsat.run(g, xs)["c"][3:5, 0:2])


def test_correct_keeps_the_mutant_interface_and_shares_its_weights():
    b = GraphBuilder("orig")
    x = b.input("x", (1, 2, 4, 4))
    w = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32)
    original = b.build(b.conv(x, b.weight("w", w), padding=1))
    b = GraphBuilder("mut")
    x = b.input("x", (1, 2, 4, 4))
    mutant = b.build(b.pad(b.conv(x, b.weight("w", w), padding=(0, 1, 1, 1)), pads=(0, 0, 1, 0, 0, 0, 0, 0)),
                     names=["out"])
    fixed = correct(original, mutant)
    assert fixed.outputs == ("out",) and fixed.input_types() == mutant.input_types()
    assert set(fixed.weights) == {"w"}             # the fix reuses the mutant's copy of w
    assert [n.op for n in fixed.nodes].count(Op.CORRECT) == 1
    assert equivalent(original, fixed)


def test_a_region_behind_a_reshape_is_assembled_from_pieces_of_the_input():
    """PET Figure 1's output layout: the seam columns of image pairs placed side by side. The
    region is no box of the conv's output, so it is cut into boxes of it: every other image, one
    column (a strided box: one conv each), never the whole conv sliced."""
    n, c, h, w, f = 6, 3, 5, 6, 4
    b = GraphBuilder("pairs")
    x = b.input("x", (n, c, h, w))
    y = b.conv(x, b.weight("w", (f, c, 3, 3)), padding=1)
    wide = b.reshape(b.transpose(b.reshape(y, shape=(n // 2, 2, f, h, w)), perm=(0, 2, 3, 1, 4)),
                     shape=(n // 2, f, h, 2 * w), name="wide")
    g = b.build(wide)
    region = Region((0, 0, 0, w - 1), (n // 2, f, h, w + 1))
    r = restrict(g, "wide", region)
    convs = [node for node in r.nodes if node.op is Op.CONV]
    assert len(convs) == 2 and all(r.types[node.outputs[0]].shape == (n // 2, f, h, 1) for node in convs)
    assert r.flops() <= g.flops() * 2 / w
    assert equivalent(sliced(g, "wide", region), r)
    assert find_differences(sliced(g, "wide", region), r).equivalent


def test_a_reshape_region_that_needs_too_many_pieces_is_computed_whole():
    b = GraphBuilder("flat")
    x = b.input("x", (80, 2))
    g = b.build(b.reshape(b.relu(x), shape=(2, 80), name="y"))
    r = restrict(g, "y", Region((0, 1), (2, 79)))  # rows of 78 elements: 2 x 78 column pieces
    assert [n.op for n in r.nodes].count(Op.RELU) == 1 and r.types[r.nodes[0].outputs[0]].shape == (80, 2)
    assert equivalent(sliced(g, "y", Region((0, 1), (2, 79))), r)
