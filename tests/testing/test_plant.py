"""The planted wrong rewrite (`einsat.testing.plant`): one accumulating node, mid-graph, off by a factor."""

import numpy as np
import pytest

import einsat
from einsat.ir import GraphBuilder
from einsat.runtime import random_inputs
from einsat.testing.plant import perturb, planting_site


def mlp(layers: int = 5):
    b = GraphBuilder("mlp")
    h = b.input("x", (4, 8))
    rng = np.random.default_rng(0)
    for k in range(layers):
        h = b.relu(b.matmul(h, b.weight(f"w{k}", rng.standard_normal((8, 8)).astype(np.float32)), name=f"mm{k}"))
    return b.build(h, names=["y"])


def test_the_site_is_the_middle_accumulating_node_on_computed_values():
    # mm0 reads the graph input: the candidates are mm1..mm4, the middle one is mm3
    assert planting_site(mlp()).name == "mm3"


def test_perturb_scales_one_value_and_keeps_the_interface():
    g = mlp()
    wrong = perturb(g, node="mm1", factor=2.0)
    assert wrong.input_types() == g.input_types() and wrong.outputs == g.outputs
    assert len(wrong.nodes) == len(g.nodes) + 1
    feeds = random_inputs(g, 0)
    keep = ("mm1", "mm2")
    ours, theirs = einsat.run(g, feeds, keep=keep), einsat.run(wrong, feeds, keep=keep)
    np.testing.assert_array_equal(theirs["mm1"], ours["mm1"])  # the node itself is unchanged
    relu1 = np.maximum(ours["mm1"], 0)
    w2 = g.weights["w2"]
    np.testing.assert_allclose(theirs["mm2"], (2 * relu1) @ w2, rtol=1e-5)  # its consumers see it doubled
    assert not np.allclose(theirs["y"], ours["y"])


def test_an_unknown_node_is_an_error():
    with pytest.raises(ValueError, match="no node 'nope'"):
        perturb(mlp(), node="nope")
