"""Correction fusion as an e-graph generator (`rewrites.mutate.correction_fusion`).

Soundness: hypothesis draws pairs of convs of one weight (test_fusion's strategy); after the
generator's rounds every e-node of every e-class computes its e-class's value on random inputs.
Goal: PET Figure 1's corrected mutant, entered unfused, becomes one conv over the pairs of images
and both seams (Figure 6) in two rounds, with the separate form still there; under a cost model
where a conv launch dominates, extraction picks the fused conv (without fusion it keeps the
original), and the result verifies.
"""

import numpy as np
from hypothesis import given, settings

from einsat import GraphBuilder, Op
from einsat.cost.model import RooflineCost
from einsat.egraph import Schedule, Session
from einsat.egraph.rules import Generator
from einsat.extract.extraction import extract
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType
from einsat.rewrites.mutate.admit import admit
from einsat.rewrites.mutate.correction_fusion import (
    correction_convs,
    correction_fusion_generator,
    fuse_convs,
)
from einsat.testing.egraphs import assert_consistent, same_outputs
from einsat.testing.mutants import batch_to_width
from einsat.verify import find_differences
from tests.rewrites.mutate.test_fusion import conv_pairs
from tests.work_bounded import work_limits


def every_conv(session, data):
    convs = [(cid, n) for cid in sorted(data.classes) for n in data.classes[cid].nodes if n.op is Op.CONV]
    return fuse_convs(session, data, convs)


@settings(max_examples=25, deadline=None)
@given(conv_pairs())
def test_every_fused_form_computes_its_e_class(case):
    g, axis = case
    s = Session(work_limits())  # the round is not cut by the clock (#27: not the load)
    s.add_graph(g)
    report = s.run(Schedule((Generator("fuse-all", "law", every_conv),)))
    assert sum(r.counts["fused"] for r in report.rounds) == 1  # the two convs, once
    data = s.export()
    splits = [n for c in data.classes.values() for n in c.nodes if n.op is Op.SPLIT]
    assert {n.attrs["axis"] for n in splits} <= {axis, 0}
    assert assert_consistent(data, rtol=1e-5, atol=1e-5) > 0


class LaunchBound(RooflineCost):
    """The H100 roofline with a conv launch of 50 µs (one conv beats three), and 100 µs more for a
    conv over a batch of 4 (a slow algorithm for that shape, as in PET Table 4): the mutant pays."""

    def node_cost(self, op, attrs, ins, outs):
        extra = 0.0
        if op is Op.CONV:
            extra = 50.0 + (100.0 if ins[0].shape[0] == 4 else 0.0)
        return super().node_cost(op, attrs, ins, outs) + extra


def figure_1(n=4, c=3, h=5, w=6, f=4, seed=0):
    weight = np.random.default_rng(seed).standard_normal((f, c, 3, 3)).astype(np.float32)
    b = GraphBuilder("conv")
    original = b.build(b.conv(b.input("x", (n, c, h, w)), b.weight("w", weight), padding=1))
    fixed = admit(original, batch_to_width(n, c, h, w, weight, seed=seed)).graph
    assert sum(node.op is Op.CONV for node in fixed.nodes) == 3  # the mutant conv and two fix convs
    return original, fixed


def entered(original: Graph, *corrected: Graph) -> Session:
    """A session holding `original` and each corrected program unioned with its output (the
    weight bound to the original's weight e-class), before any fusion."""
    s = Session(work_limits(), cost=LaunchBound("h100"))  # rounds not cut by the clock (#27)
    (out,) = s.add_graph(original)
    data = s.export()
    leaf = {n.leaf: cid for cid, cls in data.classes.items() for n in cls.nodes if n.leaf}
    for k, fixed in enumerate(corrected):
        w = np.asarray(original.weights["w"])
        g = Graph(fixed.nodes, {**fixed.input_types(), "w": TensorType.of(w)}, fixed.outputs, {}, name=f"fixed{k}")
        s.add_subgraph(g, {"x": leaf[("input", "x")], "w": leaf[("weight", "w")]}, outputs=[out])
    return s


def test_figure_6_the_mutant_and_its_fixes_become_one_conv_chosen_by_extraction():
    original, fixed = figure_1()
    s = entered(original, fixed)
    assert len(correction_convs(s.export())) == 3
    report = s.run(Schedule((correction_fusion_generator(),)))
    assert [r.counts["fused"] for r in report.rounds] == [1, 1, 0]  # a chain of two steps, then nothing new
    assert report.stop_reason.value == "saturated"
    data = s.export()
    shapes = {data.classes[n.children[0]].type.shape for c in data.classes.values() for n in c.nodes if n.op is Op.CONV}
    # the separate convs stay; the chain's last conv reads the pairs side by side (12 columns), then
    # a zero, the 2 seam columns, a zero, the other 2 (as fusion.fuse makes it in a program)
    assert {(2, 3, 5, 12), (2, 3, 5, 2), (2, 3, 5, 12 + 1 + 2 + 1 + 2)} <= shapes
    assert_consistent(data, rtol=1e-5, atol=1e-5)
    result = extract(data, LaunchBound("h100"))
    convs = [n for n in result.graph.nodes if n.op is Op.CONV]
    assert [result.graph.types[n.inputs[0]].shape for n in convs] == [(2, 3, 5, 18)]
    assert find_differences(original, result.graph).equivalent
    unfused = extract(entered(original, fixed).export(), LaunchBound("h100"))
    # before fusion the three convs of the corrected mutant cost more than the original: it stays
    assert [unfused.graph.types[n.inputs[0]].shape for n in unfused.graph.nodes if n.op is Op.CONV] == [(4, 3, 5, 6)]
    assert result.cost < unfused.cost
    same_outputs(original, result.graph, rtol=1e-5, atol=1e-5)
