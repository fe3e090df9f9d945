"""The distance-guided search finds EinNet's case studies with no code written for one case
(EinNet Fig. 3/5, Fig. 6, §7.3's transposed convolution, Fig. 14), on Table 3's shapes and on
small ones of our own, and every candidate computes what its source does."""

import numpy as np
import pytest

import einsat
from einsat.ir import Op
from einsat.rewrites.derive.search import SearchLimits, derive
from tests.rewrites.derive import cases


def moving(cand) -> list[str]:
    """The ops that touch activations (weight-only ones fold; views move nothing)."""
    fixed = set(cand.const)
    out = []
    for n in cand.graph.nodes:
        if all(i in fixed for i in n.inputs if i):
            fixed.update(n.outputs)
        elif n.op not in (Op.RESHAPE, Op.IDENTITY):
            out.append(n.op.value)
    return out


def operator(cand, op: Op):
    return next(n for n in cand.graph.nodes if n.op is op)


def search(g, **limits):
    e, types, const, flops = cases.source(g)
    report = derive(e, types, const, SearchLimits(**limits), flops=flops)
    assert report.stop == "exhausted", report.stop
    return report


def check_candidates(g, report, seed=0, only=None):
    """Every candidate (or those in `only`) computes the source's output."""
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(g.types[n].shape).astype(g.types[n].dtype) for n in g.inputs}
    args = [feeds[i] if i in feeds else np.asarray(g.weights[i]) for i in g.nodes[0].inputs]
    want = einsat.run(g, feeds)[g.outputs[0]]
    tol = 1e-9 if want.dtype == np.float64 else 1e-4  # fp32: thousands of terms summed in another order
    for c in report.candidates if only is None else only:
        got = einsat.run(c.graph, {f"in{k}": a for k, a in enumerate(args)})[c.graph.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=str(c.graph))


F64 = np.float64
SMALL = {
    "conv3x3": lambda: cases.conv3x3(2, 16, 6, 8, F64),
    "conv5x5": lambda: cases.conv5x5(2, 8, 16, 4, F64),
    "conv_transpose": lambda: cases.conv_transpose(2, 12, 3, 6, F64),
    "g2bmm": lambda: cases.g2bmm(2, 50, 64, 3, 4, F64),
}


def fig3b(c):
    return moving(c) == ["matmul", "eop"]


def fig6(c):
    if moving(c) != ["conv", "eop"]:
        return False
    conv = operator(c, Op.CONV)
    w = c.graph.types[conv.inputs[1]].shape
    return w[2:] == (3, 3) and conv.attrs["dilation"] == (1, 1)


def g2bmm_reordered(c):
    return "g2bmm" in moving(c) and operator(c, Op.G2BMM).attrs["dilation"] == 1


TARGETS = {"conv3x3": fig3b, "conv5x5": fig6, "conv_transpose": fig3b, "g2bmm": g2bmm_reordered}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_case_study_is_found_and_every_candidate_is_equal(name):
    g = SMALL[name]()
    report = search(g)
    assert any(TARGETS[name](c) for c in report.candidates), [moving(c) for c in report.candidates]
    check_candidates(g, report)


PAPER = {"conv3x3": cases.conv3x3, "conv5x5": cases.conv5x5, "conv_transpose": cases.conv_transpose,
         "g2bmm": cases.g2bmm}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_the_case_study_is_found_on_table3_shapes(name):
    g = PAPER[name]()
    report = search(g)
    found = [c for c in report.candidates if TARGETS[name](c)]
    assert found, [moving(c) for c in report.candidates]
    if name in ("conv3x3", "conv_transpose"):  # small enough to run here (the paper's forms)
        check_candidates(g, report, only=found)


def test_the_fig14_form_reorders_rows_by_the_dilation():
    g = cases.g2bmm(1, 40, 64, 3, 4, F64)
    report = search(g)
    c = next(c for c in report.candidates if g2bmm_reordered(c))
    band = operator(c, Op.G2BMM)
    a = c.graph.types[band.inputs[0]].shape
    assert a == (4, 10, 64)  # [Z·D, M/D, K]: the rows of each residue mod 4 side by side
    assert band.attrs["width"] == 3


def test_fingerprints_prune_states_and_the_search_is_deterministic():
    g = SMALL["conv3x3"]()
    with_fp = search(g, max_depth=3)
    without = search(g, max_depth=3, fingerprints=False)
    assert with_fp.unique <= with_fp.states < without.states
    again = search(g, max_depth=3)
    assert [str(c.graph) for c in again.candidates] == [str(c.graph) for c in with_fp.candidates]


def test_converging_derivation_reaches_operators_explorative_depth_alone_does_not():
    g = SMALL["conv3x3"]()
    assert not search(g, max_depth=1, converging=False).candidates  # substitutions converge only
    assert any(fig3b(c) for c in search(g, max_depth=1).candidates)


def test_the_state_bound_stops_the_search():
    g = SMALL["conv5x5"]()
    e, types, const, flops = cases.source(g)
    report = derive(e, types, const, SearchLimits(max_states=20), flops=flops)
    assert report.stop == "state limit" and report.states == 21
