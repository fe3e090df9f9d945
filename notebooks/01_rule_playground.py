# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The rule playground: write a rewrite rule, check it, watch it fire
#
# A rewrite rule in einsat is one law: a name, the law in one line, and the egglog command
# stating it (`einsat.egraph.Rule`). This notebook adds a law that is **not** in the default
# rule set,
#
#     exp(a) * exp(b) = exp(a + b)      (any shapes that broadcast)
#
# then
#
# 1. checks its soundness on random inputs: both sides as builder programs, shapes drawn by
#    hypothesis, run on NumPy (`einsat.testing.rules`);
# 2. watches it fire in an e-graph (a `Session` with small limits; the report counts matches
#    per rule) and checks that every e-class still holds only equal terms;
# 3. extracts the cheapest program and compares modeled costs, and runs it through
#    `einsat.optimize` next to the default rules;
# 4. writes a *broken* law and sees the soundness check catch it.

# %%
import numpy as np
from hypothesis import strategies as st

import einsat
from einsat import GraphBuilder
from einsat.egraph import Limits, Rule, Ruleset, Schedule, Session, StopReason, pat
from einsat.egraph.rules import birewrite, rewrite
from einsat.extract import cost_model, extract
from einsat.rewrites.algebra.elementwise import ac_rules
from einsat.rewrites.schedule import default_rules, default_schedule
from einsat.testing.egraphs import assert_consistent
from einsat.testing.rules import Case, Leaves, assert_sound, check_goal, check_sound, leaves, shapes
from einsat.testing.strategies import broadcastable
from einsat.verify import equivalent

# %% [markdown]
# ## 1. The law, as a rule
#
# Constructors are the ops' names in CamelCase (`Exp`, `Mul`, `Add`, ...); lowercase atoms are
# pattern variables. `rewrite(lhs, rhs, *guards)` is one direction, `birewrite` both. Broadcasting
# commutes with `exp`, so the law needs no shape guard. An op with attributes is written with the
# pattern builder, which binds them by name: `pat.transpose("x", perm="p")` is `(Transpose p x)`,
# `pat.conv("x", "w", groups=1)` leaves stride, padding and dilation wild.

# %%
EXP_MUL = Rule("exp-mul", "exp(a) * exp(b) = exp(a + b)", rewrite("(Mul (Exp a) (Exp b))", "(Exp (Add a b))"))
playground = Ruleset("playground", (EXP_MUL,))

assert EXP_MUL.name not in {r.name for r in default_rules()}, "the law is new to einsat"
print(EXP_MUL.law)
print(*EXP_MUL.commands(playground.name), sep="\n")
print(pat.conv("x", "w", groups=1))

# %% [markdown]
# The same law written with typed Python patterns instead of text: `pat.<op>` exists for every
# op of the registry, checks the op's arity and attribute names, and renders the egglog text.
# Both spellings are one rule.

# %%
EXP_MUL_TYPED = Rule("exp-mul", "exp(a) * exp(b) = exp(a + b)",
                     rewrite(pat.mul(pat.exp("a"), pat.exp("b")), pat.exp(pat.add("a", "b"))))
assert EXP_MUL_TYPED == EXP_MUL
print(EXP_MUL_TYPED.egglog)
try:
    pat.transpose("x", perms="p")  # a misspelt attribute is an error, not a silently wrong rule
except Exception as e:  # noqa: BLE001 - shown, then checked
    print(type(e).__name__, e)
    assert "perms" in str(e)

# %% [markdown]
# ## 2. Soundness on random inputs
#
# A `Case` states the rule by example: a strategy of *leaves* (input shapes, a seed) and the two
# sides as functions `(builder, tensors by name, leaves) -> tensor`. Here `a` has a drawn shape
# and `b` a drawn shape that broadcasts against it.

# %%
EXP_LEAVES = shapes(1, 3).flatmap(lambda s: st.tuples(st.just(s), broadcastable(s))).flatmap(
    lambda ab: leaves({"a": ab[0], "b": ab[1]}))

exp_case = Case("exp-mul", EXP_LEAVES,
                lhs=lambda b, t, p: b.mul(b.exp(t["a"]), b.exp(t["b"])),
                rhs=lambda b, t, p: b.exp(b.add(t["a"], t["b"])))

assert_sound(exp_case)  # hypothesis draws shapes and seeds; both sides agree on NumPy (float64)
print("exp-mul is sound on every drawn example")

