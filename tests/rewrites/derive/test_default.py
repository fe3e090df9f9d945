"""EinNet's derivations in the default schedule: `einsat.optimize` finds the derived forms without
opting in where the cost model says a derivation can pay, searches nothing where it cannot, and
is bounded by work, not time (deterministic)."""

import numpy as np
import pytest

import einsat
from einsat.cost.model import RooflineCost
from einsat.egraph import Limits, Schedule, Session
from einsat.ir import Op
from einsat.rewrites.derive import generator
from einsat.rewrites.derive.generator import DEFAULT_LIMITS, can_pay, default_derive_generator, floors
from tests.rewrites.derive import cases
from tests.work_bounded import by_work, ended_by_work

F64 = np.float64

CASES = {  # name: (graph, cost model, ops the optimized program must have, ops it must not)
    "fig3_conv3x3": (lambda: cases.conv3x3(1, 16, 8, 8, F64), cases.DerivedCheaper(), {"matmul": 1, "eop": 1},
                     {"conv"}),
    "fig6_conv5x5": (lambda: cases.conv5x5(2, 8, 16, 4, F64), cases.DerivedCheaper(winograd=True), {"eop": 1},
                     set()),
    "conv_transpose": (lambda: cases.conv_transpose(2, 12, 3, 6, F64), cases.DerivedCheaper(),
                       {"matmul": 1, "eop": 1}, {"conv_transpose"}),
    "fig14_g2bmm": (lambda: cases.g2bmm(2, 2000, 64, 200, 4), cases.DerivedCheaper(), {"g2bmm": 1, "eop": 3}, set()),
    "fig15_gcn": (lambda: cases.gcn_pair(1, 16, 12, 8, 5, F64), cases.DerivedCheaper(),
                  {"matmul": 1, "batchmatmul": 1}, {"conv"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimize_finds_the_derived_form_with_the_default_rules(name):
    build, model, want, gone = CASES[name]
    g = build()
    # rules: the default schedule; a time limit that does not bind on a loaded machine (saturation
    # cut short by time is the one thing that is not deterministic)
    result = einsat.optimize(g, cost=model, limits=Limits(iterations=6, time_s=120.0))
    got = result.graph.op_counts()
    for op, count in want.items():
        assert got.get(op, 0) == count, (name, got)
    assert not gone & set(got), (name, got)
    if name == "fig6_conv5x5":  # no 5×5 window is left
        assert all(result.graph.types[n.inputs[1]].shape[2:] != (5, 5) for n in result.graph.nodes if n.op is Op.CONV)
    assert result.report.cost_after < result.report.cost_before
    assert result.report.verification is not None and result.report.verified
    assert result.report.saturation.rule_matches["einnet-derive"] > 0


@pytest.mark.parametrize("name", ["fig3_conv3x3", "fig6_conv5x5", "conv_transpose", "fig14_g2bmm"])
def test_under_the_roofline_no_derivation_can_pay_and_none_is_searched(name):
    g = CASES[name][0]()
    s = Session(Limits(iterations=1), cost=RooflineCost("h100"))
    s.add_graph(g)
    data = s.export()
    (node,) = [n for c in data.classes.values() for n in c.nodes if n.op in generator.DERIVED]
    assert can_pay(s.cost, node, data) < 0
    report = s.run(Schedule((default_derive_generator(),)))
    assert report.rules["einnet-derive"].matches == 0
    assert can_pay(cases.DerivedCheaper(), node, data) > 0  # where the operator runs slower, it can


def test_the_floors_do_the_operators_work_and_move_its_bytes():
    for build in (lambda: cases.conv3x3(1, 16, 8, 8, F64), lambda: cases.conv_transpose(2, 12, 3, 6, F64),
                  lambda: cases.g2bmm(2, 200, 64, 20, 4), lambda: cases.conv5x5(2, 8, 16, 4, F64)):
        g = build()
        s = Session(Limits())
        s.add_graph(g)
        data = s.export()
        (node,) = [n for c in data.classes.values() for n in c.nodes if n.op in generator.DERIVED]
        n = next(x for x in g.nodes if x.op in generator.DERIVED)
        ins, outs = g.node_types(n)
        flops, moved = n.definition.flops(ins, outs, n.attrs), n.definition.bytes(ins, outs, n.attrs)
        (mm, (a, b), (out,)), (relu, (x,), (y,)) = floors(node, data)
        assert mm is Op.MATMUL and relu is Op.RELU
        assert a.shape[1] == b.shape[0] and out.shape == (a.shape[0], b.shape[1])
        work = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        assert flops <= work < flops + 2 * a.shape[0] * b.shape[1]  # at least its FLOPs, one k-step more at most
        assert moved <= x.nbytes + y.nbytes < moved + 2 * x.dtype.itemsize


def test_the_default_search_is_bounded_by_work_not_time():
    assert DEFAULT_LIMITS.deadline_s == float("inf") and DEFAULT_LIMITS.max_states > 0
    g = einsat.GraphBuilder("three")
    x = g.input("x", (1, 8, 6, 6))
    y = g.conv(x, g.weight("w1", (8, 8, 3, 3)), padding=1)
    y = g.conv(y, g.weight("w2", (8, 8, 5, 5)), padding=2)
    program = g.build(g.conv(y, g.weight("w3", (8, 8, 3, 3)), padding=1, dilation=1))
    model = cases.DerivedCheaper()

    def searched(round_states):
        generator._MEMO.clear()
        s = Session(Limits(iterations=1, derive_states=round_states), cost=model)
        s.add_graph(program)
        s.run(Schedule((default_derive_generator(),)))
        return s.export().num_nodes()

    one, every = searched(1), searched(10 ** 6)
    assert one < every  # a round stops searching once its states are spent
    assert searched(1) == one and searched(10 ** 6) == every  # the same input, the same e-graph


def test_optimize_with_the_default_rules_is_deterministic():
    g = cases.conv_transpose(2, 12, 3, 6, F64)
    model = cases.DerivedCheaper()
    # the rounds end the search, the clocks far off: a time limit may stop a run early, and then
    # its program may depend on the load (#27)
    first = einsat.optimize(g, cost=model, **by_work(iterations=4))
    generator._MEMO.clear()
    second = einsat.optimize(g, cost=model, **by_work(iterations=4))
    for run in (first, second):
        ended_by_work(run.report)
    assert str(first.graph) == str(second.graph)
