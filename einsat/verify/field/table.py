"""Which ops the verifier evaluates over the field, and the rule of each.

The registry says which ops are multi-linear (`OpDef.is_multilinear(attrs)`, PET §3); those, and
the few affine ops listed in `AFFINE`, have an exact meaning over the integers mod p, which is
what Theorems 1 and 2 need. `exact_over_field(node)` is that decision, read by the corrector and
the fuzzer alike. `RULES` holds the field rule of each such op; its keys are checked against the
registry's flags by a test: every op flagged multi-linear has a rule unless it is listed in
`NOT_YET_EVALUABLE`, and every op with a rule is flagged or is in `AFFINE`.
"""

from __future__ import annotations

from einsat.errors import describe_node
from einsat.ir.registry import Op
from einsat.verify import field as F
from einsat.verify.field import NotMultilinearError
from einsat.verify.field.base import Rule
from einsat.verify.field.contract import CONTRACTIONS
from einsat.verify.field.conv import Conv
from einsat.verify.field.expr import Eop
from einsat.verify.field.ops import Concat, Constant, Correct, Expand, Generic, Pad, Same, Slice, Split, Transpose
from einsat.verify.field.windows import AvgPool, BatchNorm, Divide, Elementwise, GlobalAvgPool, Reduce

# exact over the field though not multi-linear in the registry's sense (linear in each input
# separately): affine maps whose parameters come from weights only, and a select
AFFINE = {
    Op.CONSTANT: "a constant: degree 0",
    Op.BATCHNORM: "x·A[c] + B[c], A and B from the weight-only parameters",
    Op.DIV: "division by a weight-only divisor",
    Op.PAD: "a constant fill: affine when the fill is not 0",
    Op.CORRECT: "the mutant's value or the fix's, by a static region",
    Op.EOP: "an expression that is a sum of products of reads and constants (its rule refuses any other)",
}
# flagged multi-linear, with no field rule yet: the verifier refuses them
NOT_YET_EVALUABLE: frozenset[Op] = frozenset()

RULES: dict[Op, Rule] = {
    Op.ADD: Elementwise(F.add), Op.SUB: Elementwise(F.sub), Op.MUL: Elementwise(F.mul, True),
    Op.NEG: Elementwise(lambda a: F.sub(0, a)), Op.DIV: Divide(), Op.BATCHNORM: BatchNorm(),
    Op.RESHAPE: Same(), Op.FLATTEN: Same(), Op.SQUEEZE: Same(), Op.UNSQUEEZE: Same(), Op.IDENTITY: Same(),
    Op.TRANSPOSE: Transpose(), Op.EXPAND: Expand(), Op.SLICE: Slice(), Op.PAD: Pad(), Op.CONCAT: Concat(),
    Op.SPLIT: Split(), Op.CORRECT: Correct(), Op.CONSTANT: Constant(), Op.GATHER: Generic(), Op.ACCESS: Generic(),
    Op.AVGPOOL: AvgPool(), Op.GLOBAL_AVGPOOL: GlobalAvgPool(), Op.REDUCE_SUM: Reduce(False),
    Op.REDUCE_MEAN: Reduce(True), Op.CONV: Conv(), Op.CONV_TRANSPOSE: Conv(transposed=True),
    Op.EOP: Eop(), **CONTRACTIONS,
}


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
