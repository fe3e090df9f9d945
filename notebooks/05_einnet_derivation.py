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
# # EinNet's derivation of a 3×3 convolution, step by step
#
# EinNet (OSDI'23) Figure 5: a 3×3 convolution becomes a matrix multiplication followed by an
# eOperator, *OffsetReduce*, that adds the nine shifted products. The steps are expressions
# (§3): traversals `L`, summations `Σ`, reads of tensors at quasi-affine subscripts (0 outside a
# tensor: padding), and *scopes*, expressions whose results are instantiated as tensors.
#
# - E1 → E2: **summation splitting** (Σ_crs → Σ_rs {Σ_c});
# - E2 → E4: **variable substitution** t1 = h + r, t2 = w + s, with the new ranges relaxed to
#   boxes (**boundary relaxing**);
# - E4 → E6: **boundary tightening**: t1, t2 outside the image read only padding;
# - E6 → E7: **instantiation**: the inner scope matches Matmul by the iterator mapping table
#   (Table 2), the outer one is the memory-bound eOperator OffsetReduce (E7).
#
# einsat's convolution is ONNX's NCHW; each step below is a rule of `einsat.rewrites.derive`
# applied to the expression of the previous one, and checked on NumPy.

# %%
import numpy as np

import einsat
from einsat.ir import GraphBuilder, Op
from einsat.ir.expr import evaluate, show, var
from einsat.ir.expr.nodes import scopes
from einsat.rewrites.derive import rules
from einsat.rewrites.derive.instantiate import instantiate
from einsat.rewrites.derive.match import matches, mismatch
from einsat.rewrites.derive.search import SearchLimits, derive

N, C, H, W, F = 1, 16, 6, 7, 8
rng = np.random.default_rng(0)
weight = rng.standard_normal((F, C, 3, 3))
b = GraphBuilder("conv3x3")
x = b.input("x", (N, C, H, W), np.float64)
conv = b.build(b.conv(x, b.weight("w", weight), padding=1), names=["y"])
node = conv.nodes[0]
types = [conv.types[i] for i in node.inputs]
shapes = [t.shape for t in types]
inputs = [rng.standard_normal((N, C, H, W)), weight]
want = einsat.run(conv, {"x": inputs[0]})["y"]


def same(e) -> bool:
    return np.allclose(evaluate(e, inputs), want, rtol=1e-12, atol=1e-12)


# %% [markdown]
# ## E1: the convolution as an expression
#
# `OpDef.expression` gives every tensor-algebra op its expression. The printer names traversal
# iterators `i0, i1, ...` by position and summations `s0, s1, ...` in a canonical order: the
# print is EinNet's fingerprint (§6.2).

# %%
e1 = node.definition.expression(types, node.attrs)
print("E1:", show(e1))
assert same(e1)

# %% [markdown]
# ## E2: summation splitting
#
# Σ over the channel c stays inside a new scope, whose traversal adds the taps r, s; the outer
# expression sums the scope over r and s.

# %%
e2 = rules.split_summation(e1, e1, ["k0", "k1"])  # the taps (named k0, k1 by conv's expression)
(inner2,) = scopes(e2)
print("E2:", show(e2))
assert [it.size for it in inner2.sums] == [C] and same(e2)

# %% [markdown]
# ## E3, E4: variable substitution, with relaxed boundaries
#
# In the inner scope, t1 = h + r replaces h: the scope is indexed by (r, s, n, f, t1, w) and its
# reader reads it at t1 = h + r. t1's range is the box of h + r, [0, H + 2): boundary relaxing.
# Then t2 = w + s.

# %%
h, r = inner2.loops[4].name, inner2.loops[0].name
e3 = rules.substitute(e2, inner2, h, var(h) + var(r))
(inner3,) = scopes(e3)
w_, s_ = inner3.loops[5].name, inner3.loops[1].name
e4 = rules.substitute(e3, inner3, w_, var(w_) + var(s_))
print("E3:", show(e3))
print("E4:", show(e4))
assert same(e3) and same(e4)

# %% [markdown]
# ## E6: boundary tightening
#
# The inner scope reads the input at (t1 − 1, t2 − 1): outside [1, H + 1) × [1, W + 1) it reads
# only padding, so its traversal shrinks to the image. (EinNet's E5, traversal merging with an
# identity map, is implicit here: scopes are read in their own coordinates.) `normalize`
# tightens every range and renames canonically.

# %%
e6 = rules.normalize(e4, shapes)
(inner6,) = scopes(e6)
print("E6:", show(e6))
print("inner ranges:", [(it.lo, it.hi) for it in inner6.loops])
assert [(it.lo, it.hi) for it in inner6.loops][-2:] == [(1, H + 1), (1, W + 1)] and same(e6)

# %% [markdown]
# ## E7: instantiation
#
# The inner scope reads the input and the weight at single iterators: its distance to Matmul
# (mismatched iterators of Table 2) is 0 and it matches Matmul (and a 1×1 convolution). Its
# operands are a view of x ([N, C, H·W]) and a transpose of the weight (a constant: folded in
# the e-graph). The outer scope has an arithmetic intensity below 4: it is the eOperator
# OffsetReduce, E7, which einsat runs on NumPy, exports to ONNX and compiles to a CUDA kernel.

# %%
weights = frozenset({1})
print("mismatch:", mismatch(inner6, weights))
print("operators:", [m.op.value for m in matches(inner6, shapes, weights)])
program = instantiate(e6, types, weights)
print(program)
ops = [n.op for n in program.nodes]
assert ops.count(Op.MATMUL) == 1 and ops.count(Op.EOP) == 1 and Op.CONV not in ops
program  # drawn in a notebook: the weight's transpose (folded in the e-graph), the Matmul, E7

# %% [markdown]
# The program computes the convolution: on NumPy (any inputs), and over the integers mod
# 2^31 − 1 (PET's verifier checks the eOperator exactly, by its field rule).

# %%
got = einsat.run(program, {"in0": inputs[0], "in1": weight})[program.outputs[0]]
assert np.allclose(got, want, rtol=1e-12, atol=1e-12)

from einsat.verify import find_differences  # noqa: E402

b = GraphBuilder("derived")
xi = b.input("x", (N, C, H, W), np.float64)
env = {"in0": xi, "in1": b.weight("w", weight)}
for n in program.nodes:
    env[n.outputs[0]] = b.op(n.op, *[env[i] for i in n.inputs], **dict(n.attrs))
derived = b.build(env[program.outputs[0]], names=["y"])
diffs = find_differences(conv, derived)
print(diffs)
assert diffs.equivalent

# %% [markdown]
# ## The search finds it by itself
#
# The distance-guided search (§6) starts from E1 and reaches E6 on its own: explorative
# derivation (here the summation split), then converging derivation (the substitutions that
# lower the distance to Matmul), every state deduplicated by its fingerprint. Among its
# candidates is the Matmul + OffsetReduce program of Figure 3(b).

# %%
report = derive(e1, types, weights, SearchLimits(), flops=conv.flops())
print(f"{report.states} states ({report.unique} distinct), {len(report.candidates)} programs, "
      f"{report.time_s:.2f} s, {report.stop}")
forms = [[n.op.value for n in c.graph.nodes if n.op not in (Op.RESHAPE, Op.TRANSPOSE)] for c in report.candidates]
print(forms[:6])
assert ["matmul", "eop"] in forms
