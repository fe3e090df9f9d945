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
# # Optimize an ONNX model
#
# The whole pipeline on the ResNet-18 that ships with einsat (`einsat/data/resnet18.onnx`,
# PyTorch's export with its weights stripped): import, optimize, read the report, verify,
# write ONNX again, and check the written model with onnxruntime.

# %%
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import einsat
from einsat.egraph import Limits
from einsat.ir.summary import summarize
from einsat.verify import equivalent

# %% [markdown]
# ## Import
#
# The export keeps its weights as graph inputs with no values; `fill_weights="random"` gives them
# seeded values, so the model becomes a program of one input, `input`, with 122 weights.

# %%
path = Path(einsat.__file__).parent / "data" / "resnet18.onnx"
g = einsat.load_onnx(path, fill_weights="random", seed=0)
print(summarize(g, title=f"{path.name}: {len(g.nodes)} nodes"))
assert g.inputs == ("input",) and g.types["input"].shape == (1, 3, 224, 224)
assert g.op_counts()["batchnorm"] == 20

# %% [markdown]
# ## Optimize
#
# Small limits (`einsat.Limits`, the search's work) keep this under half a minute: three saturation
# steps, at most 8,000 e-nodes (the iteration limit ends the search, not its clock `time_s`), and at
# most 10 s for the ILP (`extract_s=10`). The ILP usually needs all ten: the report's extraction
# line then says "time limit" and the gap to the best bound, and the program it had by then may
# differ by a fraction of a percent on a slower or busier machine (given its time, `extract_s=300`
# as in `einsat demo`, it ends by work: 1.390x instead of 1.385x, after 73 s of ILP on the busy
# 2-core development machine). There the whole cell took 17-26 s (the report's time line: saturation
# about 8 s, the ILP 10-12 s, the verification 5-7 s). The report lists the modeled cost before and
# after (`cost="h100"`: the per-op times measured on an H100 80GB, `einsat/gpu/profiles/h100.json`;
# `"h100-roofline"` is the datasheet's roofline), the op counts that changed, the e-graph, the
# extraction and the verification. Under the measured times PET's mutants pay: its first rounds take
# about 3 s each.

# %%
result = einsat.optimize(g, cost="h100", limits=Limits(nodes=8_000, iterations=3, time_s=60, extract_s=10))
report = result.report
print(report)
assert report.verified, "optimize always verifies unless told not to"
assert report.cost_after < report.cost_before
# batchnorms fold into the convolutions (the measured model may keep one beside a conv it rewrote)
assert result.graph.op_counts().get("batchnorm", 0) < g.op_counts()["batchnorm"]
result  # in a notebook: the report with its pictures (`einsat optimize --report out.html` writes the same)

# %% [markdown]
# The optimized program, drawn (`Graph` has a rich display):

# %%
assert len(result.graph.nodes) < len(g.nodes)
result.graph

# %% [markdown]
# ## Verify again, on other inputs
#
# `optimize` already ran both programs on random inputs; `einsat.verify.equivalent` does it
# again on fresh ones, with a tolerance scaled to the op count and dtype, and reports the worst
# element:

# %%
check = equivalent(g, result.graph, seed=3)
print(check)
assert check.equivalent

# %% [markdown]
# ## Save as ONNX, run with onnxruntime
#
# The optimized graph uses einsat's fused ops (`fused_conv`, `fused_matmul`), which export as
# standard ONNX nodes; the file passes the ONNX checker and onnxruntime runs it.

# %%
out_dir = Path(tempfile.mkdtemp(prefix="einsat_nb_"))
out_path = out_dir / "resnet18_optimized.onnx"
einsat.save_onnx(result.graph, out_path)
model = onnx.load(out_path)
onnx.checker.check_model(model, full_check=True)
print(f"{out_path.name}: {out_path.stat().st_size / 1e6:.1f} MB, {len(model.graph.node)} ONNX nodes, "
      f"ir_version {model.ir_version}")

# %%
x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
session = ort.InferenceSession(str(out_path), providers=["CPUExecutionProvider"])
(from_ort,) = session.run(None, {"input": x})
reference = einsat.run(g, {"input": x})[g.outputs[0]]
rel = np.abs(from_ort - reference).max() / np.abs(reference).max()
print(f"onnxruntime vs einsat's NumPy run of the input model: worst relative difference {rel:.2e}")
assert from_ort.shape == reference.shape == (1, 1000)
assert rel < 1e-4
assert np.argmax(from_ort) == np.argmax(reference)

# %%
shutil.rmtree(out_dir)  # the 47 MB file was only for this check
