"""eOperators over the field: exact on integer inputs, at chosen positions as in whole tensors, and
PET's corrector checks mutants that contain them."""

import numpy as np
import pytest

import einsat
from einsat.ir import GraphBuilder
from einsat.ir.expr import Call, Expr, Iter, fingerprint, var
from einsat.ir.expr.build import read
from einsat.verify import find_differences
from einsat.verify.field import NotMultilinearError, Source
from einsat.verify.field.evaluate import FieldEnv, evaluate
from tests.verify.test_fieldeval import F64, assert_field_matches_numpy, ints


def eop_graph(op, shapes, attrs, rng, weight_of=()):
    """(graph with one eop computing `op`'s expression, integer inputs)."""
    from einsat.ir.registry import opdef
    from einsat.ir.types import TensorType
    e = opdef(op).expression([TensorType(s, F64) for s in shapes], attrs)
    b = GraphBuilder(f"eop_{op.value}")
    ins, feeds = [], {}
    for k, s in enumerate(shapes):
        if k in weight_of:
            ins.append(b.weight(f"w{k}", ints(rng, s)))
        else:
            ins.append(b.input(f"x{k}", s, F64))
            feeds[f"x{k}"] = ints(rng, s)
    return b.build(b.eop(*ins, expr=fingerprint(e))), feeds


@pytest.mark.parametrize("op, shapes, attrs", [
    ("conv", [(2, 4, 5, 6), (6, 2, 3, 3), (6,)], {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2),
                                                  "groups": 2}),
    ("conv_transpose", [(1, 4, 3, 4), (4, 3, 3, 2)], {"stride": (2, 3), "padding": (1, 0, 0, 1), "groups": 2,
                                                      "dilation": (2, 1), "output_padding": (1, 0)}),
    ("g2bmm", [(2, 7, 3), (2, 7, 3)], {"width": 2, "dilation": 3}),
    ("gemm", [(3, 4), (5, 4), (5,)], {"trans_b": 1, "alpha": 1.0, "beta": 2.0, "trans_a": 0}),
    ("correct", [(4, 5), (2, 3)], {"region": (1, 2, 3, 5)}),
    ("concat", [(2, 3), (2, 1)], {"axis": 1}),
])
def test_eops_are_exact_over_the_field(op, shapes, attrs, rng):
    from einsat.ir.registry import Op, normalize_attrs
    from einsat.ir.types import TensorType
    o = Op(op)
    attrs = normalize_attrs(o, attrs, [TensorType(s, F64) for s in shapes])
    g, feeds = eop_graph(o, shapes, attrs, rng, weight_of=(1,) if op.startswith("conv") else ())
    assert_field_matches_numpy(g, feeds, rng)


def test_a_nonlinear_eop_is_refused_naming_the_node():
    b = GraphBuilder("nl")
    x = b.input("x", (3,), F64)
    e = Expr((Iter("i", 0, 3),), (), Call("relu", (read(0, "i"),)))
    g = b.build(b.eop(x, expr=fingerprint(e), name="act"))
    with pytest.raises(NotMultilinearError, match="'act'.*eop"):
        evaluate(g, FieldEnv({"x": Source(key=1)}))


def offset_reduce_mutant(n, c, f, h, w, weight, shift=0):
    """conv3x3 (padding 1) as EinNet Fig. 3(b): a matmul of the weight [9F, C] with x [N, C, HW],
    then an eop summing the nine shifted products (`shift` != 0 breaks it)."""
    b = GraphBuilder("fig3b")
    x = b.input("x", (n, c, h, w), F64)
    wt = b.transpose(b.weight("w", weight), perm=(2, 3, 0, 1))                     # the original's weight
    wm = b.reshape(wt, shape=(9 * f, c))                                            # [(r, s, f), c]
    mm = b.matmul(wm, b.reshape(x, shape=(n, c, h * w)))                            # [n, (r, s, f), (h, w)]
    t = b.reshape(mm, shape=(n, 3, 3, f, h, w))
    hh, ww = var("h") + var("r") - 1 + shift, var("w") + var("s") - 1
    e = Expr((Iter("n", 0, n), Iter("f", 0, f), Iter("h", 0, h), Iter("w", 0, w)),
             (Iter("r", 0, 3), Iter("s", 0, 3)), read(0, "n", "r", "s", "f", hh, ww))
    return b.build(b.eop(t, expr=fingerprint(e)), names=["y"])


@pytest.mark.parametrize("shift, equivalent", [(0, True), (1, False)])
def test_the_corrector_checks_a_mutant_with_an_eop(shift, equivalent, rng):
    n, c, f, h, w = 1, 3, 2, 4, 5
    weight = ints(rng, (f, c, 3, 3))
    b = GraphBuilder("conv")
    x = b.input("x", (n, c, h, w), F64)
    original = b.build(b.conv(x, b.weight("w", weight), padding=1), names=["y"])
    mutant = offset_reduce_mutant(n, c, f, h, w, weight, shift)
    diffs = find_differences(original, mutant)
    assert diffs.equivalent is equivalent
    xs = rng.standard_normal((n, c, h, w))
    differ = ~np.isclose(einsat.run(original, {"x": xs})["y"], einsat.run(mutant, {"x": xs})["y"])
    np.testing.assert_array_equal(diffs.mask("y"), differ)  # every position differs with the shifted window
