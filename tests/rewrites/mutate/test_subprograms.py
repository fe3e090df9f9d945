"""Subprograms from the source program: split at non-multi-linear ops, at most 4 ops, independent
groups, single ops first, canonical keys."""

import numpy as np

from einsat import GraphBuilder, Op
from einsat.cost.model import RooflineCost
from einsat.egraph import Session
from einsat.rewrites.mutate.subprograms import source_program, subprograms

COST = RooflineCost("h100")


def take(g, limit=100, depth=4, done=frozenset()):
    s = Session()
    s.add_graph(g)
    data = s.export()
    program = source_program([g], data)
    return data, program, subprograms(program, data, COST, limit, depth=depth, done=done)


def residual_block():
    b = GraphBuilder("block")
    x = b.input("x", (1, 4, 6, 6))
    y = b.conv(b.relu(b.conv(x, b.weight("w1", (4, 4, 3, 3)), padding=1)), b.weight("w2", (4, 4, 3, 3)), padding=1)
    return b.build(b.relu(b.add(y, x)))


def test_the_source_program_is_found_in_the_egraph():
    g = residual_block()
    data, program, _ = take(g)
    named = {data.classes[c].name: n for c, n in program.items()}
    assert {named[v.outputs[0]].op for v in g.nodes} == {Op.CONV, Op.RELU, Op.ADD}
    assert set(named) >= {"x", "w1", "w2"}


def test_subprograms_stop_at_non_linear_ops_and_at_the_depth():
    data, program, subs = take(residual_block())
    assert subs
    for _, sub in subs:
        assert {n.op for n in sub.graph.nodes} <= {Op.CONV, Op.ADD}  # relu splits
        assert len(sub.graph.nodes) <= 4
    sizes = [len(sub.graph.nodes) for _, sub in subs]
    assert sizes == sorted(sizes)  # single ops first
    assert all(len(sub.graph.nodes) <= 1 for _, sub in take(residual_block(), depth=1)[2])


def test_a_subprogram_binds_its_inputs_and_weights_to_their_e_classes():
    data, program, subs = take(residual_block())
    _, sub = next((m, s) for m, s in subs if [n.op for n in s.graph.nodes] == [Op.CONV, Op.ADD])
    for name, cid in sub.weights.items():
        np.testing.assert_array_equal(sub.graph.weights[name], data.weights[data.classes[cid].nodes[0].leaf[1]])
    for name, cid in sub.inputs.items():
        assert data.classes[cid].type == sub.graph.types[name]
    assert [data.classes[c].type.shape for c in sub.outputs] == [sub.graph.types[o].shape for o in sub.graph.outputs]


def test_independent_convs_form_a_group_dependent_ones_do_not():
    b = GraphBuilder("branches")
    x1, x2 = b.input("x1", (1, 3, 5, 5)), b.input("x2", (1, 3, 5, 5))
    g = b.build(b.conv(x1, b.weight("w1", (2, 3, 1, 1))), b.conv(x2, b.weight("w2", (4, 3, 1, 1))))
    groups = [s for _, s in take(g)[2] if len(s.graph.nodes) == 2]
    assert len(groups) == 1 and len(groups[0].graph.inputs) == 2
    b = GraphBuilder("chain")
    x = b.input("x", (1, 3, 5, 5))
    g = b.build(b.conv(b.conv(x, b.weight("w1", (3, 3, 1, 1))), b.weight("w2", (3, 3, 1, 1))))
    (pair,) = [s for _, s in take(g)[2] if len(s.graph.nodes) == 2]
    assert pair.graph.producer(pair.graph.nodes[1].inputs[0]) is not None  # the chain, not a group


def test_layers_of_one_shape_share_a_key_other_shapes_do_not():
    b = GraphBuilder("layers")
    x = b.input("x", (1, 4, 6, 6))
    y = b.relu(b.conv(x, b.weight("w1", (4, 4, 3, 3)), padding=1))
    y = b.relu(b.conv(y, b.weight("w2", (4, 4, 3, 3)), padding=1))
    y = b.conv(y, b.weight("w3", (4, 4, 1, 1)))
    convs = [s for _, s in take(b.build(y))[2] if len(s.graph.nodes) == 1]
    keys = [s.key for s in convs]
    assert len(convs) == 3 and len(set(keys)) == 2


def test_a_round_takes_the_next_subprograms_not_done():
    data, program, first = take(residual_block(), limit=2)
    done = {m for m, _ in first}
    _, _, second = take(residual_block(), limit=2, done=done)
    assert len(first) == 2 and second and not done & {m for m, _ in second}
