"""The default rules and schedule, assembled in exactly one place.

One step of the default schedule runs, in order: the n-ary sibling merge (first step only),
PET's mutation generator (first four steps; it needs the session's cost model), the fusion of
the corrections' convolutions (`mutate.correction_fusion`: one chain step a step), associativity
and commutativity (back-off), the other algebra theories, the multi-pattern merges (first two
steps only), the post rules (`post.correct`: a correction fused into the layout chain after
it), and every fourth step the weight folding generator. `Session.run` repeats steps until
saturation or a limit.

`einnet_schedule()` adds EinNet's derivations (`rewrites.derive`): the search in the first
step, then the merging of derived matmuls and the fusion of eOperators every step. It is not
the default: on GCN its searches take about as long as the rest of saturation, which then ends
at the time limit instead of the node limit (not deterministic); see
benchmarks/results/derive_bench.md.
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, Schedule
from einsat.rewrites.algebra.concat import concat_rules
from einsat.rewrites.algebra.conv import conv_rules
from einsat.rewrites.algebra.elementwise import ac_rules, elementwise_rules
from einsat.rewrites.algebra.layout import layout_rules
from einsat.rewrites.algebra.matmul import matmul_rules
from einsat.rewrites.algebra.merge import merge_generator, merge_rules
from einsat.rewrites.derive.generator import derive_generator
from einsat.rewrites.derive.inter import eop_fusion_generator, matmul_merge_generator
from einsat.rewrites.mutate.correction_fusion import correction_fusion_generator
from einsat.rewrites.mutate.generate import mutate_generator
from einsat.rewrites.post.correct import correct_fusion_rules
from einsat.rewrites.post.fold import fold_generator
from einsat.rewrites.post.fusion import fusion_rules
from einsat.rewrites.post.layout import layout_post_rules


def default_rulesets() -> list[Ruleset]:
    return [ac_rules(), elementwise_rules(), matmul_rules(), layout_rules(), concat_rules(), conv_rules(),
            merge_rules(), layout_post_rules(), fusion_rules(), correct_fusion_rules()]


def default_rules() -> list[Rule]:
    """Every fully equivalent rule of the default schedule."""
    return [r for rs in default_rulesets() for r in rs.rules]


def default_schedule() -> Schedule:
    return Schedule((merge_generator(), mutate_generator(), correction_fusion_generator()) + tuple(default_rulesets())
                    + (fold_generator(),))


def einnet_schedule(rank=None) -> Schedule:
    """The default schedule with EinNet's derivations (`rank`: a candidate ranking, e.g. a cost
    model's `graph_cost`)."""
    return Schedule((derive_generator(rank=rank),)) + default_schedule() + \
        Schedule((matmul_merge_generator(), eop_fusion_generator()))
