"""random_inputs: one generator, seeded, valid for the graph's index inputs."""

from __future__ import annotations

import numpy as np

from einsat.ir import GraphBuilder, TensorType
from einsat.runtime import random_arrays, random_inputs, run
from einsat.runtime.inputs import INT_HIGH


def mixed():
    b = GraphBuilder("mixed")
    x, i = b.input("x", (7, 3)), b.input("i", (50,), np.int64)
    n, p = b.input("n", (40,), np.int32), b.input("p", (40,), np.bool_)
    return b.build(b.gather(x, i, axis=0), b.where(p, b.cast(n, dtype="float32"), b.const(0.0)))


def test_each_dtype_gets_its_distribution_and_seeds_repeat():
    g = mixed()
    a, b, c = random_inputs(g, 0), random_inputs(g, 0), random_inputs(g, 1)
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["x"], c["x"])
    assert {k: v.dtype for k, v in a.items()} == {k: t.dtype for k, t in g.input_types().items()}
    assert a["x"].std() > 0.5 and a["p"].any() and not a["p"].all()
    assert set(np.unique(a["n"])) == set(range(INT_HIGH))  # 40 draws of 5 values: all of them


def test_integer_inputs_stay_valid_indices():
    g = mixed()
    i = random_inputs(g)["i"]
    assert i.min() == 0 and i.max() < 7 and len(np.unique(i)) == INT_HIGH  # below 7, and INT_HIGH
    run(g, random_inputs(g))  # and the graph accepts them


def test_dynamic_view_indices_stay_in_range():
    b = GraphBuilder("rows")
    x, k = b.input("x", (2, 5)), b.input("k", (), np.int64)
    g = b.build(b.access(x, k, spec=[("dselect", 0, 0)]))
    draws = {int(random_inputs(g, s)["k"]) for s in range(30)}
    assert draws == {0, 1}


def test_a_generator_continues_its_stream():
    rng = np.random.default_rng(3)
    t = {"a": TensorType((4,))}
    first, second = random_arrays(t, rng)["a"], random_arrays(t, rng)["a"]
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first, np.random.default_rng(3).standard_normal(4).astype(np.float32))
