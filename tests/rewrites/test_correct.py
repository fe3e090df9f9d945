"""A correction fused into the reshape/transpose chain after it (`rewrites.post.correct`).

Each rule by example (soundness on random inputs, goal in the e-graph, `harness`), then PET
Figure 1's chain (reshape, transpose, reshape after the correction) becoming one fused_correct
that extraction picks, and the cost of an unfused correction: its fix ops plus one copy of the
region.
"""

from math import prod

import numpy as np
from hypothesis import strategies as st

from einsat import GraphBuilder, Op
from einsat.cost.model import RooflineCost
from einsat.egraph import Limits, Schedule, Session
from einsat.extract.extraction import extract
from einsat.rewrites.mutate.admit import admit
from einsat.rewrites.post.correct import correct_fusion_rules
from einsat.testing.egraphs import same_outputs
from einsat.testing.mutants import batch_to_width
from tests.rewrites.harness import Case, Leaves, parametrize, shapes


@st.composite
def corrections(draw):
    """A mutant, a fix filling a region of it, a view of it, a permutation of the view, a final shape."""
    shape = draw(shapes(1, 4))
    starts = tuple(draw(st.integers(0, d)) for d in shape)
    ends = tuple(draw(st.integers(s, d)) for s, d in zip(starts, shape))
    view = draw(st.sampled_from([tuple(reversed(shape)), (prod(shape),), (1,) + shape]))
    perm = tuple(draw(st.permutations(range(len(view)))))
    permuted = tuple(view[p] for p in perm)
    final = draw(st.sampled_from([(prod(shape),), (1,) + permuted]))
    return Leaves({"m": shape, "f": tuple(e - s for s, e in zip(starts, ends))}, {},
                  {"region": starts + ends, "view": view, "perm": perm, "shape": final,
                   "perm0": tuple(draw(st.permutations(range(len(shape)))))}, draw(st.integers(0, 2 ** 16)))


def corrected(b, t, p):
    return b.correct(t["m"], t["f"], region=p.attrs["region"])


def fused(b, t, p, view=(), perm=(), shape=()):
    return b.fused_correct(t["m"], t["f"], region=p.attrs["region"], view=view, perm=perm, shape=shape)


CASES = [
    Case("correct-reshape-fuse", corrections(), lambda b, t, p: b.reshape(corrected(b, t, p), shape=p.attrs["view"]),
         lambda b, t, p: fused(b, t, p, view=p.attrs["view"])),
    Case("correct-transpose-fuse", corrections(),
         lambda b, t, p: b.transpose(corrected(b, t, p), perm=p.attrs["perm0"]),
         lambda b, t, p: fused(b, t, p, perm=p.attrs["perm0"])),
    Case("fused-correct-transpose", corrections(),
         lambda b, t, p: b.transpose(fused(b, t, p, view=p.attrs["view"]), perm=p.attrs["perm"]),
         lambda b, t, p: fused(b, t, p, view=p.attrs["view"], perm=p.attrs["perm"])),
    Case("fused-correct-view", corrections(),
         lambda b, t, p: b.reshape(fused(b, t, p, view=p.attrs["view"]), shape=(prod(p.inputs["m"]),)),
         lambda b, t, p: fused(b, t, p, view=(prod(p.inputs["m"]),))),
    Case("fused-correct-reshape", corrections(),
         lambda b, t, p: b.reshape(fused(b, t, p, view=p.attrs["view"], perm=p.attrs["perm"]), shape=p.attrs["shape"]),
         lambda b, t, p: fused(b, t, p, view=p.attrs["view"], perm=p.attrs["perm"], shape=p.attrs["shape"])),
    Case("fused-correct-reshape", corrections(),  # the whole chain of a layout mutant, grown step by step
         lambda b, t, p: b.reshape(b.transpose(b.reshape(corrected(b, t, p), shape=p.attrs["view"]),
                                               perm=p.attrs["perm"]), shape=p.attrs["shape"]),
         lambda b, t, p: fused(b, t, p, view=p.attrs["view"], perm=p.attrs["perm"], shape=p.attrs["shape"]),
         steps=3, also=("correct-reshape-fuse", "fused-correct-transpose"), variant="chain"),
]