# %% [markdown]
# One example by hand, to see what the check compares: the two sides are ordinary programs.

# %%
p = Leaves(inputs={"a": (2, 3), "b": (3,)}, seed=7)
lhs_program = exp_case.program(exp_case.lhs, p, "lhs")
rhs_program = exp_case.program(exp_case.rhs, p, "rhs")
print(lhs_program)
print(rhs_program)
check_sound(exp_case, p)
assert lhs_program.op_counts()["exp"] == 2 and rhs_program.op_counts()["exp"] == 1

# %% [markdown]
# ## 3. Watch it fire in an e-graph
#
# Without the new rule, the default rules cannot prove the two sides equal (nothing in the
# default set relates `exp` and `mul`):

# %%
s = Session(Limits(nodes=2_000, iterations=3, time_s=5))
(left,) = s.add_graph(lhs_program)
report = s.run(default_schedule())
(right,) = s.add_graph(rhs_program, root=False)
print(report.summary())
assert not s.equivalent(left, right)

# %% [markdown]
# A program where the law only applies after the product is re-associated:
# `exp(x) * (exp(y) * z)`. The playground ruleset runs next to einsat's associativity and
# commutativity rules (a back-off ruleset). einsat's own `mul-assoc` regroups only into a product
# of weights (bounded by design: every grouping of every product chain made the e-graphs of real
# models explode), and `x`, `y`, `z` are inputs here, so the playground adds the whole law for this
# program. The limits bound the run (nodes, steps, seconds); the report says why it stopped and how
# often each rule matched.

# %%
MUL_ASSOC = Rule("mul-assoc-any", "(a * b) * c = a * (b * c)",
                 birewrite("(Mul (Mul a b) c)", "(Mul a (Mul b c))"))
playground = Ruleset("playground", (EXP_MUL, MUL_ASSOC))

b = GraphBuilder("exp_chain")
x, y, z = (b.input(n, (4, 8), np.float64) for n in "xyz")
program = b.build(b.mul(b.exp(x), b.mul(b.exp(y), z)))

s = Session(Limits(nodes=2_000, iterations=4, time_s=5))
(root,) = s.add_graph(program)
report = s.run(Schedule((ac_rules(), playground)))
print(report.summary())
for name, stats in sorted(report.rules.items()):
    print(f"  {name:16} {stats.matches:4} matches")
assert report.rules["exp-mul"].matches > 0
assert report.stop_reason is StopReason.SATURATED  # small enough to run to a fixed point

# %% [markdown]
# The e-graph itself: each dashed box is an e-class (a set of equal values), holding its
# e-nodes; an edge goes from an e-node to each e-class it takes as input. The root (yellow)
# now holds both `exp(x) * (exp(y) * z)` and the forms the rules found.

# %%
assert s.export().num_nodes() > len(program.nodes)
s  # a Session draws its e-graph (`einsat.viz.egraph`)

# %% [markdown]
# Step by step: the same program and rules, one step at a time (each step runs every rule set of
# the schedule once), drawing the e-graph after each step. The first step re-associates the
# product and fires `exp-mul` on the new grouping; in the second, e-classes proved equal merge
# (the count of e-nodes can go down: two equal e-nodes become one); the third changes nothing:
# saturated.

# %%
from IPython.display import SVG, display  # noqa: E402  (the notebook's imports, where they are first needed)

stepper = Session(Limits(nodes=2_000, iterations=1, time_s=5))
stepper.add_graph(program)
sizes = [stepper.export().num_nodes()]
for step in range(1, 4):
    stop = stepper.run(Schedule((ac_rules(), playground))).stop_reason
    sizes.append(stepper.export().num_nodes())
    print(f"after step {step}: {sizes[-1]} e-nodes ({stop.value})")
    display(stepper)
assert sizes[1] > sizes[0] and stop is StopReason.SATURATED

# %% [markdown]
# How it grew, phase by phase (the report keeps every phase: its rule set, e-nodes after it):

# %%
from einsat.viz.charts import growth_svg  # noqa: E402

phases = [{"phase": p.phase, "nodes": p.nodes} for p in report.phases]
assert phases[-1]["nodes"] >= phases[0]["nodes"]
SVG(growth_svg(phases))

# %% [markdown]
# The goal form `exp(x + y) * z` is now in the root's e-class, and every e-node of the e-graph
# still computes its e-class's value (the invariant "one e-class, one value", checked on NumPy):

