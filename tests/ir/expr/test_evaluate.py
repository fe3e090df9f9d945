"""NumPy semantics of expressions: padding, scopes with offsets, guards, max reductions, blocks."""

import numpy as np
import pytest

from einsat.ir.expr import Call, Const, Expr, Guard, Iter, Read, evaluate, var
from einsat.ir.expr import semantics as evaluate_module
from einsat.ir.expr.build import read


def test_reads_outside_a_tensor_are_zero(rng):
    x = rng.standard_normal(5)
    e = Expr((Iter("i", -2, 7),), (), read(0, "i"))
    np.testing.assert_array_equal(evaluate(e, [x]), np.concatenate([[0, 0], x, [0, 0]]))


def test_a_scope_is_read_in_its_own_coordinates(rng):
    x = rng.standard_normal(4)
    inner = Expr((Iter("t", -1, 5),), (), Call("mul", (read(0, "t"), Const(2.0))))  # [-1, 5): shape 6
    outer = Expr((Iter("i", 0, 8),), (), read(inner, var("i") - 2))                 # inner[i - 2]
    want = np.zeros(8)
    want[2:6] = 2 * x
    np.testing.assert_allclose(evaluate(outer, [x]), want)


def test_guards_and_max_reductions(rng):
    x = rng.standard_normal((3, 6))
    evens = Expr((Iter("i", 0, 3),), (Iter("j", 0, 6),), Guard(var("j").mod(2), 0, 1, read(0, "i", "j")))
    np.testing.assert_allclose(evaluate(evens, [x]), x[:, ::2].sum(1))
    top = Expr((Iter("i", 0, 3),), (Iter("j", 0, 6),), read(0, "i", "j"), "max")
    np.testing.assert_allclose(evaluate(top, [x]), x.max(1))


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_blocking_does_not_change_the_result(rng, monkeypatch, block):
    monkeypatch.setattr(evaluate_module, "BLOCK", block)
    a, b = rng.standard_normal((4, 9)), rng.standard_normal((9, 5))
    body = Call("mul", (read(0, "m", "k"), read(1, "k", "n")))
    mm = Expr((Iter("m", 0, 4), Iter("n", 0, 5)), (Iter("k", 0, 9),), body)
    np.testing.assert_allclose(evaluate(mm, [a, b]), a @ b, rtol=1e-12)
    top = Expr((Iter("m", 0, 4),), (Iter("k", 0, 9),), read(0, "m", "k"), "max")
    np.testing.assert_allclose(evaluate(top, [a]), a.max(1))


def test_empty_sums_and_empty_outputs():
    x = np.ones((2, 0))
    e = Expr((Iter("i", 0, 2),), (Iter("k", 0, 0),), read(0, "i", "k"))
    np.testing.assert_array_equal(evaluate(e, [x]), [0.0, 0.0])
    none = Expr((Iter("i", 0, 0),), (), read(0, "i", 0))
    assert evaluate(none, [x]).shape == (0,)


def test_dtype_follows_the_inputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    e = Expr((Iter("i", 0, 2),), (Iter("j", 0, 3),), Read(0, (var("i"), var("j"))))
    out = evaluate(e, [x])
    assert out.dtype == np.float32 and out.tolist() == [3.0, 12.0]
