"""EinNet's inter-expression rules (§4.2): splitting, merging and fusing expressions keep values, and
their e-graph generators keep every e-class consistent."""

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from einsat.egraph import Limits, Schedule, Session
from einsat.ir import GraphBuilder, Op
from einsat.ir.expr import Call, Expr, Iter, evaluate, fingerprint, var
from einsat.ir.expr.build import read
from einsat.ir.expr.nodes import relabel_inputs, scopes
from einsat.rewrites.derive.inter import (
    eop_fusion_generator,
    fuse,
    matmul_merge_generator,
    merge_expressions,
    split_expression,
)
from einsat.testing.egraphs import assert_consistent
from einsat.testing.expressions import expression_inputs, op_expressions


@settings(max_examples=20)
@given(op_expressions(), st.data())
def test_splitting_an_expression_is_a_concat_of_the_parts(case, data):
    e, shapes = case
    axis = data.draw(st.integers(0, len(e.loops) - 1))
    at = data.draw(st.integers(0, e.loops[axis].size))
    first, second = split_expression(e, axis, at)
    xs = expression_inputs(shapes)
    np.testing.assert_allclose(np.concatenate([evaluate(first, xs), evaluate(second, xs)], axis=axis),
                               evaluate(e, xs), rtol=1e-12, atol=1e-12)


@settings(max_examples=20)
@given(op_expressions(("conv", "matmul", "g2bmm")))
def test_merging_two_expressions_is_a_stack_of_both(case):
    e1, shapes = case
    assume(not scopes(e1))  # a bias is a scope: merging stacks plain expressions only
    n = len(shapes)
    e2 = relabel_inputs(e1, {k: n + k for k in range(n)})  # the same computation on other tensors
    merged, pairs = merge_expressions(e1, e2)
    xs = expression_inputs(shapes, 1) + expression_inputs(shapes, 2)
    stacked = [np.stack([xs[a], xs[b]]) for a, b in pairs]
    want = np.stack([evaluate(e1, xs), evaluate(e2, xs)])
    np.testing.assert_allclose(evaluate(merged, stacked), want, rtol=1e-12, atol=1e-12)


def test_merging_refuses_different_computations_and_reads_shared_inputs_once():
    a = Expr((Iter("i", 0, 3),), (), Call("mul", (read(0, "i"), read(1, "i"))))
    b = Expr((Iter("i", 0, 3),), (), Call("add", (read(0, "i"), read(2, "i"))))
    assert merge_expressions(a, b) is None
    c = Expr((Iter("i", 0, 3),), (), Call("mul", (read(0, "i"), read(2, "i"))))
    merged, pairs = merge_expressions(a, c)
    assert pairs == [(0, 0), (1, 2)]
    x, y, z = expression_inputs([(3,), (3,), (3,)])
    np.testing.assert_allclose(evaluate(merged, [x, np.stack([y, z])]), np.stack([x * y, x * z]))


@settings(max_examples=20)
@given(op_expressions(), st.integers(0, 2**16))
def test_fusing_a_producer_into_its_reader(case, seed):
    inner, shapes = case
    out = inner.shape
    # the reader: relu of a shifted window of the producer's output (reads 0 past its edge)
    loops = tuple(Iter(f"o{k}", 0, d) for k, d in enumerate(out))
    idx = [var(it.name) for it in loops]
    idx[-1] = idx[-1] + 1
    outer = Expr(loops, (), Call("relu", (read(0, *idx),)))
    fused = fuse(outer, 0, inner, list(range(len(shapes))))
    xs = expression_inputs(shapes, seed)
    np.testing.assert_allclose(evaluate(fused, xs), evaluate(outer, [evaluate(inner, xs)]), rtol=1e-12, atol=1e-12)


def test_the_generators_keep_the_egraph_consistent():
    b = GraphBuilder("chain")
    x = b.input("x", (1, 4, 6), np.float64)
    w1, w2 = b.weight("w1", (5, 4), np.float64), b.weight("w2", (5, 4), np.float64)
    shift = Expr((Iter("a", 0, 1), Iter("b", 0, 4), Iter("c", 0, 6)), (), read(0, "a", "b", var("c") - 1))
    y = b.eop(x, expr=fingerprint(shift))
    m1, m2 = b.matmul(w1, x), b.matmul(w2, y)                 # same shapes, different operands: a batch
    m3 = b.matmul(b.weight("w3", (2, 4), np.float64), x)      # shares x with m1: a merge
    g = b.build(b.relu(m1), m2, b.relu(b.eop(m3, expr=fingerprint(Expr(
        (Iter("p", 0, 1), Iter("q", 0, 2), Iter("r", 0, 6)), (), read(0, "p", "q", "r"))))))
    s = Session(Limits(iterations=3))
    s.add_graph(g)
    report = s.run(Schedule((matmul_merge_generator(), eop_fusion_generator())))
    assert report.rules["merge-derived-matmuls"].matches >= 2 and report.rules["eop-fusion"].matches >= 1
    data = s.export()
    assert any(n.op is Op.BATCHMATMUL for c in data.classes.values() for n in c.nodes) or \
        any(n.op is Op.SPLIT for c in data.classes.values() for n in c.nodes)
    assert assert_consistent(data) > 10
