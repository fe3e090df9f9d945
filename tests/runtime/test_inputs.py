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


def test_gather_nd_index_tuples_stay_within_the_axis_each_column_picks():
    """GPT-2's causal mask: a GatherND of [1, 8] data by [..., 2] tuples; the first column picks
    along an axis of 1 (index 0 only), the second along 8. The profiler's one-node session drew
    both below INT_HIGH and onnxruntime failed ("invalid index found, index = 3")."""
    b = GraphBuilder("causal")
    d, i = b.input("d", (1, 8), np.bool_), b.input("i", (1, 1, 4, 8, 2), np.int64)
    g = b.build(b.gather_nd(d, i))
    draws = random_inputs(g, 0)["i"]
    assert set(np.unique(draws[..., 0])) == {0}
    assert set(np.unique(draws[..., 1])) == set(range(INT_HIGH))  # 32 draws below min(8, INT_HIGH): all of them
    run(g, random_inputs(g), backend="onnxruntime")  # valid for onnxruntime, which checks every index


def test_gather_elements_indices_stay_within_their_axis():
    b = GraphBuilder("along")
    d, i = b.input("d", (3, 2)), b.input("i", (3, 40), np.int64)
    g = b.build(b.gather_elements(d, i, axis=1))
    draws = random_inputs(g, 0)["i"]
    assert set(np.unique(draws)) == {0, 1}
    run(g, random_inputs(g), backend="onnxruntime")


def test_token_ids_reach_the_gather_through_casts_and_reshapes():
    """An embedding of 3 rows read by ids cast and reshaped first: the ids are drawn below 3."""
    b = GraphBuilder("embed")
    w, ids = b.input("w", (3, 4)), b.input("ids", (2, 30), np.int64)
    g = b.build(b.gather(w, b.reshape(b.cast(ids, dtype="int32"), shape=(60,)), axis=0))
    assert set(np.unique(random_inputs(g, 0)["ids"])) == {0, 1, 2}
    run(g, random_inputs(g), backend="onnxruntime")


def test_a_rank_0_input_is_an_array_of_every_dtype():
    """onnxruntime takes arrays only: a rank-0 bool drawn as a NumPy scalar could not be profiled
    (`logical_and` with a scalar mask, on a BERT export)."""
    from einsat.ir.types import TensorType
    from einsat.runtime.inputs import random_arrays
    got = random_arrays({"b": TensorType((), np.bool_), "i": TensorType((), np.int64), "f": TensorType((), np.float32)})
    for name, a in got.items():
        assert isinstance(a, np.ndarray) and a.shape == (), (name, type(a))
    assert got["b"].dtype == np.bool_