# %%
g2 = GraphBuilder("goal")
x2, y2, z2 = (g2.input(n, (4, 8), np.float64) for n in "xyz")
(goal,) = s.add_graph(g2.build(g2.mul(g2.exp(g2.add(x2, y2)), z2)), root=False)
assert s.equivalent(root, goal)
checked = assert_consistent(s.export())
print(f"{checked} e-nodes checked")

# %% [markdown]
# `check_goal` packages the same check for one case: the rule alone, on the case's left side,
# must put the right side into the left side's e-class.

# %%
goal_check = check_goal(exp_case, p, [playground])
print(goal_check.report.summary())

# %% [markdown]
# ## 4. Extract, and compare costs
#
# Extraction picks one e-node per e-class, minimizing the modeled cost (the H100 roofline
# model here). Two `exp` kernels and a product became one sum and one `exp`:

# %%
h100 = cost_model("h100")
best = extract(s.export(), cost=h100, method="ilp", time_limit=2)
before, after = h100.graph_cost(program), best.cost
print(best.graph)
print(f"modeled cost: {before:.3f} -> {after:.3f} {h100.unit}")
assert after < before
assert best.graph.op_counts().get("exp", 0) == 1
assert equivalent(program, best.graph)

# %% [markdown]
# What extraction chose, drawn: the new nodes (orange) compute what the input did not.

# %%
from einsat.viz.graph import changed_nodes, graph_svg  # noqa: E402

new = changed_nodes(program, best.graph)
assert {n.op.value for n in best.graph.nodes if n.name in new} >= {"exp", "add"}
SVG(graph_svg(best.graph, changed=new, title="extracted"))

# %% [markdown]
# The same rule plugs into `einsat.optimize` next to the default schedule (schedules add up);
# `optimize` verifies its result against the input before returning. The default schedule also
# fuses element-wise chains (`eop-chain-fusion`, fusion as a derivation): under the H100 model the
# whole chain, one kernel, beats both the two-`exp` and the one-`exp` programs of separate kernels,
# so the result is a single fused eOperator.

# %%
result = einsat.optimize(program, rules=default_schedule() + Schedule((playground,)),
                         limits=Limits(nodes=3_000, iterations=4, time_s=5, extract_s=2))
print(result.report)
assert result.report.verified
assert result.report.cost_after < result.report.cost_before
assert result.graph.op_counts() == {"eop": 1}
result  # the report as a notebook shows it: tables, programs before and after, growth, costs

# %% [markdown]
# ## 5. A broken law is caught
#
# `sqrt(a * b) = sqrt(a) * sqrt(b)` is a law of the non-negative reals, not of tensors: where
# `a` and `b` are both negative, the left side is a number and the right side NaN. The soundness
# check finds such inputs, and hypothesis shrinks the counterexample to a small shape.

# %%
broken_case = Case("sqrt-mul", leaves({"a": shapes(1, 2), "b": ()}),
                   lhs=lambda b, t, p: b.sqrt(b.mul(t["a"], t["b"])),
                   rhs=lambda b, t, p: b.mul(b.sqrt(t["a"]), b.sqrt(t["b"])))

caught = None
with np.errstate(invalid="ignore"):  # sqrt of negatives: NaN, which is the point
    try:
        assert_sound(broken_case)
    except AssertionError as e:
        caught = e
assert caught is not None, "the broken law passed the soundness check"
print(str(caught).splitlines()[0])

# %% [markdown]
# Had the broken rule gone into an e-graph anyway, the consistency check would name the e-class
# it corrupted:

# %%
SQRT_MUL = Rule("sqrt-mul", "sqrt(a * b) = sqrt(a) * sqrt(b)  (WRONG for negatives)",
                rewrite("(Sqrt (Mul a b))", "(Mul (Sqrt a) (Sqrt b))"))
bad = Session(Limits(nodes=500, iterations=2, time_s=5))
bad.add_graph(broken_case.program(broken_case.lhs, Leaves(inputs={"a": (16,), "b": (16,)}, seed=1), "lhs"))
bad_report = bad.run(Schedule((Ruleset("broken", (SQRT_MUL,)),)))
assert bad_report.rules["sqrt-mul"].matches > 0
corrupted = None
with np.errstate(invalid="ignore"):
    try:
        assert_consistent(bad.export(), seed=1)
    except AssertionError as e:
        corrupted = e
assert corrupted is not None, "the corrupted e-graph passed the consistency check"
(where,) = [line for line in str(corrupted).splitlines() if line.startswith("e-class")]
print(where)
