"""Layout clean-up (PET §6.3, EinNet §6.3): chains of transposes and reshapes fused, inverse pairs
and identities eliminated.

Fusing a chain and dropping an identity are enough to eliminate an inverse pair:
`transpose(q, transpose(p, x))` becomes `transpose(p∘q, x)`, and `p∘q` is the identity
permutation exactly when q inverts p. The identity views subsume their left side (it can never
be cheaper than its input).
"""

from __future__ import annotations

from einsat.egraph.patterns import pat
from einsat.egraph.rules import Rule, Ruleset, rewrite, rule


def _rules() -> tuple[Rule, ...]:
    def transpose(x: str, perm: str) -> str:
        return pat.transpose(x, perm=perm)

    def reshape(x: str, shape: str) -> str:
        return pat.reshape(x, shape=shape)

    chain = f"(= t {transpose(transpose('x', 'p'), 'q')})"
    return (
        Rule("transpose-chain", "transpose(q, transpose(p, x)) = transpose(p[q], x)",
             rule([chain], ["(permute-want p q)"]) + "\n"
             + rule([chain, "(= r (permute p q))"], [f"(union t {transpose('x', 'r')})"])),
        Rule("transpose-identity", "transpose(identity perm, x) = x",
             rewrite(transpose("x", "p"), "x", "(= p (vec-range (vec-length p)))", subsume=True)),
        Rule("reshape-chain", "reshape(t, reshape(s, x)) = reshape(t, x)",
             rewrite(reshape(reshape("x", "s"), "t"), reshape("x", "t"))),
        Rule("reshape-identity", "reshape(shape(x), x) = x",
             rewrite(reshape("x", "s"), "x", "(= s (shape x))", subsume=True)),
        Rule("expand-identity", "expand(shape(x), x) = x",
             rewrite(pat.expand("x", shape="s"), "x", "(= s (shape x))", subsume=True)),
        Rule("identity-elim", "identity(x) = x", rewrite("(Identity x)", "x", subsume=True)),
        Rule("relu-idempotent", "relu(relu(x)) = relu(x)", rewrite("(Relu (Relu x))", "(Relu x)", subsume=True)),
    )


def layout_post_rules() -> Ruleset:
    return Ruleset("layout_post", _rules())
