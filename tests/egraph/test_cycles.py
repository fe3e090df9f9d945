"""Cycle filtering keeps an acyclic e-graph that still holds every e-class's shallowest term."""

from hypothesis import given

from einsat import GraphBuilder
from einsat.egraph import ABSENT, Limits, Rule, Ruleset, Schedule, Session
from einsat.egraph.cycles import filter_cycles
from einsat.egraph.patterns import pat
from einsat.egraph.rules import rewrite
from tests.extract.egraphs import random_egraphs


def has_cycle(data) -> bool:
    state = {}

    def visit(c) -> bool:
        state[c] = 1
        for n in data.classes[c].nodes:
            for k in n.children:
                if k == ABSENT:
                    continue
                if state.get(k) == 1 or (k not in state and visit(k)):
                    return True
        state[c] = 2
        return False

    return any(c not in state and visit(c) for c in data.classes)


@given(random_egraphs(max_classes=8, max_nodes=4))
def test_filtered_egraphs_are_acyclic_and_keep_shallowest_terms(data):
    heights = data.heights()
    out = filter_cycles(data)
    assert not has_cycle(out)
    assert sorted(out.classes) == sorted(data.classes) and out.roots == data.roots
    assert out.heights() == heights  # the shallowest terms all survived
    for cid, cls in out.classes.items():
        assert cls.nodes and all(n in data.classes[cid].nodes for n in cls.nodes)


def test_session_export_drops_the_nodes_that_close_cycles():
    b = GraphBuilder("tt")
    x = b.input("x", (2, 3))
    g = b.build(b.relu(b.transpose(x, perm=(1, 0))))
    t2 = Rule("t-inverse", "x = transpose(transpose(x))",
              rewrite(pat.transpose("x", perm=(1, 0)),
                      pat.transpose(pat.transpose(pat.transpose("x", perm=(1, 0)), perm=(1, 0)), perm=(1, 0))))
    sched = Schedule((Ruleset("cyc", (t2,)),))
    exports = {}
    for acyclic in (False, True):
        s = Session(Limits(iterations=2, acyclic=acyclic))
        s.add_graph(g)
        s.run(sched)
        exports[acyclic] = s.export()
    assert has_cycle(exports[False]) and not has_cycle(exports[True])
    assert exports[True].num_nodes() < exports[False].num_nodes()
    assert exports[True].heights() == exports[False].heights()
