"""Operator matching by the iterator mapping table (EinNet Table 2, §5.1), and instantiation."""

import numpy as np
import pytest

from einsat.ir.expr import Call, Expr, Iter, evaluate, var
from einsat.ir.expr.build import read
from einsat.ir.registry import Op
from einsat.ir.types import TensorType
from einsat.rewrites.derive.instantiate import NotInstantiable, instantiate, instantiations
from einsat.rewrites.derive.match import injective, matches, mismatch
from tests.rewrites.derive import cases

F64 = np.float64


def mm(a_idx, b_idx, loops, sums):
    return Expr(loops, sums, Call("mul", (read(0, *a_idx), read(1, *b_idx))))


def run(e, types, const=frozenset(), seed=0):
    """instantiate `e` and compare every variant with the expression's own value."""
    import einsat
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(t.shape) for t in types]
    want = evaluate(e, xs)
    graphs = instantiations(e, types, const)
    for g in graphs:
        got = einsat.run(g, {f"in{k}": x for k, x in enumerate(xs)})[g.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return graphs


def test_iterator_groups_pick_the_operator():
    b, m, n, k = Iter("b", 0, 2), Iter("m", 0, 16), Iter("n", 0, 12), Iter("k", 0, 32)
    bmm = mm(("b", "m", "k"), ("b", "k", "n"), (b, m, n), (k,))
    shapes = [(2, 16, 32), (2, 32, 12)]
    assert [x.op for x in matches(bmm, shapes, frozenset())][:1] == [Op.BATCHMATMUL]
    # Figure 8(b)'s flavour: operands in other layouts, the output transposed: still a bmm
    odd = mm(("k", "b", "m"), ("n", "b", "k"), (n, b, m), (k,))
    assert matches(odd, [(32, 2, 16), (12, 2, 32)], frozenset())[0].op is Op.BATCHMATMUL
    graphs = run(odd, [TensorType((32, 2, 16), F64), TensorType((12, 2, 32), F64)])
    assert any(node.op is Op.BATCHMATMUL for node in graphs[0].nodes)


def test_a_summation_in_one_operand_only_matches_nothing():
    m, k = Iter("m", 0, 3), Iter("k", 0, 5)
    e = mm(("m", "k"), ("m",), (m,), (k,))
    assert matches(e, [(3, 5), (3,)], frozenset()) == [] and mismatch(e, frozenset()) >= 1


def test_duplicating_an_activation_is_not_a_match_but_a_conv_window_is():
    """x[h + r] read by a matmul would be im2col (a copy k times bigger): not a matmul; it is a
    convolution's window."""
    n, f, h = Iter("n", 0, 1), Iter("f", 0, 8), Iter("h", 0, 12)
    c, r = Iter("c", 0, 16), Iter("r", 0, 3)
    e = Expr((n, f, h), (c, r), Call("mul", (read(0, "n", "c", var("h") + var("r") - 1), read(1, "f", "c", "r"))))
    shapes = [(1, 16, 12), (8, 16, 3)]
    ops = [x.op for x in matches(e, shapes, frozenset({1}))]
    assert Op.CONV in ops and Op.MATMUL not in ops
    conv = next(x for x in matches(e, shapes, frozenset({1})) if x.op is Op.CONV)
    assert conv.attrs["padding"] == (1, 1) and conv.attrs["dilation"] == (1,)
    run(e, [TensorType(s, F64) for s in shapes], frozenset({1}))


def test_injectivity_is_the_mixed_radix_condition():
    r = {"q": (0, 5), "p": (0, 4), "h": (0, 7), "s": (0, 3)}
    assert injective([var("q") * 4 + var("p")], r)        # 4q + p, p < 4: a reordering
    assert not injective([var("q") * 3 + var("p")], r)    # 3q + p, p < 4: overlaps
    assert not injective([var("h") + var("s")], r)        # a window
    assert not injective([var("h"), var("h")], r)         # one iterator in two dims: refused (conservative)
    assert injective([var("h"), var("s")], r)


def test_the_dilated_band_matches_g2bmm_and_the_reordered_one_without_dilation():
    g = cases.g2bmm(1, 12, 64, 2, 3, F64)
    node = g.nodes[0]
    types = [g.types[i] for i in node.inputs]
    e = node.definition.expression(types, node.attrs)
    (m,) = matches(e, [t.shape for t in types], frozenset())
    assert m.op is Op.G2BMM and m.attrs == {"width": 2, "dilation": 3}


def test_a_compute_intensive_scope_that_matches_nothing_is_refused():
    # Σ_{k,j} a[m, k]·a[k, j]·a[j, m]: three factors, no two-operand operator computes it
    m, k, j = Iter("m", 0, 64), Iter("k", 0, 64), Iter("j", 0, 64)
    e = Expr((m,), (k, j), Call("mul", (Call("mul", (read(0, "m", "k"), read(0, "k", "j"))), read(0, "j", "m"))))
    with pytest.raises(NotInstantiable, match="no operator"):
        instantiate(e, [TensorType((64, 64), F64)])
