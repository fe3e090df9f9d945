import numpy as np

from einsat.ir import GraphBuilder
from einsat.testing.mutants import batch_to_width
from einsat.verify import boxes
from einsat.verify.splits import axis_splits, box_ids, cells, count_cells, none, reshape_splits, uniform_splits


def conv_graph(shape, k=3, **attrs):
    b = GraphBuilder("conv")
    x = b.input("x", shape)
    return b.build(b.conv(x, b.weight("w", (4, shape[1], k, k)), name="y", **attrs))


def test_a_padded_3x3_conv_has_the_nine_boxes_of_figure_4():
    g = conv_graph((2, 3, 6, 7), padding=1)
    s = boxes.propagate(g, {"w": none((4, 3, 3, 3))})["y"]
    assert s == ((), (), (1, 5), (1, 6))
    lo, hi = cells(s, (2, 4, 6, 7))
    assert len(lo) == 9 == count_cells(s)
    assert {(a[2], b[2]) for a, b in zip(lo, hi)} == {(0, 1), (1, 5), (5, 6)}


def test_strides_dilation_and_uneven_padding_move_the_seams():
    g = conv_graph((1, 2, 9, 9), padding=(2, 0, 0, 2), stride=2, dilation=(2, 1))
    s = boxes.propagate(g, {"w": none((4, 2, 3, 3))})["y"]
    # rows: out o reads 2o-2, 2o, 2o+2: o=0 reads padding at 2o-2; the last row reads row 8 (inside)
    assert s[2] == (1,)
    # columns: out o reads 2o..2o+2 of 9 + 2 end padding: only the last output (o=4) reaches column 9
    assert s[3] == (4,)


def test_figure_5_box_propagation_of_figure_1():
    n, c, h, w = 4, 2, 5, 6
    g = batch_to_width(n, c, h, w, np.random.default_rng(0).standard_normal((3, c, 3, 3)).astype(np.float32), 0)
    s = boxes.propagate(g, {"w": none((3, c, 3, 3))})
    side_by_side = next(nd for nd in g.nodes if nd.op.value == "conv")
    assert s[side_by_side.inputs[0]] == ((), (), (), (w,))            # the seam between the two images
    assert s[side_by_side.outputs[0]] == ((), (), (1, h - 1), (1, w - 1, w, w + 1, 2 * w - 1))
    assert s[g.outputs[0]] == ((1, 2, 3), (), (1, h - 1), (1, w - 1))  # back to [N, F, H, W]


def test_reshape_splits():
    # merging (2, W): every block of the inner dim; splitting it back: the seam
    assert reshape_splits((2, 5), (10,), ((), (2,))) == ((2, 5, 7),)
    assert reshape_splits((10,), (2, 5), ((2, 5, 7),)) == ((1,), (2,))
    # a split point inside an inner block splits the outer dim on both sides of it
    assert reshape_splits((12,), (3, 4), ((6,),)) == ((1, 2), (2,))
    assert reshape_splits((12,), (3, 4), ((8,),)) == ((2,), ())
    # size-1 dims carry nothing; an identity regrouping keeps the splits
    assert reshape_splits((1, 6, 1), (6,), ((), (2, 4), ())) == ((2, 4),)
    assert reshape_splits((2, 3, 4), (6, 4), ((), (), (1,))) == ((3,), (1,))
    # dims that do not line up ([2, 3] read as [3, 2]): every position is its own box
    assert reshape_splits((2, 3), (3, 2), ((), ())) == ((1, 2), (1,))


def test_uniform_splits_of_constants():
    assert uniform_splits(np.zeros((3, 4))) == ((), ())
    delta = np.zeros((3, 4))
    delta[1, 2] = 5.0
    assert uniform_splits(delta) == ((1, 2), (2, 3))
    assert uniform_splits(np.arange(4.0)) == ((1, 2, 3),)


def test_axis_splits_of_position_maps():
    # a stride-2 slice starting at 1 reads across the input split at 4 between outputs 1 and 2
    idx = 1 + 2 * np.arange(4)
    assert axis_splits(idx, box_ids(idx, (4,), 8)) == {2}
    # a reflect pad: the positions turn around at the edge (the first run keeps the turning point)
    idx = np.array([2, 1, 0, 1, 2, 3])
    assert axis_splits(idx, box_ids(idx, (), 4)) == {3}
    # padding reads (-1) form their own run
    idx = np.array([-1, 0, 1, 2, -1])
    assert axis_splits(idx, box_ids(idx, (), 3)) == {1, 4}


def test_concat_split_and_correct_seams():
    b = GraphBuilder("seams")
    x, y = b.input("x", (4, 3)), b.input("y", (2, 3))
    c = b.concat(x, y, axis=0, name="c")
    p0, p1 = b.split(c, axis=0, sizes=(3, 3), name="parts")
    fix = b.slice(c, starts=(0, 0), ends=(1, 2))
    r = b.correct(c, fix, region=(2, 1, 3, 3), name="r")
    g = b.build(p0, p1, r)
    s = boxes.propagate(g, {})
    assert s["c"] == ((4,), ())
    assert s["parts_0"] == ((), ()) and s["parts_1"] == ((1,), ())
    assert s["r"] == ((2, 3, 4), (1,))


def test_a_changed_weight_element_splits_the_output_channel():
    g = conv_graph((1, 2, 5, 5), padding=1)
    delta = np.zeros((4, 2, 3, 3))
    delta[2, 1, 0, 0] = 1.0
    s = boxes.propagate(g, {"w": uniform_splits(delta)})["y"]
    assert s[1] == (2, 3)
