"""Layout clean-up (PET §6.3, EinNet §6.3): chains of transposes and reshapes fused, inverse pairs
and identities eliminated.

Fusing a chain and dropping an identity are enough to eliminate an inverse pair:
`transpose(q, transpose(p, x))` becomes `transpose(p∘q, x)`, and `p∘q` is the identity
permutation exactly when q inverts p. The identity views subsume their left side (it can never
be cheaper than its input).
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, rewrite, rule

RULES = (
    Rule("transpose-chain", "transpose(q, transpose(p, x)) = transpose(p[q], x)",
         rule(["(= t (Transpose q (Transpose p x)))"], ["(permute-want p q)"]) + "\n"
         + rule(["(= t (Transpose q (Transpose p x)))", "(= r (permute p q))"], ["(union t (Transpose r x))"])),
    Rule("transpose-identity", "transpose(identity perm, x) = x",
         rewrite("(Transpose p x)", "x", "(= p (vec-range (vec-length p)))", subsume=True)),
    Rule("reshape-chain", "reshape(t, reshape(s, x)) = reshape(t, x)",
         rewrite("(Reshape t (Reshape s x))", "(Reshape t x)")),
    Rule("reshape-identity", "reshape(shape(x), x) = x",
         rewrite("(Reshape s x)", "x", "(= s (shape x))", subsume=True)),
    Rule("expand-identity", "expand(shape(x), x) = x",
         rewrite("(Expand s x)", "x", "(= s (shape x))", subsume=True)),
    Rule("identity-elim", "identity(x) = x", rewrite("(Identity x)", "x", subsume=True)),
    Rule("relu-idempotent", "relu(relu(x)) = relu(x)", rewrite("(Relu (Relu x))", "(Relu x)", subsume=True)),
)


def layout_post_rules() -> Ruleset:
    return Ruleset("layout_post", RULES)
