"""Correction fusion into layout (PET §5.3): a `correct` and the reshape/transpose chain after it
become one `fused_correct` (einsat.ir.ops.special), one pass writing the output in its final layout.

A corrected layout mutant is `L⁻¹(correct(op(L(x)), fix))`: its correction is followed by the
reshape/transpose chain `L⁻¹` that restores the original layout. The rules grow the fused op one
layout step at a time, as epilogue fusion does: a correction under a reshape or a transpose
becomes a fused op with that step; a fused op with no transpose yet absorbs a transpose after its
view; one with a transpose absorbs a final reshape (a reshape of a reshape is one reshape). An
empty `view`, `perm` or `shape` (`(vec-empty)`) is no step.

Whether the fused op is used is extraction's choice: when the correction's output also feeds
something else, the unfused correction is paid anyway and the fused one would be a second pass.
"""

from __future__ import annotations

from einsat.egraph.patterns import pat
from einsat.egraph.rules import Rule, Ruleset, rewrite

NONE = "(vec-empty)"


def _correct() -> str:
    return pat.correct("m", "f", region="r")


def _fused(view: str, perm: str, shape: str) -> str:
    return pat.fused_correct("m", "f", region="r", view=view, perm=perm, shape=shape)


def _rules() -> tuple[Rule, ...]:
    return (
        Rule("correct-reshape-fuse", "reshape(correct(m, f; r), s) = fused_correct(m, f; r, view=s)",
             rewrite(pat.reshape(_correct(), shape="s"), _fused("s", NONE, NONE), "(> (vec-length s) 0)")),
        Rule("correct-transpose-fuse", "transpose(correct(m, f; r), p) = fused_correct(m, f; r, perm=p)",
             rewrite(pat.transpose(_correct(), perm="p"), _fused(NONE, "p", NONE))),
        Rule("fused-correct-transpose",
             "transpose(fused_correct(m, f; r, view=v), p) = fused_correct(m, f; r, view=v, perm=p)",
             rewrite(pat.transpose(_fused("v", NONE, NONE), perm="p"), _fused("v", "p", NONE))),
        Rule("fused-correct-view", "reshape(fused_correct(m, f; r, view=v), s) = fused_correct(m, f; r, view=s)",
             rewrite(pat.reshape(_fused("v", NONE, NONE), shape="s"), _fused("s", NONE, NONE),
                     "(> (vec-length s) 0)")),
        Rule("fused-correct-reshape",
             "reshape(fused_correct(m, f; r, v, p, s0), s) = fused_correct(m, f; r, v, p, s)  (p not empty)",
             rewrite(pat.reshape(_fused("v", "p", "s0"), shape="s"), _fused("v", "p", "s"),
                     "(> (vec-length p) 0)", "(> (vec-length s) 0)")),
    )


def correct_fusion_rules() -> Ruleset:
    return Ruleset("correct_fusion", _rules())
