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
# # PET's corrections: a partially equivalent mutant, made equivalent
#
# PET (OSDI'21) Figure 1: a convolution over a batch of images becomes a convolution over
# *pairs of images placed side by side* along the width (a wider image gives the GPU more
# parallelism). The mutant is cheaper but wrong at the seam of each pair: there the kernel
# reads the neighbouring image instead of the zero padding. PET's corrector finds exactly
# those output boxes, without enumerating positions:
#
# 1. **box propagation** (§5.2 step 1, Figures 4 and 5): split points per dimension from the
#    inputs to the outputs; inside one box every output is the same polynomial up to a shift;
# 2. **random tests in the field of integers mod p = 2^31 − 1** (Theorems 1 and 2): m + 1
#    positions per box, a few random inputs;
# 3. **correction** (step 3): the original computation restricted to the failing boxes,
#    written over the mutant's output (`Correct` nodes).

# %%
import numpy as np

import einsat
from einsat import GraphBuilder
from einsat.egraph import Limits, Schedule, Session
from einsat.extract import RooflineCost
from einsat.rewrites.mutate.admit import admit
from einsat.rewrites.mutate.generate import mutate_generator
from einsat.rewrites.mutate.grammar import mutants
from einsat.rewrites.schedule import default_schedule
from einsat.verify import P, Region, boxes, correct, equivalent, find_differences
from einsat.verify.placement import correct_placed
from einsat.verify.splits import count_cells, none

N, C, H, W, F = 4, 3, 5, 6, 2  # a batch of 4 images, 3 channels, 5 x 6 pixels, 2 filters
weight = np.random.default_rng(0).standard_normal((F, C, 3, 3)).astype(np.float32)

# %% [markdown]
# ## The original program and the mutant
#
# The original: one "same" 3×3 convolution (padding 1). The mutant: reshape the batch into
# pairs, transpose the pair dimension next to the width, reshape to one image of width 2W
# (Figure 1(b)'s T1 → T3), convolve, and undo the layout change.

# %%
b = GraphBuilder("original")
x = b.input("x", (N, C, H, W))
original = b.build(b.conv(x, b.weight("w", weight), padding=1), names=["y"])

