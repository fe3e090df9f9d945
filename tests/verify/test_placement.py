"""Where a correction goes: the value of the mutant's output view chain with the fewest regions."""

import numpy as np
import pytest

from einsat.ir import GraphBuilder, Op
from einsat.testing.mutants import batch_to_width, dilated_as_regular
from einsat.verify import find_differences
from einsat.verify.numeric import equivalent
from einsat.verify.placement import chain, correct_placed


def conv(shape, weight, **attrs):
    b = GraphBuilder("conv")
    return b.build(b.conv(b.input("x", shape), b.weight("w", weight), **attrs))


def weights(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def flops_of(graph, op):
    return sum(n.definition.flops(*graph.node_types(n), n.attrs) for n in graph.nodes if n.op is op)


@pytest.mark.parametrize("n, c, h, w, f", [(8, 16, 14, 14, 16), (4, 3, 5, 6, 2), (6, 2, 3, 9, 5)])
def test_figure_1_is_corrected_once_inside_instead_of_once_per_image(n, c, h, w, f):
    weight = weights(f, c, 3, 3)
    original = conv((n, c, h, w), weight, padding=1)
    mutant = batch_to_width(n, c, h, w, weight, seed=0)
    assert len(find_differences(original, mutant).regions[original.outputs[0]]) == n  # at the output
    placed = correct_placed(original, mutant)
    (out,) = mutant.outputs
    wide = next(node for node in mutant.nodes if node.op is Op.CONV).outputs[0]
    assert placed.at == {out: wide}
    (regions,) = placed.differences.regions.values()
    assert [(r.starts[3], r.ends[3]) for r in regions] == [(w - 1, w + 1)]  # the seam of every pair
    assert sum(node.op is Op.CORRECT for node in placed.graph.nodes) == 1
    fixed = placed.graph
    assert fixed.outputs == mutant.outputs and fixed.input_types() == mutant.input_types()
    fix = flops_of(fixed, Op.CONV) - flops_of(mutant, Op.CONV)
    assert 0 < fix <= flops_of(mutant, Op.CONV) / w  # one output column per image, never a whole conv
    assert equivalent(original, fixed)
    assert find_differences(original, fixed).equivalent


@pytest.mark.parametrize("n, c, h, w, f", [(1, 8, 14, 14, 8), (2, 2, 6, 8, 3)])
def test_figure_3_is_corrected_in_the_parity_layout_with_three_regions(n, c, h, w, f):
    weight = weights(f, c, 3, 3, seed=1)
    original = conv((n, c, h, w), weight, dilation=2, padding=2)
    mutant = dilated_as_regular(n, c, h, w, weight, seed=0)
    assert len(find_differences(original, mutant).regions[original.outputs[0]]) == 8
    placed = correct_placed(original, mutant)
    (regions,) = placed.differences.regions.values()
    assert len(regions) == 3  # the row seam, and the column seam above and below it
    assert equivalent(original, placed.graph)
    assert find_differences(original, placed.graph).equivalent
    assert flops_of(placed.graph, Op.CONV) < 1.7 * flops_of(mutant, Op.CONV)


def test_the_chain_stops_at_values_used_twice_and_at_inputs():
    b = GraphBuilder("views")
    x = b.input("x", (2, 6))
    t = b.transpose(x, perm=(1, 0), name="t")
    r = b.reshape(t, shape=(3, 4), name="r")
    g = b.build(b.reshape(r, shape=(12,), name="out"), b.relu(r, name="other"))
    assert chain(g, "out") == ["out"]  # r feeds relu too
    b = GraphBuilder("views")
    x = b.input("x", (2, 6))
    g = b.build(b.reshape(b.transpose(x, perm=(1, 0), name="t"), shape=(12,), name="out"))
    assert chain(g, "out") == ["out", "t"]


def test_an_equivalent_mutant_gets_no_correction():
    b = GraphBuilder("mm")
    x = b.input("x", (3, 4))
    w = weights(4, 5)
    original = b.build(b.matmul(x, b.weight("w", w)))
    b = GraphBuilder("mm_t")
    x = b.input("x", (3, 4))
    y = b.matmul(b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0)), b.weight("w", w))
    mutant = b.build(b.reshape(b.reshape(y, shape=(15,)), shape=(3, 5)))
    placed = correct_placed(original, mutant)
    assert placed.differences.equivalent
    assert not any(node.op is Op.CORRECT for node in placed.graph.nodes)
    assert equivalent(original, placed.graph)
