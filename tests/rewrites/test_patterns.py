"""The pattern builder, and no rule that spells an op's attributes by position."""

import re

import pytest

from einsat.egraph import analysis, patterns
from einsat.egraph.encoding import signatures
from einsat.egraph.patterns import pat
from einsat.errors import AttributeValueError
from einsat.ir.registry import REGISTRY, Op
from einsat.rewrites.schedule import default_rulesets


def test_attributes_by_name_in_registry_order_the_others_wild():
    assert pat.conv("x", "w", groups="g", stride="st") == "(Conv st _ _ g x w (Absent))"
    assert pat.conv("x", "w", "b", stride="st", padding="pd", dilation=(1, 1), groups=1) == \
        "(Conv st pd (vec-of 1 1) 1 x w b)"
    assert pat.fused_matmul("a", "b", activation='"relu"') == '(FusedMatmul "relu" a b (Absent) (Absent))'
    assert pat.reduce_mean("x", axes=(), keepdims=0) == "(ReduceMean (vec-empty) 0 x)"
    assert pat.add("a", "b") == "(Add a b)"


def test_variadic_inputs_are_a_list_or_a_list_variable():
    assert pat.concat("a", pat.relu("b"), axis="ax") == "(Concat ax [a (Relu b)])"
    assert pat.concat(axis=0, inputs="l") == "(Concat 0 l)"
    with pytest.raises(AttributeValueError, match="either positionally or as inputs="):
        pat.concat("a", axis=0, inputs="l")


def test_unknown_names_and_wrong_arities_are_errors():
    with pytest.raises(AttributeValueError, match=r"conv has no attribute\(s\) \['strides'\]"):
        pat.conv("x", "w", strides="st")
    with pytest.raises(AttributeValueError, match="conv takes 2 to 3 tensor inputs, got 1"):
        pat.conv("x")
    with pytest.raises(AttributeError, match="no op 'convolution'"):
        pat.convolution("x", "w")
    with pytest.raises(TypeError, match="egglog text"):
        pat.transpose("x", perm=1.5)


def test_the_builder_follows_the_registry(monkeypatch):
    conv = type(REGISTRY[Op.CONV])
    monkeypatch.setattr(conv, "attrs", dict(reversed(list(conv.attrs.items()))))
    assert pat.conv("x", "w", stride="st", groups="g") == "(Conv g _ _ st x w (Absent))"


def constructor_heads(text: str) -> set[str]:
    return set(re.findall(r"\((\w+)", text))


def test_no_rule_spells_attributes_by_position(monkeypatch):
    """Every application of an op with attributes, in every rule of the default schedule and of the
    shape analysis, comes from the builder: with the builder marking its constructors, none is
    left unmarked (a hand-written `(Conv st pd dl g x w b)` would be)."""
    sigs = signatures()
    with_attrs = {sig.name for sig in sigs.values() if sig.attrs}
    monkeypatch.setattr(patterns, "head", lambda sig: f"{sig.name}__by_name")
    texts = {f"{rs.name}/{r.name}": r.egglog for rs in default_rulesets() for r in rs.rules}
    texts["shape_analysis"] = analysis.shape_rules(sigs)
    positional = {where: sorted(heads) for where, text in texts.items()
                  if (heads := constructor_heads(text) & with_attrs)}
    assert not positional, f"attributes spelled by position (build them with einsat.egraph.patterns.pat): {positional}"
    marked = {h for text in texts.values() for h in constructor_heads(text) if h.endswith("__by_name")}
    assert {"Conv__by_name", "Transpose__by_name", "Concat__by_name", "Gemm__by_name"} <= marked
