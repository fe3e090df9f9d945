"""Every op the PET verifier evaluates has what each of its layers needs, or a registered reason.

The verifier's per-op behaviour registers itself beside its code, as gpu's `@implements` does:
field rules (`verify.field.base.field_rule`, PET's random tests over the integers mod p), split
rules (`verify.boxrules.split_rule`, Theorem 1's boxes) and restriction rules
(`verify.restrict_rules.restrict_rule`, the corrections' regions). An op flagged multi-linear by the
registry needs a field rule; an op with a field rule needs a split rule and a restriction rule.
Where one is missing, the layer registers why (and what it does instead).
"""

from __future__ import annotations

import pytest

from einsat.ir.registry import REGISTRY, Op
from einsat.verify.boxrules import NO_SPLIT_RULE, SPLIT_RULES, split_rule
from einsat.verify.field.base import field_rule
from einsat.verify.field.table import AFFINE, NOT_YET_EVALUABLE, RULES
from einsat.verify.restrict_rules import NO_RESTRICT_RULE, RESTRICT, STRIDED, restrict_rule

FLAGGED = {op for op, d in REGISTRY.items() if d.multilinear}
EVALUATED = set(RULES)


def names(ops) -> list[str]:
    return sorted(op.value for op in ops)


def test_every_multilinear_op_has_a_field_rule_or_a_reason():
    missing = FLAGGED - EVALUATED - set(NOT_YET_EVALUABLE)
    assert not missing, f"multi-linear ops with no field rule and no reason: {names(missing)}"


def test_every_field_rule_is_for_a_multilinear_or_affine_op():
    stray = EVALUATED - FLAGGED - set(AFFINE)
    assert not stray, f"field rules of ops neither flagged multi-linear nor registered affine: {names(stray)}"
    assert set(AFFINE) <= EVALUATED and not FLAGGED & set(AFFINE), "an affine op is evaluated and not flagged"


def test_every_evaluated_op_has_a_split_rule_or_a_reason():
    missing = EVALUATED - set(SPLIT_RULES) - set(NO_SPLIT_RULE)
    assert not missing, f"ops the verifier evaluates with no split rule and no reason: {names(missing)}"
    assert set(SPLIT_RULES) <= EVALUATED, f"split rules of ops never evaluated: {names(set(SPLIT_RULES) - EVALUATED)}"


def test_every_evaluated_op_has_a_restriction_rule_or_a_reason():
    missing = EVALUATED - set(RESTRICT) - set(NO_RESTRICT_RULE)
    assert not missing, f"ops the verifier evaluates with no restriction rule and no reason: {names(missing)}"
    assert STRIDED <= set(RESTRICT)


@pytest.mark.parametrize("rules, reasons", [(RULES, NOT_YET_EVALUABLE), (SPLIT_RULES, NO_SPLIT_RULE),
                                            (RESTRICT, NO_RESTRICT_RULE)], ids=["field", "split", "restrict"])
def test_reasons_are_stated_and_not_stale(rules, reasons):
    assert not set(rules) & set(reasons), f"a reason for an op that has a rule: {names(set(rules) & set(reasons))}"
    for op, reason in reasons.items():
        assert isinstance(op, Op) and isinstance(reason, str) and len(reason) > 20, op


def test_a_second_rule_for_an_op_is_refused():
    with pytest.raises(RuntimeError, match="two field rules"):
        field_rule(Op.ADD)(RULES[Op.ADD])
    with pytest.raises(RuntimeError, match="two split rules"):
        split_rule(Op.ADD)(lambda *a: None)
    with pytest.raises(RuntimeError, match="two restriction rules"):
        restrict_rule(Op.ADD)(lambda *a: None)
