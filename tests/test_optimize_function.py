"""einsat.optimize on an imperative function: functionalize, optimize, verify on the examples."""

import numpy as np
import pytest

import einsat
from benchmarks.imperative.paper import figure2, figure2_inputs
from einsat.errors import EinsatError


def test_optimize_takes_a_function_and_verifies_on_its_examples():
    rng = np.random.default_rng(0)
    args = figure2_inputs(rng)
    expected = figure2(*(np.array(a, copy=True) for a in args))  # the eager oracle mutates its inputs
    result = einsat.optimize(figure2, args)
    assert result.report.verification is not None
    outs = einsat.run(result.graph, dict(zip(result.graph.inputs, args)))
    for want, got in zip(expected, (outs[o] for o in result.graph.outputs)):
        np.testing.assert_array_equal(got, want)


def test_a_function_without_example_tuple_is_a_clear_error():
    with pytest.raises(EinsatError, match="example arguments"):
        einsat.optimize(figure2)


def test_example_inputs_of_the_wrong_count_are_a_clear_error():
    b = einsat.GraphBuilder()
    g = b.build(b.relu(b.input("x", (2,))))
    two = (np.zeros(2, np.float32), np.zeros(2, np.float32))
    with pytest.raises(EinsatError, match=r"2 example inputs for 'graph', which takes 1: \['x'\]"):
        einsat.optimize(g, two)


def test_examples_by_name_are_checked_besides_random_inputs():
    b = einsat.GraphBuilder()
    x = b.input("x", (3, 4))
    g = b.build(b.relu(b.relu(x)))
    result = einsat.optimize(g, {"x": np.ones((3, 4), np.float32)})
    assert result.report.verification is not None
