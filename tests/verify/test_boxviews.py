"""Digit views of box grids: reshapes and transposes keep strided boxes whole, soundly."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from einsat.ir import GraphBuilder
from einsat.testing.mutants import dilated_as_regular
from einsat.verify import boxes
from einsat.verify.boxviews import Grid, common_view, count, meet, permute, refine, regroup
from einsat.verify.splits import cells, none, reshape_splits


def test_a_parity_reordering_keeps_the_strided_row_boxes():
    n, c, h, w = 1, 2, 12, 16
    g = dilated_as_regular(n, c, h, w, np.ones((3, c, 3, 3), np.float32), 0)
    grid = boxes.propagate_grids(g, {"w": none((3, c, 3, 3))})[g.outputs[0]]
    # row 2i + j: i in {0}, [1, 5), {5} (the regular conv's seams in each half), j the parity
    assert grid.dims == ((1,), (3,), (6, 2), (8, 2))
    assert grid.splits == ((), (), (1, 5), (1,), (1, 7), (1,))
    assert count(grid) == 36
    # merged back into split points: every row and column, as reshapes always split before views
    assert grid.plain() == ((), (), tuple(range(1, h)), tuple(range(1, w)))
    assert boxes.propagate(g, {"w": none((3, c, 3, 3))})[g.outputs[0]] == grid.plain()


def test_regroup_lines_up_the_digits_or_gives_up():
    merged = regroup(Grid.of((2, 5), ((), (2,))), (10,))
    assert merged == Grid(((2, 5),), ((), (2,)))
    assert merged.plain() == reshape_splits((2, 5), (10,), ((), (2,))) == ((2, 5, 7),)
    # back: the digits come apart as they were (plain splits would also cut the outer dim at 1)
    assert regroup(merged, (2, 5)) == Grid(((2,), (5,)), ((), (2,)))
    # a new dim that ends inside a digit cuts it, refining its splits as `reshape_splits` does
    assert regroup(Grid.of((12,), ((6,),)), (3, 4)) == Grid(((3,), (4,)), ((1, 2), (2,)))
    # size-1 dims come and go
    assert regroup(Grid.of((1, 6, 1), ((), (2,), ())), (6, 1)) == Grid(((6,), (1,)), ((2,), ()))
    # [2, 3] read as [3, 2]: no digit boundary at 3
    assert regroup(Grid.of((2, 3), ((), ())), (3, 2)) is None


def test_a_transpose_moves_dims_with_their_digits():
    g = Grid(((2, 3), (4,)), ((1,), (), (2,)))
    assert permute(g, (1, 0)) == Grid(((4,), (2, 3)), ((2,), (1,), ()))


def test_two_grids_meet_in_their_common_view():
    plain = Grid.of((56,), ((2, 54),))
    strided = Grid(((28, 2),), ((1, 27), (1,)))
    assert common_view(plain, strided) == ((28, 2),)
    assert refine(plain, ((28, 2),)) == Grid(((28, 2),), ((1, 27), ()))  # rows 2 and 54: even
    assert meet(plain, strided) == Grid(((28, 2),), ((1, 27), (1,)))
    # digits that do not nest ([4, 6] and [6, 4]) meet plain
    a, b = Grid(((4, 6),), ((), ())), Grid(((6, 4),), ((), ()))
    assert common_view(a, b) == ((24,),)
    assert meet(a, b).dims == ((24,),)


def test_meet_stays_plain_where_the_view_would_cost_more_cells():
    view = Grid(((2, 3),), ((), ()))      # plain: split at 3
    plain = Grid.of((6,), ((2, 3),))      # 2 falls inside a digit: the view would split both digits
    assert count(Grid(((2, 3),), ((1,), (2,)))) == 4
    assert meet(view, plain) == Grid.of((6,), ((2, 3),))


@st.composite
def layout_chains(draw):
    """A shape, its input splits, and a chain of transposes and reshapes (refactorings of the
    element count into new dims)."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=4)))
    splits = tuple(tuple(sorted(draw(st.sets(st.integers(1, d - 1), max_size=2)))) if d > 1 else ()
                   for d in shape)
    steps, cur = [], shape
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            perm = tuple(draw(st.permutations(range(len(cur)))))
            steps.append(("transpose", perm))
            cur = tuple(cur[p] for p in perm)
        else:
            factors = [p for d in cur for p in _primes(d)]
            cuts = sorted(draw(st.sets(st.integers(1, max(len(factors) - 1, 1)), max_size=3)))
            new = [int(np.prod(factors[a:b])) for a, b in zip([0] + cuts, cuts + [len(factors)])]
            new = tuple(d for d in new if d > 0) or (1,)
            steps.append(("reshape", new))
            cur = new
    return shape, splits, steps


def _primes(d):
    out, k = [], 2
    while d > 1:
        while d % k == 0:
            out.append(k)
            d //= k
        k += 1
    return out


@given(layout_chains())
def test_inside_a_digit_cell_a_layout_chain_reads_affinely_within_one_input_box(chain):
    shape, splits, steps = chain
    b = GraphBuilder("layout")
    v = b.input("x", shape)
    src = np.arange(int(np.prod(shape))).reshape(shape)
    for kind, arg in steps:
        v = b.transpose(v, perm=arg) if kind == "transpose" else b.reshape(v, shape=arg)
        src = np.transpose(src, arg) if kind == "transpose" else src.reshape(arg)
    g = b.build(v)
    grid = boxes.propagate_grids(g, {"x": splits})[g.outputs[0]]
    read = src.reshape(grid.digits)                    # the input position each output reads
    box_of = np.stack(np.unravel_index(read, shape), -1)
    in_box = np.stack([np.searchsorted(np.asarray(s, dtype=np.int64), box_of[..., d], side="right")
                       for d, s in enumerate(splits)], -1) if shape else None
    lo, hi = cells(grid.splits, grid.digits)
    for a, z in zip(lo, hi):
        cell = tuple(slice(i, j) for i, j in zip(a, z))
        r = read[cell]
        u = np.stack(np.meshgrid(*[np.arange(j - i) for i, j in zip(a, z)], indexing="ij"), -1)
        # affine: r(u) = r(0) + Σ u_k·(r(e_k) − r(0))
        steps_ = [r[tuple(1 if k == d else 0 for k in range(r.ndim))] - r.flat[0] if r.shape[d] > 1 else 0
                  for d in range(r.ndim)]
        np.testing.assert_array_equal(r, r.flat[0] + (u * np.array(steps_, dtype=np.int64)).sum(-1))
        if in_box is not None:
            boxes_read = in_box[cell].reshape(-1, len(shape))
            assert (boxes_read == boxes_read[0]).all()
