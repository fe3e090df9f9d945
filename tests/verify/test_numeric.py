import numpy as np
import pytest

from einsat.errors import ShapeError
from einsat.ir import Graph, GraphBuilder, Node, Op
from einsat.runtime import random_inputs
from einsat.verify import numeric
from einsat.verify.numeric import ReferenceRuns, draws, equivalent, tolerance


def mlp(name="mlp", bias=0.0, dtype=np.float32):
    b = GraphBuilder(name)
    x = b.input("x", (4, 8), dtype)
    w1 = b.weight("w1", np.random.default_rng(0).standard_normal((8, 16)).astype(dtype))
    w2 = b.weight("w2", np.random.default_rng(1).standard_normal((16, 3)).astype(dtype))
    h = b.relu(b.add(b.matmul(x, w1, name="mm1"), b.const(np.full(16, bias), dtype), name="pre"), name="act")
    return b.build(b.matmul(h, w2, name="mm2"))


def test_a_program_is_equivalent_to_itself_and_to_a_reassociated_copy():
    g = mlp()
    assert equivalent(g, g)
    # (x @ w1) computed as x @ (w1 split in two halves, concatenated): a different rounding order
    b = GraphBuilder("split")
    x = b.input("x", (4, 8))
    w1 = g.weights["w1"]
    halves = [b.matmul(x, b.weight(None, w1[:, :8])), b.matmul(x, b.weight(None, w1[:, 8:]))]
    h = b.relu(b.add(b.concat(*halves, axis=1), b.const(np.zeros(16), np.float32)))
    other = b.build(b.matmul(h, b.weight("w2", g.weights["w2"])))
    assert equivalent(g, other)


def test_a_difference_is_reported_with_the_worst_element_and_the_nodes_behind_it():
    g, h = mlp(), mlp(bias=0.25)
    report = equivalent(g, h)
    assert not report
    (out,) = report.outputs
    assert not out.ok and out.error > 1 and len(out.index) == 2
    text = str(report)
    assert "NOT equivalent" in text and "<-- differs" in text
    assert any(line.startswith("mm1 = matmul(x, w1)") for line in report.chain)
    assert report.chain[-1].startswith("mm2 = matmul(act, w2)")
    # the programs share value names: the first shared value that differs is the biased sum
    assert report.first_divergence.startswith("pre")


def test_the_tolerance_grows_with_op_count_and_accumulation_and_depends_on_dtype():
    small, big = mlp(), mlp()
    assert tolerance(small, big, np.float32) > tolerance(small, big, np.float64) > 0
    b = GraphBuilder("deep")
    x = b.input("x", (4, 8))
    y = x
    for _ in range(10):
        y = b.relu(y)
    deep = b.build(y)
    assert tolerance(deep, deep, np.float32) > tolerance(small, small, np.float32) / 2
    assert tolerance(small, small, np.int64) == 0.0


def test_integer_outputs_must_be_equal():
    b = GraphBuilder("ints")
    x = b.input("x", (5,), np.int64)
    g = b.build(b.add(x, x))
    h = b.build(b.mul(x, b.const(2, np.int64)))
    assert equivalent(g, h)
    b2 = GraphBuilder("ints")
    x = b2.input("x", (5,), np.int64)
    k = b2.build(b2.add(x, b2.const(1, np.int64)))
    assert not equivalent(g, k)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_in_the_same_places_is_equal_and_elsewhere_is_not():
    b = GraphBuilder("nan")
    x = b.input("x", (6,))
    zero = b.const(np.zeros(6), np.float32)
    g = b.build(b.div(zero, zero, name="nan1"))
    h = b.build(b.div(b.mul(zero, x), zero, name="nan2"))
    assert equivalent(g, h)
    k = b.build(b.add(zero, x))
    assert not equivalent(g, k)


def test_fixed_inputs_and_random_inputs():
    g = mlp()
    xs = random_inputs(g, seed=3)
    assert xs["x"].shape == (4, 8) and xs["x"].dtype == np.float32
    assert equivalent(g, g, xs)


def test_programs_that_do_not_fit_are_refused():
    g = mlp()
    t = g.types[g.outputs[0]]
    other = Graph([Node(Op.RELU, ["y"], ["z"])], {"y": t}, ["z"])
    with pytest.raises(ShapeError, match="different inputs"):
        equivalent(g, other)


def test_kept_reference_runs_give_the_same_report_and_run_each_draw_once(monkeypatch):
    g = mlp()
    b = GraphBuilder("split")  # the same program, its first matmul split in two
    x = b.input("x", (4, 8))
    w1 = g.weights["w1"]
    halves = [b.matmul(x, b.weight(None, w1[:, :8])), b.matmul(x, b.weight(None, w1[:, 8:]))]
    h = b.relu(b.add(b.concat(*halves, axis=1), b.const(np.zeros(16), np.float32)))
    other = b.build(b.matmul(h, b.weight("w2", g.weights["w2"])))
    ran = []
    real = numeric.run
    monkeypatch.setattr(numeric, "run",
                        lambda graph, draw, keep=(): ran.append(graph.name) or real(graph, draw, keep=keep))
    plain = equivalent(g, other, trials=2)
    assert ran.count("mlp") == 2 and ran.count("split") == 2
    ran.clear()
    runs = ReferenceRuns(g)
    runs.prepare(draws(g, trials=2))
    assert ran == ["mlp", "mlp"] and len(runs.seconds) == 2 and runs.typical_seconds > 0
    kept = equivalent(g, other, trials=2, reference=runs)
    kept_again = equivalent(g, g, trials=2, reference=runs)
    assert ran == ["mlp", "mlp", "split", "split", "mlp", "mlp"]  # the reference never ran again
    assert bool(kept) and bool(kept_again) and kept.status == plain.status == "proved"
    assert [(o.name, o.error, o.index) for o in kept.outputs] == [(o.name, o.error, o.index) for o in plain.outputs]
    with pytest.raises(ValueError, match="reference runs are of 'mlp'"):
        equivalent(other, g, reference=runs)


def test_a_difference_found_on_kept_runs_is_still_explained():
    g, h = mlp(), mlp(bias=0.25)
    runs = ReferenceRuns(g)
    runs.prepare(draws(g))
    report = equivalent(g, h, reference=runs)
    assert not report and report.first_divergence.startswith("pre")
