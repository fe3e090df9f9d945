"""The compound reshape & transpose: a factor of one dimension moved into another, and back."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import einsat
from einsat import GraphBuilder
from einsat.rewrites.mutate.layouts import Move, apply, moves_for, padding, realise, undo
from einsat.testing.mutants import batch_to_width


@st.composite
def shapes_and_moves(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=2, max_size=5)))
    moves, used = [], set()
    for _ in range(draw(st.integers(1, 2))):
        src = draw(st.integers(0, len(shape) - 1))
        factors = [f for f in range(2, shape[src] + 1) if shape[src] % f == 0]
        if src in used or not factors:
            continue
        used.add(src)
        moves.append(Move(src, draw(st.sampled_from(factors)), draw(st.booleans()),
                          draw(st.integers(0, len(shape) - 1)), draw(st.booleans())))
    return shape, tuple(moves)


def run_layout(shape, moves, x):
    r = realise(shape, moves)
    b = GraphBuilder("layout")
    t = b.input("x", shape)
    g = b.build(apply(r, t), undo(r, apply(r, t)))
    return r, einsat.run(g, {"x": x})


@given(shapes_and_moves())
def test_a_layout_keeps_every_element_and_undo_brings_it_back(case):
    shape, moves = case
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    r, out = run_layout(shape, moves, x)
    laid, back = out.values()
    assert laid.shape == r.shape and np.prod(r.shape) == x.size
    assert sorted(laid.reshape(-1)) == sorted(x.reshape(-1))
    np.testing.assert_array_equal(back, x)


def test_figure_1s_layout_puts_images_2i_and_2i_plus_1_side_by_side():
    n, c, h, w = 4, 2, 3, 5
    x = np.random.default_rng(0).standard_normal((n, c, h, w)).astype(np.float32)
    r, out = run_layout((n, c, h, w), (Move(0, 2, True, 3, True),), x)
    laid = next(iter(out.values()))
    assert r.shape == (n // 2, c, h, 2 * w)
    np.testing.assert_array_equal(laid[1, :, :, :w], x[2])
    np.testing.assert_array_equal(laid[1, :, :, w:], x[3])
    # the same layout as the hand-written Figure 1 mutant in einsat.testing.mutants
    mutant = batch_to_width(n, c, h, w, np.ones((1, c, 1, 1), np.float32), seed=0)
    assert r.split in [mutant.types[v].shape for v in mutant.types] and r.perm == (0, 2, 3, 1, 4)


def test_parity_reordering_puts_the_even_rows_first():
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 6, 1)
    _, out = run_layout((1, 1, 6, 1), (Move(2, 2, True, 2, True),), x)
    assert next(iter(out.values())).reshape(-1).tolist() == [0, 2, 4, 1, 3, 5]


def test_a_factor_that_does_not_divide_needs_padding_first():
    assert realise((1, 3, 38, 38), (Move(2, 4, False, 0, False),)) is None
    assert padding((1, 3, 38, 38), (Move(2, 4, False, 0, False), Move(3, 4, False, 0, False))) == (0, 0, 2, 2)
    assert realise((1, 3, 40, 40), (Move(2, 4, False, 0, False), Move(3, 4, False, 0, False))).shape == (16, 3, 10, 10)


def test_the_grammars_layouts_cover_the_papers_cases():
    found = moves_for((8, 16, 14, 14), (1, 1))
    assert (Move(0, 2, True, 3, True),) in found                              # Figure 1
    assert (Move(2, 4, False, 0, False), Move(3, 4, False, 0, False)) in found  # §8.3.1
    assert (Move(2, 2, True, 2, True), Move(3, 2, True, 3, True)) in moves_for((1, 8, 14, 14), (2, 2))  # Figure 3
    assert not any(m.src == m.dst for ms in found for m in ms)  # parity only for dilated convs
    assert moves_for((8, 16, 14, 14), (1, 1)) == found  # a fixed order
