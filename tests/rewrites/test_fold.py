"""Weight preprocessing: weight-only e-classes get a weight holding their value."""

import numpy as np

from einsat import GraphBuilder, Op
from einsat.egraph import Limits, Schedule, Session
from einsat.egraph.weights import weight_only
from einsat.rewrites.post import fold
from einsat.rewrites.post.fold import fold_generator
from tests.egraph.checks import assert_consistent


def folded_program(seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("fold")
    x = b.input("x", (2, 3))
    w = b.weight("w", rng.standard_normal((3, 4)))
    s = b.weight("s", np.abs(rng.standard_normal(4)) + 0.5)
    scaled = b.mul(w, b.reshape(b.sqrt(s), shape=(1, 4)))  # weight-only
    return b.build(b.relu(b.matmul(b.cast(x, dtype="float64"), scaled))), w, s


def run_fold(graph, **kw):
    s = Session(Limits(iterations=1, **kw))
    (root,) = s.add_graph(graph)
    report = s.run(Schedule((fold_generator(every=1),)))
    return s, root, report


def test_a_weight_only_class_gets_its_value_as_a_weight():
    g, w, s = folded_program()
    session, _, report = run_fold(g)
    assert report.rules["fold-weights"].matches == 1  # the matmul's operand: its insides need no leaf
    data = session.export()
    scaled = next(c for c in data.classes.values() if any(n.op is Op.MUL for n in c.nodes))
    leaves = [n.leaf for n in scaled.nodes if n.leaf]
    assert len(leaves) == 1 and leaves[0][0] == "weight"
    want = np.asarray(g.weights["w"]) * np.sqrt(np.asarray(g.weights["s"])).reshape(1, 4)
    np.testing.assert_allclose(data.weights[leaves[0][1]], want, rtol=1e-12)
    assert_consistent(data)


def test_equal_folded_values_meet_in_one_class():
    b = GraphBuilder("twice")
    x = b.input("x", (3,), np.float64)
    w = b.weight("w", np.arange(3.0))
    v = b.weight("v", np.arange(3.0)[::-1].copy())
    g = b.build(b.add(b.mul(x, b.add(w, v)), b.mul(x, b.add(v, w))))  # w + v and v + w: same value
    session, _, _ = run_fold(g)
    data = session.export()
    sums = [c.id for c in data.classes.values() if any(n.op is Op.ADD and n.children[0] != n.children[1]
                                                        and all(k in weight_only(data) for k in n.children)
                                                        for n in c.nodes)]
    assert len(sums) == 1  # both sums hold the same fold_ weight, so their classes merged


def test_fold_budgets_bound_the_work(monkeypatch):
    g, _, _ = folded_program()
    monkeypatch.setattr(fold, "ROUND_FLOPS", 1.0)  # sqrt and mul of 4 + 12 elements cost more
    session, _, report = run_fold(g)
    assert report.rules["fold-weights"].matches == 0
    monkeypatch.setattr(fold, "ROUND_FLOPS", 1e8)
    monkeypatch.setattr(fold, "FOLD_BYTES", 8)  # the [3, 4] f64 value is 96 bytes
    session, _, report = run_fold(g)
    assert report.rules["fold-weights"].matches == 0


def test_inputs_are_never_folded():
    b = GraphBuilder("live")
    x = b.input("x", (3,), np.float64)
    g = b.build(b.relu(b.add(x, b.weight("w", np.ones(3)))))
    session, _, report = run_fold(g)
    assert report.rules["fold-weights"].matches == 0
