"""The canonical printer is EinNet's fingerprint: the four redundancies of §6.2 print one string,
different expressions print differently, and the parser reads every print back."""

import pytest

from einsat.errors import AttributeValueError
from einsat.ir.expr import Call, Expr, Iter, canonical, fingerprint, parse, var
from einsat.ir.expr.build import read


def conv(names=("n", "h", "r", "c"), sum_order=(0, 1), operands=(0, 1)):
    n, h, r, c = names
    loops = (Iter(n, 0, 2), Iter(h, 0, 5))
    sums = [Iter(r, 0, 3), Iter(c, 0, 4)]
    sums = tuple(sums[k] for k in sum_order)
    x = read(0, n, c, var(h) + var(r) - 1)
    w = read(1, c, r)
    args = (x, w) if operands == (0, 1) else (w, x)
    return Expr(loops, sums, Call("mul", args))


def test_summation_reordering_prints_one_string():
    assert fingerprint(conv(sum_order=(0, 1))) == fingerprint(conv(sum_order=(1, 0)))


def test_operand_reordering_prints_one_string():
    assert fingerprint(conv(operands=(0, 1))) == fingerprint(conv(operands=(1, 0)))
    a = Expr((Iter("x", 0, 3),), (), Call("add", (read(0, "x"), read(1, var("x") + 1))))
    b = Expr((Iter("x", 0, 3),), (), Call("add", (read(1, 1 + var("x")), read(0, "x"))))
    assert fingerprint(a) == fingerprint(b)


def test_iterator_renaming_prints_one_string():
    assert fingerprint(conv(names=("n", "h", "r", "c"))) == fingerprint(conv(names=("a", "b", "q", "z")))


def test_tensor_renaming_prints_one_string():
    def outer(scope):
        loops = (Iter("u", 0, 2), Iter("v", 0, 5))
        return Expr(loops, (), Call("relu", (read(scope, "u", "v"),)))

    assert fingerprint(outer(conv())) == fingerprint(outer(conv(names=("p", "q", "s", "t"), sum_order=(1, 0))))


def test_traversal_order_and_ranges_matter():
    base = conv()
    swapped = Expr(base.loops[::-1], base.sums, base.body)
    wider = Expr((Iter("n", 0, 2), Iter("h", -1, 5)), base.sums, base.body)
    assert len({fingerprint(base), fingerprint(swapped), fingerprint(wider)}) == 3


def test_symmetric_summations_are_ordered_by_the_whole_print():
    # Σ_{a,b} x[a]·y[b] and Σ_{b,a} x[b]·y[a]: the iterators have the same range and key
    def e(first, second):
        return Expr((), (Iter(first, 0, 3), Iter(second, 0, 3)), Call("mul", (read(0, "a"), read(1, "b"))))

    assert fingerprint(e("a", "b")) == fingerprint(e("b", "a"))


def test_parse_reads_a_print_back():
    e = conv()
    text = fingerprint(e)
    assert text == "(E (L 0:2 0:5) (S 0:3 0:4) (mul (T 0 i0 s1 (+ i1 s0 -1)) (T 1 s1 s0)))"
    assert parse(text) == canonical(e)[0]
    nested = Expr((Iter("u", 0, 2),), (Iter("v", 0, 5),), read(e, "u", "v"), "max")
    assert fingerprint(parse(fingerprint(nested))) == fingerprint(nested)


@pytest.mark.parametrize("text, why", [
    ("(E (L 0:2) (S) (T 0 i1))", "unknown iterator"),
    ("(E (L 0:2) (S) (frob (T 0 i0)))", "unknown function"),
    ("(E (L 0:2) (S) (add (T 0 i0)))", "takes 2 arguments"),
    ("(E (L 0:2) (S) (T 0 (/ i0 0)))", "division by 0"),
    ("(E (L 0:2) (S) (T 0 i0)) extra", "trailing"),
    ("(E (L 0:2) (S) (T 0 i0", "ends early"),
])
def test_bad_prints_are_refused_with_a_reason(text, why):
    with pytest.raises(AttributeValueError, match=why):
        parse(text)
