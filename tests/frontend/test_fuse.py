"""View-chain fusion: each law on a hand-built graph, and the same outputs after fusing."""

import numpy as np
import pytest

import einsat
from einsat.frontend.fuse import disjoint, fuse_views, relative, simplify
from einsat.ir import GraphBuilder, Op

SL = lambda axis, start, step, count: ("slice", axis, start, step, count)


def fused_ops(build):
    """(ops after fusion, ok) for a graph made by build(b, x) from x [4, 6]; ok: same outputs."""
    b = GraphBuilder("g")
    x = b.input("x", (4, 6))
    g = b.build(*build(b, x))
    f = fuse_views(g)
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)}
    want, got = einsat.run(g, feeds), einsat.run(f, feeds)
    assert f.outputs == g.outputs
    for o in g.outputs:
        np.testing.assert_array_equal(got[o], want[o])
    return [n.op for n in f.nodes]


def test_access_of_access_composes():
    ops = fused_ops(lambda b, x: [b.access(b.access(x, spec=[SL(1, 1, 2, 3)]),
                                           spec=[SL(1, 1, 1, 2), ("select", 0, 2)])])
    assert ops == [Op.ACCESS]


def test_pass_up_chain_collapses_to_one_assign():
    # assign(x, assign(access(x, s), w, t), s) = assign(x, w, s + t)
    def build(b, x):
        s = [("select", 0, 1)]
        v = b.access(x, spec=s)
        w = b.relu(b.access(v, spec=[SL(0, 0, 2, 3)]))
        return [b.assign(x, b.assign(v, w, spec=[SL(0, 0, 2, 3)]), spec=s)]
    assert fused_ops(build) == [Op.ACCESS, Op.RELU, Op.ASSIGN]


def test_read_after_write_of_the_same_region_forwards_the_source():
    def build(b, x):
        w = b.relu(b.access(x, spec=[SL(1, 0, 1, 2)]))
        y = b.assign(x, w, spec=[SL(1, 0, 1, 2)])
        return [b.sigmoid(b.access(y, spec=[SL(1, 0, 1, 2)])), y]
    assert fused_ops(build).count(Op.ACCESS) == 1  # the second access reads w itself


def test_read_of_a_disjoint_region_skips_the_write():
    def build(b, x):
        y = b.assign(x, b.relu(b.access(x, spec=[SL(1, 0, 1, 2)])), spec=[SL(1, 0, 1, 2)])
        return [b.access(y, spec=[SL(1, 3, 1, 3)])]
    g_ops = fused_ops(build)
    assert g_ops == [Op.ACCESS]  # the write and its computation are dead


def test_read_inside_a_written_region_reads_the_source():
    def build(b, x):
        w = b.tanh(b.access(x, spec=[SL(1, 0, 1, 4)]))
        y = b.assign(x, w, spec=[SL(1, 0, 1, 4)])
        return [b.access(y, spec=[SL(1, 2, 1, 2)])]
    assert fused_ops(build) == [Op.ACCESS, Op.TANH, Op.ACCESS]


def test_overwritten_writes_and_write_backs_vanish():
    def build(b, x):
        s = [("select", 1, 3)]
        y = b.assign(x, b.relu(b.access(x, spec=s)), spec=s)
        z = b.assign(y, b.tanh(b.access(x, spec=s)), spec=s)        # covers y's write
        return [b.assign(z, b.access(z, spec=[("select", 0, 0)]), spec=[("select", 0, 0)])]
    assert fused_ops(build) == [Op.ACCESS, Op.TANH, Op.ASSIGN]


def test_identity_and_empty_specs_vanish_but_output_names_stay():
    ops = fused_ops(lambda b, x: [b.identity(b.access(b.assign(x, b.relu(x), spec=[]), spec=[]))])
    assert ops == [Op.RELU]


@pytest.mark.parametrize("spec, want", [
    ([SL(0, 1, 2, 4), SL(0, 1, 1, 2)], [SL(0, 3, 2, 2)]),
    ([SL(1, 5, -1, 6), ("select", 1, 2)], [("select", 1, 3)]),
    ([SL(0, 1, 2, 4), SL(1, 1, 1, 2)], [SL(0, 1, 2, 4), SL(1, 1, 1, 2)]),
])
def test_simplify(spec, want):
    assert simplify(tuple(spec)) == tuple(want)
    x = np.arange(80).reshape(8, 10)
    from einsat.ir.ops.views import apply_spec
    np.testing.assert_array_equal(apply_spec(x, spec, []), apply_spec(x, want, []))


def test_disjoint_and_relative_regions():
    assert disjoint((SL(0, 0, 2, 3),), (SL(0, 1, 2, 3),))
    assert not disjoint((SL(0, 0, 2, 3),), (SL(0, 2, 1, 2),))
    assert not disjoint((SL(0, 0, 2, 3),), (SL(1, 0, 1, 1),))       # other axis: unknown
    assert not disjoint((("dselect", 0, "i"),), (("dselect", 0, "j"),))
    assert relative((SL(0, 2, 2, 4),), (("select", 0, 6),)) == (("select", 0, 2),)
    assert relative((SL(0, 2, 2, 4),), (SL(0, 4, 4, 2),)) == (SL(0, 1, 2, 2),)
    assert relative((SL(0, 2, 2, 4),), (SL(0, 3, 2, 2),)) is None    # between the written rows
    assert relative((("select", 0, 1),), (("select", 0, 1), ("select", 0, 3))) == (("select", 0, 3),)
