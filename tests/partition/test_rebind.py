"""A piece optimized once, applied to its copies: folded weights recomputed by the recipe."""

import numpy as np
import pytest

import einsat
from einsat.egraph import Limits
from einsat.optimize import Options, run
from einsat.partition import Partitioning, canonical, partition, rebind
from tests.partition.common import assert_same_function, stacked

LIMITS = Limits(nodes=6000, iterations=3, time_s=60, extract_s=30)


@pytest.fixture(scope="module")
def layers():
    graph = stacked(layers=3)
    pieces, _ = partition(graph, Partitioning(piece_nodes=64))
    return [p.graph for p in pieces]


@pytest.fixture(scope="module")
def template(layers):
    return run(layers[0], None, Options(recipe=True, limits=LIMITS))


def test_the_optimizer_folds_weights_and_the_recipe_recomputes_them(layers, template):
    new = [w for w in template.graph.weights if w not in layers[0].weights]
    assert new, "the Q/K/V merge should fold a concatenated weight"
    recipe = template.recipe
    assert sorted(recipe.outputs) == sorted(new)
    assert set(recipe.inputs) <= set(layers[0].weights)
    made = einsat.run(recipe, {i: layers[0].weights[i] for i in recipe.inputs})
    for w in new:
        np.testing.assert_array_equal(made[w], template.graph.weights[w])


def test_the_recipe_is_a_function_of_the_weights_it_reads(layers, template):
    """The concatenation of Q, K and V weights, computed independently of einsat's recipe."""
    recipe = template.recipe
    other = layers[1]
    mapping = dict(zip(canonical(layers[0]).params, canonical(other).params))
    made = einsat.run(recipe, {i: other.weights[mapping[i]] for i in recipe.inputs})
    ((name, value),) = [(k, v) for k, v in made.items() if v.shape == (64, 192)]
    pieces = [other.weights[mapping[i]] for i in canonical(layers[0]).params[:3]]
    assert any(np.array_equal(value, np.concatenate(order, axis=1))
               for order in ([pieces[0], pieces[1], pieces[2]], [pieces[0], pieces[2], pieces[1]],
                             [pieces[1], pieces[0], pieces[2]], [pieces[1], pieces[2], pieces[0]],
                             [pieces[2], pieces[0], pieces[1]], [pieces[2], pieces[1], pieces[0]]))


def test_a_rebound_copy_computes_its_own_layer(layers, template):
    a, b = canonical(layers[0]), canonical(layers[1])
    copy = rebind(template.graph, template.recipe, a, b, layers[1], "p1")
    assert copy.input_types() == layers[1].input_types() and copy.outputs == layers[1].outputs
    assert set(layers[1].weights) & set(copy.weights)              # the copy's own weights, by name
    assert not set(layers[0].weights) & set(copy.weights)          # none of the template's
    assert_same_function(layers[1], copy)
    with pytest.raises(AssertionError):  # ... and not the template's layer (its weights differ)
        assert_same_function(layers[0], _renamed(copy, layers[0]))


def _renamed(copy, like):
    """`copy` with the input and outputs named as in `like` (to run both on one feed)."""
    from einsat.ir.graph import Node
    names = dict(zip(copy.inputs + copy.outputs, like.inputs + like.outputs))
    nodes = [Node(n.op, [names.get(i, i) for i in n.inputs], [names.get(o, o) for o in n.outputs], dict(n.attrs))
             for n in copy.nodes]
    return einsat.Graph(nodes, {names[i]: t for i, t in copy.input_types().items()},
                        [names[o] for o in copy.outputs], dict(copy.weights), "copy")


def test_rebinding_pieces_with_other_fingerprints_is_refused(layers, template):
    other = stacked(layers=1, hidden=32)
    with pytest.raises(einsat.EinsatError, match="fingerprints"):
        rebind(template.graph, template.recipe, canonical(layers[0]), canonical(other), other, "x")
