"""The registry's egglog encoding: signatures, attribute literals, string escapes."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.egraph import Session
from einsat.egraph.encoding import NONE_INT, AttrRefs, decode_attr, encode_attr, signature, signatures
from einsat.egraph.export import unquote
from einsat.errors import AttributeValueError
from einsat.ir.registry import REGISTRY, Op, OpDef

INTS = st.integers(-(2 ** 63) + 1, 2 ** 63 - 1)
FLOATS = st.floats(allow_nan=False) | st.just(-0.0)


def test_every_op_has_a_constructor():
    sigs = signatures()
    assert set(sigs) == set(REGISTRY)
    for op, sig in sigs.items():
        d = REGISTRY[op]
        assert sig.variadic == (d.arity[1] is None)
        assert sig.slots == (d.arity[1] or 0)
        assert [n for n, _ in sig.attrs] == list(d.attrs)
        assert sig.multi == (type(d).num_outputs is not OpDef.num_outputs)
    assert signature(Op.CONV).name == "Conv" and signature(Op.REDUCE_SUM).name == "ReduceSum"
    assert signature(Op.SPLIT).sort == "Multi" and signature(Op.CONCAT).arg_sorts == ["i64", "TList"]
    Session()  # every declaration and analysis rule compiles


@given(st.sampled_from(["int", "float", "str", "bool", "ints", "floats"]).flatmap(
    lambda k: st.tuples(st.just(k), {"int": INTS, "float": FLOATS, "str": st.text(), "bool": st.booleans(),
                                     "ints": st.lists(INTS, max_size=4).map(tuple),
                                     "floats": st.lists(FLOATS, max_size=3).map(tuple)}[k] | st.none())))
def test_attributes_round_trip(kv):
    kind, value = kv
    if kind == "bool" and value is None:
        with pytest.raises(AttributeValueError, match="None"):
            encode_attr(kind, value, AttrRefs(), "here")
        return
    refs = AttrRefs()
    assert decode_attr(kind, encode_attr(kind, value, refs, "here"), refs) == value


def test_unencodable_values_go_by_reference():
    refs = AttrRefs()
    a = np.arange(4.0)
    k1, k2 = refs.key("tensor", a), refs.key("tensor", a.copy())
    assert k1 == k2 and refs.value(k1) is a  # arrays: by content
    body = object()
    assert refs.key("any", body) == refs.key("any", body) != refs.key("any", object())
    assert refs.key("any", (1, "x")) == refs.key("any", (1, "x"))
    assert encode_attr("any", body, refs, "here") == refs.key("any", body)
    with pytest.raises(AttributeValueError, match="reference"):
        AttrRefs().value("tensor:nope")
    assert NONE_INT == -(2 ** 63)


@pytest.mark.parametrize("text,want", [('"plain"', "plain"), ('"a\\"b"', 'a"b'), ('"back\\\\slash"', "back\\slash"),
                                       ('"t\\tn\\nr\\r0\\0"', "t\tn\nr\r0\0"), ('"\\u{7}\\u{200b}"', "\x07\u200b"),
                                       ('"\\\\u{41}"', "\\u{41}"), ('"uni\u00e9"', "uni\u00e9")])
def test_unquote(text, want):
    assert unquote(text) == want


def test_float_attributes_are_exact():
    for v in (1e-5, 0.1 + 0.2, 1 / 3, 5e-324, 1e300, math.inf, -math.inf):
        refs = AttrRefs()
        assert decode_attr("float", encode_attr("float", v, refs, "x"), refs) == v
