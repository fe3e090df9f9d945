"""loop and cond: plain Python on NumPy arrays, structured Loop / If nodes when traced."""

import numpy as np
import pytest

from einsat.errors import FrontendError
from einsat.frontend import cond, functionalize, loop
from einsat.ir import Op
from tests.frontend.oracle import check

X = np.arange(20, dtype=np.float32).reshape(4, 5)


def test_loop_on_numpy_is_a_python_loop():
    seen = []
    assert loop(3, lambda i, acc: (seen.append(i), acc + i)[1], 10) == 13
    assert seen == [0, 1, 2]
    assert loop(0, lambda i: None) is None
    assert cond(np.array(False), lambda: 1, lambda: 2) == 2


def test_carried_values_and_outer_updates_together():
    def f(x, n):
        acc = np.zeros_like(x[0])

        def body(i, acc, scale):
            x[i] *= scale              # an outer update: block propagation carries x
            return acc + x[i], scale + 1

        acc, scale = loop(n, body, acc, np.ones((), np.float32))
        return acc, scale, x

    for n in (0, 1, 4):
        check(f, X, np.array(3), run_args=(X, np.array(n)))


def test_nested_loops_and_branches():
    def f(x, n):
        x = x.copy()

        def row(i):
            def col(j):
                v = x[i, j, ...]       # a 0-d view
                cond(v > 7, lambda: np.subtract(v, 1, out=v), lambda: np.add(v, 2, out=v))
            loop(5, col)
            x[i] = x[i][::-1]

        loop(n, row)
        return x

    g = check(f, X, np.array(3), run_args=(X, np.array(4)))
    (outer,) = [n for n in g.nodes if n.op is Op.LOOP]
    (inner,) = [n for n in outer.attrs["body"].nodes if n.op is Op.LOOP]
    assert any(n.op is Op.IF for n in inner.attrs["body"].nodes)


def test_a_view_made_before_the_loop_sees_updates_made_inside():
    def f(x, n):
        x = x.copy()
        head = x[:2, ::2]           # made before the loop, read after it

        def body(i):
            x[:, 1:] += x[:, :-1]

        loop(n, body)
        return head, x

    check(f, X, np.array(2), run_args=(X, np.array(3)))


def test_cond_with_operands_and_values():
    def f(x, p):
        def then(a):
            a[0] = 0
            return a.sum(), a[1]

        def other(a):
            return a.max(), a[2] * 2

        return cond(p, then, other, x)

    for p in (True, False):
        check(f, X, np.array(True), run_args=(X, np.array(p)))


def test_cond_on_a_python_bool_is_decided_while_tracing():
    g = functionalize(lambda x: cond(True, lambda: x + 1, lambda: x - 1), (X,))
    assert [n.op for n in g.nodes] == [Op.ADD]


def test_loop_trip_count_must_be_an_integer_scalar():
    with pytest.raises(FrontendError, match="trip count"):
        functionalize(lambda x: loop(x, lambda i: None), (X,))


def test_carried_types_must_not_change():
    with pytest.raises(FrontendError, match="keep their shape and dtype"):
        functionalize(lambda x: loop(2, lambda i, h: h[0], x), (X,))


def test_a_value_returned_unchanged_from_a_loop_cannot_be_updated_later():
    def f(x):
        y = x.copy()
        z = loop(2, lambda i, h: h, y)   # NumPy: z is y
        z[0] = 5
        return y

    with pytest.raises(FrontendError, match="returned an outer array"):
        functionalize(f, (X,))