test_sound, test_goal = parametrize(CASES)


def figure_1():
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = GraphBuilder("conv")
    original = b.build(b.conv(b.input("x", (4, 3, 5, 6)), b.weight("w", w), padding=1))
    return original, admit(original, batch_to_width(4, 3, 5, 6, w, seed=0)).graph


def test_figure_1_the_correction_and_the_layout_chain_after_it_are_one_op():
    original, fixed = figure_1()
    ops = [n.op for n in fixed.nodes]
    assert ops[-4:] == [Op.CORRECT, Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE]
    s = Session(Limits())
    s.add_graph(fixed)
    report = s.run(Schedule((correct_fusion_rules(),)))
    assert report.stop_reason.value == "saturated"
    cost = RooflineCost("h100")
    result = extract(s.export(), cost)
    (node,) = [n for n in result.graph.nodes if n.op is Op.FUSED_CORRECT]
    assert node.attrs["view"] == (2, 4, 5, 2, 6) and node.attrs["perm"] == (0, 3, 1, 2, 4)
    assert node.attrs["shape"] == (4, 4, 5, 6)
    assert not any(n.op is Op.CORRECT for n in result.graph.nodes)
    transposes = [sum(n.op is Op.TRANSPOSE for n in g.nodes) for g in (fixed, result.graph)]
    assert transposes == [2, 1]  # the input's layout transpose stays; the output's is in the fused op
    assert result.cost < cost.graph_cost(fixed)
    same_outputs(fixed, result.graph, rtol=1e-6, atol=1e-6)
    same_outputs(original, result.graph, rtol=1e-5, atol=1e-5)


def test_an_unfused_correction_costs_its_fix_ops_and_one_copy_of_the_region():
    _, fixed = figure_1()
    cost = RooflineCost("h100")
    dev = cost.device
    (node,) = [n for n in fixed.nodes if n.op is Op.CORRECT]
    ins, outs = fixed.node_types(node)
    region = ins[1].nbytes  # the fix fills the region
    assert ins[1].nbytes < ins[0].nbytes / 5  # (a small region of the mutant's output)
    assert cost.node_cost(node.op, node.attrs, ins, outs) == dev.launch_us + 2 * region / dev.bandwidth * 1e6
    fix_ops = [n for n in fixed.nodes if n.outputs[0].startswith("fix/") and n is not node
               and "mutant" not in n.outputs[0]]
    assert {n.op for n in fix_ops} >= {Op.CONV, Op.SLICE, Op.CONCAT}
    # the corrected program costs the mutant's ops, the fix ops and that copy, nothing else
    mutant_ops = [n for n in fixed.nodes if n not in fix_ops and n is not node]
    total = sum(cost.node_cost(n.op, n.attrs, *fixed.node_types(n)) for n in mutant_ops + fix_ops)
    assert abs(cost.graph_cost(fixed) - total - cost.node_cost(node.op, node.attrs, ins, outs)) < 1e-9
    # fused into the layout chain the correction costs the same copy, and the chain's views are gone
    fused = GraphBuilder("fused")
    m, f = fused.input("m", ins[0].shape), fused.input("f", ins[1].shape)
    g = fused.build(fused.fused_correct(m, f, region=node.attrs["region"], view=(2, 4, 5, 2, 6),
                                        perm=(0, 3, 1, 2, 4), shape=(4, 4, 5, 6)))
    (fnode,) = g.nodes
    assert cost.node_cost(fnode.op, fnode.attrs, *g.node_types(fnode)) == cost.node_cost(node.op, node.attrs, ins, outs)
