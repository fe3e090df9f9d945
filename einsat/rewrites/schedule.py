"""The default rules and schedule, assembled in exactly one place.

One step of the default schedule runs, in order: EinNet's derivations (first step only, see below),
the n-ary sibling merge (first step only), PET's mutation generator (first four steps; it needs the
session's cost model), the fusion of the corrections' convolutions (`mutate.correction_fusion`: one
chain step a step), associativity and commutativity (back-off), the other algebra theories, the
multi-pattern merges (first two steps only), the post rules (`post.correct`: a correction fused into
the layout chain after it), the attention expansion, the attention generator (`algebra.attention`:
the matmul-scale-mask-softmax-matmul chain as one op), the norm recognitions and, for onnxruntime, the
residual sum and its norm as one skip op (`algebra.skipnorm`), GELU, rotary (`algebra.rotary`: HF's
q · cos + rotate_half(q) · sin as one op), every fourth step the weight folding generator, then
EinNet's inter-expression generators.
`Session.run` repeats steps until saturation or a limit.

EinNet's derivations (`rewrites.derive`) run in the default schedule too: the search in the
first step (before the mutation generator), then, once a derivation has entered, the merging of
derived matmuls and the fusion of eOperators every step. The default search is bounded by work
alone (states per operator and per round, no deadline: deterministic) and runs only for the
operators where a derivation can pay under the session's cost model (`derive.generator.can_pay`:
an operator costing more than a GEMM of its FLOPs or a stream of its bytes); searching every
convolution instead took about as long as the rest of saturation on GCN and 20-40 s per dilated convolution on CSRNet
(benchmarks/results/derive_default.md). `einnet_schedule()` searches every derivable operator
(EinNet's own setting, with the search's deadline), for studies and the EinNet notebook.
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, Schedule
from einsat.rewrites.algebra.attention import attention_generator, attention_rules
from einsat.rewrites.algebra.casts import cast_rules
from einsat.rewrites.algebra.concat import concat_rules
from einsat.rewrites.algebra.conv import conv_rules
from einsat.rewrites.algebra.elementwise import ac_rules, elementwise_rules
from einsat.rewrites.algebra.gelu import gelu_generator
from einsat.rewrites.algebra.layout import layout_rules
from einsat.rewrites.algebra.matmul import matmul_rules
from einsat.rewrites.algebra.merge import merge_generator, merge_rules
from einsat.rewrites.algebra.norms import layernorm_generator, rmsnorm_generator
from einsat.rewrites.algebra.packed_attention import packed_attention_generator
from einsat.rewrites.algebra.rotary import rotary_generator
from einsat.rewrites.algebra.skipnorm import skipnorm_generator
from einsat.rewrites.derive.fusion import fusion_generator
from einsat.rewrites.derive.generator import after_derivations, default_derive_generator, derive_generator
from einsat.rewrites.derive.inter import eop_fusion_generator, matmul_merge_generator
from einsat.rewrites.mutate.correction_fusion import correction_fusion_generator
from einsat.rewrites.mutate.generate import mutate_generator
from einsat.rewrites.post.correct import correct_fusion_rules
from einsat.rewrites.post.fold import fold_generator
from einsat.rewrites.post.fusion import fusion_rules
from einsat.rewrites.post.layout import layout_post_rules


def default_rulesets() -> list[Ruleset]:
    return [ac_rules(), elementwise_rules(), matmul_rules(), layout_rules(), concat_rules(), conv_rules(),
            merge_rules(), layout_post_rules(), fusion_rules(), correct_fusion_rules(), attention_rules(), cast_rules()]


def default_rules() -> list[Rule]:
    """Every fully equivalent rule of the default schedule."""
    return [r for rs in default_rulesets() for r in rs.rules]


def default_schedule(derivations: bool = True) -> Schedule:
    """The default schedule; `derivations=False` leaves EinNet's derivations out (PET's mutants,
    the rules and the generators only): for studying PET's forms under a cost model where a
    derivation would win."""
    if not derivations:
        return _schedule(None, None, None)
    return _schedule(default_derive_generator(), after_derivations(matmul_merge_generator()),
                     after_derivations(eop_fusion_generator()))


def einnet_schedule(rank=None) -> Schedule:
    """The default schedule with EinNet's derivations for every derivable operator, not only
    those that can pay (`rank`: a candidate ranking, e.g. a cost model's `graph_cost`)."""
    return _schedule(derive_generator(rank=rank), matmul_merge_generator(), eop_fusion_generator())


def symbolic_schedule() -> Schedule:
    """The default schedule less what writes sizes into index expressions and regions (EinNet's
    derivations and the eOperator fusions, PET's mutants and their corrections): the schedule of
    a program with symbolic dims (`einsat.pipeline.symbolic`), whose result must read back as one
    program for every size. The fully equivalent rules and the recognitions (attention, norms,
    GELU, the sibling merge, weight folding) stay."""
    phases = ((merge_generator(),) + tuple(default_rulesets())
              + (attention_generator(), packed_attention_generator(), rmsnorm_generator(), layernorm_generator(),
                 skipnorm_generator(), gelu_generator(), rotary_generator(), fold_generator()))
    return Schedule(phases)


def _schedule(derive, merge_derived, fuse_eops) -> Schedule:
    phases = ((derive, merge_generator(), mutate_generator(), correction_fusion_generator())
              + tuple(default_rulesets()) + (attention_generator(), packed_attention_generator(), rmsnorm_generator(),
                                             layernorm_generator(), skipnorm_generator(), gelu_generator(),
                                             rotary_generator(),
                                             fold_generator(), merge_derived,
                                             fuse_eops, fusion_generator()))
    return Schedule(tuple(p for p in phases if p is not None))
