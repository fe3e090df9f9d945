"""Fingerprints: equal up to names and parameter values, different for anything else."""

import numpy as np

import einsat
from einsat.partition import canonical


def layer(name: str, seed: int, shape=(4, 8), eps: float = 1e-5, perm=(1, 0), mask=None):
    rng = np.random.default_rng(seed)
    b = einsat.GraphBuilder(name)
    x = b.input(f"{name}_x", shape)
    w = b.weight(f"{name}_w", rng.standard_normal((shape[1], shape[1])).astype(np.float32))
    bias = b.weight(f"{name}_b", rng.standard_normal(shape[1]).astype(np.float32))
    y = b.add(b.matmul(x, w), bias)
    y = b.mul(y, b.const(eps, name=f"{name}_eps"))
    if mask is not None:
        y = b.mul(y, b.weight(f"{name}_m", np.asarray(mask, np.float32).reshape(1, 1)))
    return b.build(b.transpose(y, perm=perm))


def test_names_and_parameter_values_do_not_change_the_fingerprint():
    a, b = canonical(layer("a", 0)), canonical(layer("b", 1))
    assert a.key == b.key
    assert (a.inputs, a.params, a.constants) == (("a_x",), ("a_w", "a_b"), ("a_eps",))
    assert (b.inputs, b.params, b.constants) == (("b_x",), ("b_w", "b_b"), ("b_eps",))


def test_shapes_attributes_constants_and_wiring_change_it():
    base = canonical(layer("a", 0)).key
    assert canonical(layer("a", 0, shape=(5, 8))).key != base          # an input's shape
    assert canonical(layer("a", 0, eps=1e-6)).key != base              # a scalar constant's value
    assert canonical(layer("a", 0, perm=(0, 1))).key != base           # an attribute
    assert canonical(layer("a", 0, mask=1.0)).key != canonical(layer("a", 0, mask=2.0)).key  # a 1-element weight
    b = einsat.GraphBuilder("a")
    x = b.input("a_x", (4, 8))
    w = b.weight("a_w", (8, 8))
    bias = b.weight("a_b", (8,))
    y = b.mul(b.add(bias, b.matmul(x, w)), b.const(1e-5, name="a_eps"))  # add's operands swapped
    assert canonical(b.build(b.transpose(y, perm=(1, 0)))).key != base
