"""The typed mutant grammar: every mutant keeps the subprogram's interface; the fully equivalent
families (groups, the block-diagonal conv) compute the same values."""

import numpy as np
import pytest
from hypothesis import given, settings

from einsat import GraphBuilder, Op
from einsat.rewrites.mutate.grammar import mutants
from einsat.testing.egraphs import same_outputs
from einsat.testing.strategies import multilinear_programs


def interface(g):
    return g.input_types(), [g.types[o].shape for o in g.outputs], dict(g.weights)


@settings(max_examples=60)
@given(multilinear_programs(max_nodes=3, max_side=6))
def test_every_mutant_takes_the_inputs_and_gives_outputs_of_the_same_shapes(g):
    types, shapes, weights = interface(g)
    for m in mutants(g):
        assert m.graph.input_types() == types
        assert [m.graph.types[o].shape for o in m.graph.outputs] == shapes
        for name, a in weights.items():  # the subprogram's weights, untouched (new ones are ops over them)
            if name in m.graph.weights:
                np.testing.assert_array_equal(m.graph.weights[name], a)


def test_convolutions_on_two_branches_become_one_grouped_conv_that_computes_the_same():
    b = GraphBuilder("branches")
    x1, x2 = b.input("x1", (2, 3, 7, 6)), b.input("x2", (2, 3, 7, 6))
    g = b.build(b.conv(x1, b.weight("w1", (4, 3, 1, 1))), b.conv(x2, b.weight("w2", (2, 3, 3, 3)), padding=1))
    (m,) = [m for m in mutants(g) if m.family == "group"]
    (conv,) = [n for n in m.graph.nodes if n.op is Op.CONV]
    assert conv.attrs["groups"] == 2 and m.graph.types[conv.inputs[1]].shape == (8, 3, 3, 3)
    same_outputs(g, m.graph, rtol=1e-5, atol=1e-5)


def test_a_shared_input_is_duplicated_figure_10b():
    b = GraphBuilder("shared")
    x = b.input("x", (1, 2, 5, 5))
    g = b.build(b.conv(x, b.weight("w1", (3, 2, 3, 3)), padding=1), b.conv(x, b.weight("w2", (3, 2, 3, 3)), padding=1))
    (m,) = [m for m in mutants(g) if m.family == "group"]
    assert [n for n in m.graph.nodes if n.op is Op.CONCAT and n.inputs == ("x", "x")]
    same_outputs(g, m.graph, rtol=1e-5, atol=1e-5)


def test_matmuls_of_one_shape_become_one_batched_matmul():
    b = GraphBuilder("qkv")
    x = b.input("x", (4, 6))
    g = b.build(*[b.matmul(x, b.weight(f"w{k}", (6, 5))) for k in range(3)])
    (m,) = [m for m in mutants(g) if m.family == "group"]
    assert [n.op for n in m.graph.nodes].count(Op.BATCHMATMUL) == 1
    same_outputs(g, m.graph, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups", [2, 3])
def test_a_grouped_conv_is_a_conv_on_the_block_diagonal_weight(groups):
    b = GraphBuilder("grouped")
    x = b.input("x", (1, 2 * groups, 5, 4))
    g = b.build(b.conv(x, b.weight("w", (groups, 2, 3, 3)), b.weight("b", (groups,)), padding=1, groups=groups))
    (m,) = [m for m in mutants(g) if m.family == "substitution"]
    (conv,) = [n for n in m.graph.nodes if n.op is Op.CONV]
    assert conv.attrs["groups"] == 1
    same_outputs(g, m.graph, rtol=1e-5, atol=1e-5)


def test_a_chain_is_no_group_and_a_pool_over_parity_classes_is_no_layout():
    b = GraphBuilder("chain")
    x = b.input("x", (3, 4))
    g = b.build(b.matmul(b.matmul(x, b.weight("w1", (4, 4))), b.weight("w2", (4, 4))))
    assert not [m for m in mutants(g) if m.family == "group"]
    b = GraphBuilder("pool")
    x = b.input("x", (1, 2, 8, 8))
    g = b.build(b.avgpool(b.conv(x, b.weight("w", (2, 2, 3, 3)), dilation=2, padding=2), kernel=(3, 3),
                          stride=(1, 1), padding=(1, 1, 1, 1)))
    layouts = [m.what for m in mutants(g) if m.family == "layout"]
    assert layouts and not [w for w in layouts if "dim 2 inner" in w]  # tiles yes, parity no
