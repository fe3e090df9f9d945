"""Session: limits, the report, determinism, generators, rule errors."""

import time

import numpy as np
import pytest

from einsat import GraphBuilder, Op
from einsat.egraph import BackOff, Generator, Limits, Rule, Ruleset, Schedule, Session, StopReason, Term
from einsat.egraph.rules import rewrite
from einsat.errors import EinsatError

COMM = Rule("add-comm", "a + b = b + a", rewrite("(Add a b)", "(Add b a)"))
ASSOC = Rule("add-assoc", "(a + b) + c = a + (b + c)", rewrite("(Add (Add a b) c)", "(Add a (Add b c))"))
ASSOC_BACK = Rule("add-assoc-back", "a + (b + c) = (a + b) + c", rewrite("(Add a (Add b c))", "(Add (Add a b) c)"))
AC = Schedule((Ruleset("ac", (COMM, ASSOC, ASSOC_BACK), backoff=BackOff(200)),))


def chain(n: int, shape=(2,)):
    """x0 + x1 + ... + x{n-1}, left to right: AC rewriting grows it exponentially."""
    b = GraphBuilder(f"chain{n}")
    xs = [b.input(f"x{k}", shape) for k in range(n)]
    out = xs[0]
    for x in xs[1:]:
        out = b.add(out, x)
    return b.build(b.relu(out), names=["y"])


def run(graph, schedule=AC, **limits):
    s = Session(Limits(**limits))
    s.add_graph(graph)
    return s, s.run(schedule)


def test_saturation_and_report_fields():
    s, r = run(chain(3), iterations=50)
    assert r.stop_reason is StopReason.SATURATED
    data = s.export()
    assert r.classes == len(data.classes)
    assert r.nodes == s.num_nodes() > 0
    assert r.rules["add-comm"].matches > 0 and r.rules["add-assoc"].matches > 0
    assert all(v.time_s >= 0 for v in r.rules.values())
    assert r.iterations == len({p.step for p in r.phases}) >= 2
    assert not r.phases[-1].changed and r.time_s > 0
    assert "saturated" in r.summary()
    sums = [n for c in data.classes.values() for n in c.nodes if n.op is Op.ADD]
    # 3 pair sums in both orders, and the total as (pair) + leaf in both orders, for 3 pairs
    assert len(sums) == 6 + 6


