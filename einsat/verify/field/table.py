"""Which ops the verifier evaluates over the field, and the rule of each.

The registry says which ops are multi-linear (`OpDef.is_multilinear(attrs)`, PET §3); those, and
the affine ops whose rules say so (`AFFINE`), have an exact meaning over the integers mod p, which
is what Theorems 1 and 2 need. `exact_over_field(node)` is that decision, read by the corrector and
the fuzzer alike. Each rule registers itself beside its code (`field.base.field_rule`: ops.py,
windows.py, contract.py, conv.py, expr.py); `RULES` holds them all once those modules are
imported, as this one does. `tests/verify/test_rule_coverage.py` checks that every op flagged
multi-linear has a rule unless `NOT_YET_EVALUABLE` says why not, and every op with a rule is
flagged or affine.
"""

from __future__ import annotations

from einsat.errors import describe_node
from einsat.verify.field import (  # the rule modules register their rules on import
    NotMultilinearError,
    contract,  # noqa: F401
    conv,  # noqa: F401
    expr,  # noqa: F401
    ops,  # noqa: F401
    windows,  # noqa: F401
)
from einsat.verify.field.base import AFFINE, NOT_YET_EVALUABLE, RULES, Rule

__all__ = ["AFFINE", "NOT_YET_EVALUABLE", "RULES", "exact_over_field", "rule_for"]

def exact_over_field(node) -> bool:
    """Whether `node` has an exact meaning over the field: multi-linear for its attributes, or affine."""
    return node.definition.is_multilinear(node.attrs) or node.op in AFFINE


def rule_for(node) -> Rule:
    """The field rule of `node`; a `NotMultilinearError` naming it when it has none."""
    if not exact_over_field(node):
        raise NotMultilinearError(f"{describe_node(node)} has no exact meaning over the field "
                                  "(it is not multi-linear or affine)")
    if node.op not in RULES:
        raise NotMultilinearError(f"{describe_node(node)} is multi-linear, but the verifier has no field rule "
                                  "for it yet")
    return RULES[node.op]
