"""Every figure of an extraction is a program's cost under the model's `graph_cost`, also for a
model whose program cost is not the sum of its e-nodes' (onnxruntime's fusion groups, a call's
overhead): the starts are the programs they rebuild, costed as programs (issue 31: the input's
start read 41,215.68 beside the table's 27,413.32 for the same program under `--cost cpu`)."""

import pytest

import einsat
from einsat.cost.model import RooflineCost
from einsat.egraph import Limits
from einsat.ir import GraphBuilder


class PerNodeOverhead(RooflineCost):
    """The H100 roofline plus a dispatch cost per program node that the e-nodes do not carry:
    a program's cost is not the sum of its e-nodes' costs."""

    def __init__(self):
        super().__init__("h100")
        self.name = "h100-dispatch"

    def graph_cost(self, graph) -> float:
        return super().graph_cost(graph) + 100.0 * len(graph.nodes)


def block():
    """relu(x @ w1 + x @ w2): four nodes, one (fused) after optimization."""
    b = GraphBuilder("block")
    x = b.input("x", (8, 16))
    w1, w2 = b.weight("w1", (16, 16)), b.weight("w2", (16, 16))
    return b.build(b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2))))


def test_the_starts_are_their_programs_costs_under_a_non_additive_model():
    model = PerNodeOverhead()
    g = block()
    r = einsat.optimize(g, cost=model, limits=Limits(nodes=2000, iterations=4, time_s=60, extract_s=2)).report
    assert r.cost_after < r.cost_before and sum(r.ops_after.values()) < len(g.nodes)
    assert r.extraction.starts["input"] == pytest.approx(model.graph_cost(g))  # 4 nodes: 400 of dispatch
    assert r.extraction.starts["input"] == pytest.approx(r.cost_before)
    assert r.extraction.cost == pytest.approx(r.cost_after)
    assert min(r.extraction.starts.values()) == pytest.approx(r.cost_after)  # the chosen start is the result