@pytest.mark.parametrize("limit", [60, 150, 400, 2000])
def test_node_limit_is_never_exceeded(limit):
    """The guarantee: no phase ever takes the e-graph above the limit (each phase runs under a
    match limit of the remaining budget over its rules' fan-out)."""
    s, r = run(chain(8), nodes=limit, iterations=100, time_s=60)
    assert r.stop_reason is StopReason.NODE_LIMIT
    assert all(p.nodes <= limit for p in r.phases)
    assert r.nodes == s.num_nodes() <= limit
    # the budget is used, if conservatively (every match is assumed to create all it builds)
    assert r.nodes > max(len(chain(8).nodes) + 8 + 1, limit // 5)


def test_a_ruleset_whose_rules_match_more_than_its_shared_cap_but_add_nothing_is_saturated():
    """The shared match cap is the room over the whole ruleset's fan-out. Commutativity on a
    saturated chain matches every sum and adds nothing; beside a rule that builds much and never
    matches, it exceeds the shared cap. Each rule then runs alone under the whole room: none
    adds anything, none is held back, so the e-graph is saturated, not at its node limit (it
    once stopped BERT's layer with "node limit" at 1,237 of 30,000 e-nodes)."""
    big = Rule("never", "relu(relu(relu(x))), not in the program, = a deep chain of negations of it",
               rewrite("(Relu (Relu (Relu x)))", "(Neg (Neg (Neg (Neg (Neg (Neg (Neg (Neg (Relu x)))))))))"))
    sched = Schedule((Ruleset("ac", (COMM, ASSOC, ASSOC_BACK), backoff=BackOff(200)), Ruleset("wide", (COMM, big))))
    nodes = 400
    s, r = run(chain(4), sched, nodes=nodes, iterations=100, time_s=60)
    assert r.stop_reason is StopReason.SATURATED, r.summary()
    last = [p for p in r.phases if p.phase == "wide"][-1]
    sums = sum(1 for c in s.export().classes.values() for n in c.nodes if n.op is Op.ADD)
    assert sums > (nodes - last.nodes) // s._fanout["wide"]  # commutativity matches more than the shared cap
    assert not last.changed and not last.starved and r.nodes < nodes // 2


@pytest.mark.slow  # make test stays within 6 minutes (its time moved to make test-slow)
def test_generator_unions_are_cut_to_the_node_budget():
    """A generator that wants to add far more terms than the budget gets a prefix that fits."""
    def flood(session, data):
        root = data.roots[0]  # relu(...): relu(relu(...(root))) = root, sound at any depth
        term = root
        for _ in range(200):
            term = Term(Op.RELU, (term,))
            session.union(root, term)
        return 200

    sched = Schedule((Generator("flood", "relu^k(relu(x)) = relu(x) (200 unions)", flood),))
    s, r = run(chain(3), sched, nodes=40, iterations=3)
    assert s.num_nodes() <= 40 and all(p.nodes <= 40 for p in r.phases)


def test_iteration_limit():
    _, r = run(chain(8), iterations=2, nodes=10**6)
    assert r.stop_reason is StopReason.ITERATION_LIMIT and r.iterations == 2


def test_time_limit_overshoots_by_at_most_one_phase():
    def slow(session, data):
        time.sleep(0.15)
        return 0

    nap = Generator("nap", "nothing changes", slow)
    sched = Schedule((nap,) + AC.phases)
    _, r = run(chain(8), sched, time_s=0.4, iterations=100, nodes=10**6)
    assert r.stop_reason is StopReason.TIME_LIMIT
    longest = max(p.time_s for p in r.phases)
    assert r.time_s <= 0.4 + longest + 0.5  # + the final export


def test_same_input_same_egraph_and_export():
    def export():
        s, _ = run(chain(5), iterations=4)
        d = s.export()
        return [(c.id, c.type, c.name, [(n.op, n.children, n.leaf, n.output) for n in c.nodes])
                for c in d.classes.values()], d.roots

    assert export() == export()


def test_progress_is_reported_after_every_phase():
    seen = []
    s = Session(Limits(iterations=3))
    s.add_graph(chain(4))
    r = s.run(AC, progress=lambda step, nodes, elapsed: seen.append((step, nodes, elapsed)))
    assert len(seen) == len(r.phases)
    assert [n for _, n, _ in seen] == [p.nodes for p in r.phases]
    assert all(e2 >= e1 for (_, _, e1), (_, _, e2) in zip(seen, seen[1:]))


def test_generator_unions_new_terms():
    """A generator reads the export and unions a new term into an e-class by its id."""
    def double_is_sum(session, data):
        made = 0
        for cid, cls in data.classes.items():
            for n in cls.nodes:
                if n.op is Op.ADD and n.children[0] == n.children[1]:
                    two = session.add_weight(np.full((), 2.0, np.float32), hint="two")
                    session.union(cid, Term(Op.MUL, (two, n.children[0])))
                    made += 1
        return made

    b = GraphBuilder("g")
    x = b.input("x", (3,))
    g = b.build(b.add(x, x))
    s = Session()
    (root,) = s.add_graph(g)
    r = s.run(Schedule((Generator("double", "x + x = 2 * x", double_is_sum),)))
    assert r.rules["double"].matches >= 1
    b2 = GraphBuilder("g")
    x2 = b2.input("x", (3,))
    two = s.add_weight(np.full((), 2.0, np.float32), hint="two")
    (other,) = s.add_graph(b2.build(b2.mul(b2.weight(two.leaf[1], s.weights[two.leaf[1]]), x2)), root=False)
    assert s.equivalent(root, other)
    data = s.export()
    assert data.weights[two.leaf[1]].shape == ()


def test_queued_unions_apply_together_with_congruence():
    """`Session.union` queues a row of the pending-union table (no rebuild per union); the next
    read applies every queued union, congruence included: a = b makes relu(a) and relu(b) one
    e-node. The table is not an e-node of the count."""
    b = GraphBuilder("g")
    x = b.input("x", (4,))
    a, c = b.add(x, x), b.mul(x, x)
    g = b.build(b.relu(a), b.relu(c), a, c)
    s = Session()
    ra, rc, xa, xc = s.add_graph(g)
    before = s.num_nodes()
    assert not s.equivalent(xa, xc) and not s.equivalent(ra, rc)
    s.union(xa, xc)
    s.union(xa, xa)  # a no-op union queues too
    assert s.equivalent(xa, xc)
    assert s.equivalent(ra, rc)  # congruence after the one rebuild
    assert s.num_nodes() == before - 1  # the two relus are one e-node now
    data = s.export()
    assert sum(1 for cls in data.classes.values() for n in cls.nodes if n.op is Op.RELU) == 1


def test_a_rule_that_does_not_compile_names_its_ruleset():
    bad = Ruleset("broken", (Rule("nonsense", "?", rewrite("(NoSuchOp a)", "a")),))
    s = Session()
    s.add_graph(chain(2))
    with pytest.raises(EinsatError, match="broken"):
        s.run(Schedule((bad,)))


def test_export_needs_a_program():
    with pytest.raises(EinsatError, match="add_graph"):
        Session().export()


def test_conflicting_programs_are_errors():
    s = Session()
    s.add_graph(chain(2))
    b = GraphBuilder("other")
    x = b.input("x0", (5,))
    with pytest.raises(EinsatError, match="x0"):
        s.add_graph(b.build(b.relu(x)))


def test_two_rulesets_of_one_name_are_an_error():
    s = Session()
    s.add_graph(chain(2))
    s.run(AC)
    other = Schedule((Ruleset("ac", (COMM,)),))
    with pytest.raises(EinsatError, match="'ac'"):
        s.run(other)
    s.run(AC)  # the same ruleset again is fine


def test_equivalent_is_false_for_different_terms():
    """`Session.equivalent` answers False (not an egglog panic) for terms in different e-classes."""
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    s = Session()
    (relu,) = s.add_graph(b.build(b.relu(x)))
    b2 = GraphBuilder("g")
    (tanh,) = s.add_graph(b2.build(b2.tanh(b2.input("x", (3,)))), root=False)
    assert not s.equivalent(relu, tanh)
    assert s.equivalent(relu, relu)


def _matmul_program():
    b = GraphBuilder("mm")
    x = b.input("x", (4, 3), np.float64)
    w = b.weight("w", np.random.default_rng(1).standard_normal((3, 5)))
    return b.build(b.relu(b.matmul(x, w)), names=["y"])


def test_add_subgraph_puts_a_program_over_existing_classes_and_unions_its_outputs():
    """(x w) = ((w^T x^T))^T: the subgraph enters over x's e-class with its own weight, its output
    joins the matmul's e-class, and every e-node still computes its class's value."""
    from einsat.testing.egraphs import assert_consistent

    g = _matmul_program()
    s = Session()
    s.add_graph(g)
    data = s.export()
    x_cls = next(c for c, cls in data.classes.items() if any(n.leaf == ("input", "x") for n in cls.nodes))
    mm_cls = next(c for c, cls in data.classes.items() if any(n.op is Op.MATMUL for n in cls.nodes))
    b = GraphBuilder("transposed")
    x = b.input("x", (4, 3), np.float64)
    wt = b.weight("wt", np.ascontiguousarray(g.weights["w"].T))
    sub = b.build(b.transpose(b.matmul(wt, b.transpose(x, perm=(1, 0))), perm=(1, 0)))
    (out,) = s.add_subgraph(sub, {"x": x_cls}, outputs=[mm_cls])
    assert s.equivalent(out, mm_cls)
    data = s.export()
    assert_consistent(data)
    (joined,) = [cls for cls in data.classes.values() if any(n.op is Op.MATMUL and n.children[0] == x_cls
                                                            for n in cls.nodes)]
    assert sorted(n.op.value for n in joined.nodes) == ["matmul", "transpose"]
    assert len(data.weights) == 2


def test_add_subgraph_refuses_unbound_or_mistyped_inputs():
    g = _matmul_program()
    s = Session()
    s.add_graph(g)
    data = s.export()
    x_cls = next(c for c, cls in data.classes.items() if any(n.leaf == ("input", "x") for n in cls.nodes))
    b = GraphBuilder("sub")
    z = b.input("z", (4, 3), np.float32)
    sub = b.build(b.relu(z))
    with pytest.raises(EinsatError, match="not bound"):
        s.add_subgraph(sub, {})
    with pytest.raises(EinsatError, match=r"\[4, 3\] f32.* f64"):
        s.add_subgraph(sub, {"z": x_cls})
    with pytest.raises(EinsatError, match="outputs"):
        b2 = GraphBuilder("sub2")
        s.add_subgraph(b2.build(b2.relu(b2.input("z", (4, 3), np.float64))), {"z": x_cls}, outputs=[])
