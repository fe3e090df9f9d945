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
# # Imperative NumPy in, pure graph out (TensorSSA)
#
# `einsat.functionalize(fn, example_inputs)` traces a NumPy-style function that writes through
# views and updates arrays in place, and returns a pure `einsat.Graph` (TensorSSA, DAC'24):
# views become `access` nodes, writes become `assign` nodes that produce a new version of the
# whole array. The function itself runs unchanged on arrays; that eager run is the oracle.
# See `docs/frontend.md` for what is traced.

# %%
import numpy as np

import einsat
from einsat.egraph import Limits
from einsat.errors import FrontendError

rng = np.random.default_rng(0)
WA = rng.standard_normal((16, 32)).astype(np.float32)  # constants the kernel closes over:
WB = rng.standard_normal((16, 32)).astype(np.float32)  # they become the graph's weights

# %% [markdown]
# ## An imperative kernel
#
# Two products written into one buffer through slices, a ReLU in place (`out=`), and a scale of
# the left half through a view that aliases the buffer.

# %%
def kernel(x):
    out = np.zeros((x.shape[0], 64), x.dtype)
    out[:, :32] = x @ WA
    out[:, 32:] = x @ WB
    np.maximum(out, 0, out=out)
    left = out[:, :32]
    left *= 0.5
    return out


x = rng.standard_normal((8, 16)).astype(np.float32)
eager = kernel(x.copy())

# %% [markdown]
# ## Functionalized
#
# No view and no mutation is left: every write is an `assign` producing a new value, every
# read through a view an `access`.

# %%
g = einsat.functionalize(kernel, (x,))
print(g)
ops = g.op_counts()
assert g.inputs == ("x",) and len(g.weights) >= 2
assert ops["assign"] == 3 and ops["access"] == 1 and ops["matmul"] == 2
np.testing.assert_array_equal(einsat.run(g, {"x": x})["out"], eager)  # bit for bit
g  # the program, drawn

# %% [markdown]
# The graph is traced once and holds for any input of the same type:

# %%
x_other = rng.standard_normal((8, 16)).astype(np.float32)
np.testing.assert_array_equal(einsat.run(g, {"x": x_other})["out"], kernel(x_other.copy()))

# %% [markdown]
# ## Optimized
#
# As a pure graph, the kernel goes through the e-graph like any program. The two products share
# `x` and have constant weights, so einsat merges them into one matmul on the concatenated
# weight, split back (`merge-matmul`).

# %%
result = einsat.optimize(g, limits=Limits(nodes=3_000, iterations=4, time_s=4, extract_s=1))
print(result.report)
print(result.graph)
assert result.report.verified
assert result.report.saturation.rule_matches["merge-matmul"] >= 1
assert result.graph.op_counts()["matmul"] == 1
assert result.report.cost_after < result.report.cost_before

# %% [markdown]
# Equal to the eager NumPy run (up to float32 rounding: the merged product sums in another
# order):

# %%
optimized_out = einsat.run(result.graph, {"x": x})["out"]
np.testing.assert_allclose(optimized_out, eager, rtol=1e-5, atol=1e-5)
print(f"max |optimized - eager| = {np.abs(optimized_out - eager).max():.2e}")

# %% [markdown]
# ## In-place updates of an argument
#
# A function that updates its argument in place returns the argument's new value as an extra
# output (`x_out`), so the caller's view of the world is kept:

# %%
def center_(x):
    x -= x.mean(axis=1, keepdims=True)
    return x.max()


small = rng.standard_normal((3, 4)).astype(np.float32)
gc = einsat.functionalize(center_, (small,))
print(gc)
arg = small.copy()
peak = center_(arg)
outs = einsat.run(gc, {"x": small})
assert gc.outputs == ("out", "x_out")
np.testing.assert_array_equal(outs["x_out"], arg)
np.testing.assert_array_equal(outs["out"], peak)

# %% [markdown]
# ## What does not functionalize
#
# A data-dependent shape has no static graph; the error names the source line and suggests a fix.

# %%
def positives(x):
    return x[x > 0]


try:
    einsat.functionalize(positives, (small,))
    raise AssertionError("a boolean-mask read was traced")
except FrontendError as e:
    message = str(e)
print(message)
assert "positives" in message and "np.where" in message
