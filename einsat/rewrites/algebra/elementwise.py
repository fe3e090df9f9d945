"""Element-wise algebra: associativity, commutativity, distributivity, scalar multiplication.

Broadcasting is associative and commutative, so these laws hold for any operand shapes that
broadcast (TASO's element-wise axioms). Associativity and commutativity are explosive: they run
in their own ruleset under a back-off scheduler (`ac_rules`).

`mul-assoc` regroups only where the new inner product is weight-only ((x · s1) · s2 = x · (s1 · s2),
s1 · (s2 · x) = (s1 · s2) · x): what a product's regrouping enables is folding its constant factors
(a scale pair of an attention, a norm's weight into a scale) and moving one scale (the scalar rules
of `matmul`, commutativity bring it next to the other). Unguarded, every grouping of every product
chain entered: the pieces of the dynamo Llama exports grew to the node limit (12,000-14,000
e-nodes, mul-assoc the busiest rule at 9,000-15,000 matches), and saturate at 215-714 e-nodes with
the guard, with the same modeled program (benchmarks/results/speed.md). `add-comm` likewise turns
only a sum with a weight-only term (a bias: the rules that read a sum's order, `matmul-bias-fuse`
and the like, match the constant on one side; the recognition generators read sums in both
orders): on the dynamo Llama prefill it matched 17,000 times to the node limit, and the run now
saturates at 3,345 e-nodes with the same modeled program.
"""

from __future__ import annotations

from einsat.egraph.rules import BackOff, Rule, Ruleset, birewrite, rewrite

AC = (
    Rule("add-comm", "a + b = b + a  (a or b weight-only)",
         rewrite("(Add a b)", "(Add b a)", "(const a)") + "\n" + rewrite("(Add a b)", "(Add b a)", "(const b)")),
    Rule("mul-comm", "a * b = b * a", rewrite("(Mul a b)", "(Mul b a)")),
    Rule("add-assoc", "(a + b) + c = a + (b + c)", birewrite("(Add (Add a b) c)", "(Add a (Add b c))")),
    Rule("mul-assoc", "(a * b) * c = a * (b * c)  (the new inner product weight-only)",
         rewrite("(Mul (Mul a b) c)", "(Mul a (Mul b c))", "(const b)", "(const c)") + "\n"
         + rewrite("(Mul a (Mul b c))", "(Mul (Mul a b) c)", "(const a)", "(const b)")),
)

RULES = (
    # only a weight-only factor is distributed: what that enables is folding it into the terms
    # (a scale into a matmul's weight and bias); a computed factor expands products of sums
    # into polynomials (GELU's x * x * x over x = A @ W + b) whose every partial sum the
    # associativity rules then enumerate: GPT-2's layer grew to 27,000 e-nodes and stopped at
    # the time limit, and saturates at 465 with the guard (same gain); no workload lost any
    Rule("mul-add-distrib", "a * (b + c) = a * b + a * c  (a weight-only)",
         rewrite("(Mul a (Add b c))", "(Add (Mul a b) (Mul a c))", "(const a)")),
    Rule("mul-add-factor", "a * b + a * c = a * (b + c)",
         rewrite("(Add (Mul a b) (Mul a c))", "(Mul a (Add b c))")),
    Rule("mul-sub-distrib", "a * (b - c) = a * b - a * c",
         birewrite("(Mul a (Sub b c))", "(Sub (Mul a b) (Mul a c))")),
    Rule("sub-as-add", "a - b = a + (-b)", birewrite("(Sub a b)", "(Add a (Neg b))")),
    Rule("neg-mul", "-(a * b) = (-a) * b", birewrite("(Neg (Mul a b))", "(Mul (Neg a) b)")),
    Rule("neg-neg", "-(-a) = a", rewrite("(Neg (Neg a))", "a")),
    Rule("div-as-mul", "(a * b) / c = a * (b / c)", birewrite("(Div (Mul a b) c)", "(Mul a (Div b c))")),
    Rule("div-add-factor", "a / c + b / c = (a + b) / c",
         birewrite("(Add (Div a c) (Div b c))", "(Div (Add a b) c)")),
)


def ac_rules() -> Ruleset:
    return Ruleset("elementwise_ac", AC, backoff=BackOff(match_limit=1000), varying=True)


def elementwise_rules() -> Ruleset:
    return Ruleset("elementwise", RULES, varying=True)