b = GraphBuilder("mutant")
x = b.input("x", (N, C, H, W))
pairs = b.reshape(x, shape=(N // 2, 2, C, H, W))
side_by_side = b.transpose(pairs, perm=(0, 2, 3, 1, 4))
wide = b.reshape(side_by_side, shape=(N // 2, C, H, 2 * W))  # T3: two images per row
conv = b.conv(wide, b.weight("w", weight), padding=1)
back = b.transpose(b.reshape(conv, shape=(N // 2, F, H, 2, W)), perm=(0, 3, 1, 2, 4))
mutant = b.build(b.reshape(back, shape=(N, F, H, W)), names=["y"])
print(mutant)

# %% [markdown]
# On random inputs the two programs agree almost everywhere, but not everywhere: the columns
# at each seam differ (the last column of the left image, the first of the right one).

# %%
xs = np.random.default_rng(1).standard_normal((N, C, H, W)).astype(np.float32)
y_orig = einsat.run(original, {"x": xs})["y"]
y_mut = einsat.run(mutant, {"x": xs})["y"]
differs = ~np.isclose(y_orig, y_mut, rtol=1e-4, atol=1e-4)

seams = np.zeros((N, F, H, W), bool)
seams[0::2, :, :, W - 1] = True  # a left image reads its right neighbour instead of padding
seams[1::2, :, :, 0] = True      # a right image reads its left neighbour
print(f"{differs.sum()} of {differs.size} output elements differ")
assert (differs == seams).all()
assert not equivalent(original, mutant)

# %% [markdown]
# ## Box propagation
#
# Figure 4: a 3×3 convolution with zero padding has nine boxes per output plane, split at row
# and column 1 and H−1, W−1 (the borders read fewer taps). The sources are the program's
# variables: the input and the weight are each one box (a weight left out would count as a
# constant tensor, split wherever its values change).

# %%
sources = {"x": none((N, C, H, W)), "w": none(weight.shape)}
orig_splits = boxes.propagate(original, sources)
print("original output splits:", orig_splits["y"])
assert orig_splits["y"] == ((), (), (1, H - 1), (1, W - 1))
assert count_cells(orig_splits["y"][2:]) == 9

# %% [markdown]
# Figure 5: in the mutant, the input is one box; the wide image T3 is split at the seam (W);
# its convolution splits near every edge and around the seam; undoing the layout maps those
# split points back onto the batch dimension and the width.

# %%
mut_splits = boxes.propagate(mutant, sources)
for value in (wide.name, conv.name, "y"):
    print(f"{value:>12} {list(mutant.types[value].shape)}: splits {mut_splits[value]}")
assert mut_splits[wide.name][3] == (W,)
assert {W - 1, W, W + 1} <= set(mut_splits[conv.name][3])

# %% [markdown]
# ## The corrector: where do the programs differ?
#
# `find_differences` intersects both programs' boxes, evaluates both at Theorem 1's positions
# of every box over the field mod p, and keeps the boxes that fail. Theorem 2 bounds the chance
# that a differing position passes every test.

# %%
diffs = find_differences(original, mutant)
print(diffs)
expected = [Region((k, 0, 0, W - 1 if k % 2 == 0 else 0), (k + 1, F, H, W if k % 2 == 0 else 1)) for k in range(N)]
assert diffs.regions["y"] == expected
assert (diffs.mask("y") == seams).all()
assert diffs.error_bound < 1e-15 and P == 2 ** 31 - 1
assert diffs.positions < differs.size  # a few positions per box, not every element


# %% [markdown]
# The regions, drawn on the output's grid (red: where the mutant is wrong):

# %%
assert not diffs.equivalent
diffs

# %% [markdown]
# ## The corrected mutant
#
# `correct` writes the original computation, restricted to each failing region (a 3×3 conv on
# a few input columns), over the mutant's output: one `Correct` node per region.

# %%
fixed = correct(original, mutant, diffs)
print(fixed)
assert sum(n.op is einsat.Op.CORRECT for n in fixed.nodes) == len(expected)

# %% [markdown]
# It is equivalent to the original, numerically (float32 on random inputs) and in the field
# (the corrector finds no region left):

# %%
numeric = equivalent(original, fixed)
print(numeric)
assert numeric.equivalent
assert find_differences(original, fixed).equivalent
np.testing.assert_allclose(einsat.run(fixed, {"x": xs})["y"], y_orig, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## The generator finds the mutant by itself
#
# Nobody wrote the mutant above into einsat: PET's mutation generator (`einsat.rewrites.mutate`)
# enumerates mutants of each subprogram from a typed grammar (here: layouts that move a factor
# of one dimension into another), keeps those whose core is cheaper under the session's cost
# model, and admits a mutant only corrected and proved equal. Equal FLOPs hide Figure 1's gain
# from the roofline model, so this stand-in for a GPU profile says what PET measured: a conv
# over wider images runs faster (here a conv takes 20 µs, over the wider images 5 µs).

# %%
class WiderIsFaster(RooflineCost):
    def node_cost(self, op, attrs, ins, outs):
        if op is einsat.Op.CONV and outs[0].size == N * F * H * W:  # the original and the mutant, not a fix
            return 5.0 if ins[0].shape[3] > W else 20.0
        return super().node_cost(op, attrs, ins, outs)


found = [m for m in mutants(original) if m.family == "layout"]
for m in found:
    print(f"{m.what:45} conv input {[n for n in m.graph.nodes if n.op is einsat.Op.CONV][0].inputs[0]}")
side_by_side_mutant = next(m for m in found if m.what == "dim 0 inner x2 -> dim 3 outer")
assert find_differences(mutant, side_by_side_mutant.graph).equivalent  # the same program as Figure 1(b)

# %% [markdown]
# ### Its regions, placed
#
# At the mutant's output the seams are one region per image; on the wide conv's output, before
# the layout is undone, they are one region: the two columns around the middle of every pair.
# The correction goes there (`correct_placed`), and the fix restricts the original conv to
# those columns through the reshapes and transposes: every other image, one column each.

# %%
placed = correct_placed(original, side_by_side_mutant.graph)
print(placed.differences)
(regions,) = placed.differences.regions.values()
assert len(regions) == 1 and (regions[0].starts[3], regions[0].ends[3]) == (W - 1, W + 1)
fix_convs = [n for n in placed.graph.nodes if n.op is einsat.Op.CONV and n.name.startswith("fix/conv")]
for n in fix_convs:
    print(n.name, placed.graph.types[n.inputs[0]], "->", placed.graph.types[n.outputs[0]])
assert len(fix_convs) == 2 and all(placed.graph.types[n.outputs[0]].shape == (N // 2, F, H, 1) for n in fix_convs)

# %% [markdown]
# ### Admitted into the e-graph
#
# The generator runs as one phase of saturation: the corrected program enters over the original
# conv's e-classes and is unioned with its output. The e-class of `y` now holds the conv and the
# corrected mutant; extraction picks whichever the cost model prefers. In `einsat.optimize` the
# default rules also fuse the correction into the reshape/transpose chain that restores the
# layout (`fused_correct`, one pass) and the fix convs with the mutant conv (`correction-fusion`).
# The default rules would also derive this conv EinNet's way (its cost model makes the conv slower
# than its GEMM, so a derivation can pay, and one wins); to show PET's form we leave that out.

# %%
session = Session(Limits(generator_s=60.0), cost=WiderIsFaster("h100"))
session.add_graph(original)
report = session.run(Schedule((mutate_generator(),)))
print(report.rounds[0].counts)
assert report.rounds[0].counts["admitted"] >= 1
data = session.export()
x_class = next(c for c, cls in data.classes.items() if any(n.leaf == ("input", "x") for n in cls.nodes))
y_class = next(c for c, cls in data.classes.items()  # the original conv's e-class
               if any(n.op is einsat.Op.CONV and n.children[0] == x_class for n in cls.nodes))
print([n.op.value for n in data.classes[y_class].nodes])
assert len(data.classes[y_class].nodes) > 1  # the conv, and the corrected mutants (a layout undone, or a Correct)
assert admit(original, side_by_side_mutant.graph).graph is not None
pet_rules = default_schedule(derivations=False)
result = einsat.optimize(original, cost=WiderIsFaster("h100"), limits=Limits(generator_s=60.0), rules=pet_rules)
print(result.report)
corrections = (einsat.Op.CORRECT, einsat.Op.FUSED_CORRECT)
assert any(n.op in corrections for n in result.graph.nodes) and result.report.verified
