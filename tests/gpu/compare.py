"""Comparing a backend's outputs with the NumPy reference, with tolerances derived, not tuned.

- exact: layout, selection, comparison and single correctly-rounded ops must match bitwise.
- ulp: transcendental functions (CUDA's and NumPy's libm differ by a few ulps): rtol 1e-6
  (8 ulps of fp32) and atol 1e-6 for results near zero.
- sum: multi-linear ops summing K products per output. Any summation order stays within
  γ_K·Σ|terms| of the exact value (Higham, Accuracy and Stability, §3.1), so two orders differ
  by at most 2γ_K·Σ|terms|; Σ|terms| is the op applied to |inputs| (multi-linear!). The bound
  used is 4·K·u·Σ|terms| + 16u|ref| (u = unit roundoff; the relative part covers a fused
  activation's libm rounding); K is the op's FLOPs per output. Transform
  convolutions (Winograd, FFT: cuDNN picks them by timing) have error constants about an order
  of magnitude above direct summation, hence the factor 16 for conv-like ops.
- norm: softmax / layernorm / batchnorm: 16·u·(n + 8)·max|ref|, n the normalized length.
"""

from __future__ import annotations

import numpy as np

from einsat.gpu.interpreter import run
from einsat.ir.graph import Graph, Node

EPS = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53, np.dtype(np.float16): 2.0**-11}
TRANSFORM_OPS = {"conv", "conv_transpose", "fused_conv"}


def _abs_graph(graph: Graph) -> Graph:
    """The same graph with signs taken out of attributes and activations (for Σ|terms|)."""
    nodes = []
    for n in graph.nodes:
        attrs = dict(n.attrs)
        for k in ("alpha", "beta"):
            if k in attrs and n.op.value == "gemm":
                attrs[k] = abs(attrs[k])
        if "activation" in attrs:
            attrs["activation"] = "none"
        nodes.append(Node(n.op, n.inputs, n.outputs, attrs, n.name))
    weights = {k: np.abs(v) for k, v in graph.weights.items()}
    return Graph(nodes, graph.input_types(), graph.outputs, weights, graph.name)


def terms_per_output(graph: Graph, case) -> float:
    if case.op == "loop":
        trip = int(case.inputs["trip"])
        return 2.0 * max(trip, 1)
    node = graph.nodes[-1]
    ins, outs = graph.node_types(node)
    size = max(outs[0].size, 1)
    return max(1.0, node.definition.flops(ins, outs, node.attrs) / size)


def norm_length(case) -> int:
    node = case.graph.nodes[-1]
    x = case.graph.types[node.inputs[0]]
    if case.op == "softmax":
        return x.shape[node.attrs["axis"]]
    if case.op in ("layernorm", "rmsnorm"):
        return int(np.prod(x.shape[node.attrs["axis"]:]))
    return 1


def assert_case(case, got: dict[str, np.ndarray], want: dict[str, np.ndarray] | None = None) -> None:
    want = want if want is not None else run(case.graph, case.inputs)
    bound = None
    if case.tolerance == "sum":
        absolute = run(_abs_graph(case.graph), {k: np.abs(v) for k, v in case.inputs.items()})
        k = terms_per_output(case.graph, case)
        factor = 16.0 if case.op in TRANSFORM_OPS else 1.0
        bound = {n: factor * 4 * k * absolute[n].astype(np.float64) for n in want}
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, f"{case.op}: output {name} has shape {g.shape}, NumPy's {w.shape}"
        assert g.dtype == w.dtype, f"{case.op}: output {name} has dtype {g.dtype}, NumPy's {w.dtype}"
        if case.tolerance == "exact" or w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w, err_msg=f"{case.op}: {name}")
            continue
        u = EPS[w.dtype]
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        if case.tolerance == "ulp":
            np.testing.assert_allclose(g64, w64, rtol=1e-6, atol=1e-6, err_msg=f"{case.op}: {name}")
        elif case.tolerance == "sum":
            err = np.abs(g64 - w64)
            allowed = u * bound[name] + 16 * u * np.abs(w64)
            bad = ~(err <= allowed)
            assert not bad.any(), (f"{case.op}: {name}: {bad.sum()} of {bad.size} elements beyond the bound; "
                                   f"worst error {np.nanmax(err)} "
                                   f"where allowed {allowed.flat[np.nanargmax(err - allowed)]}")
        else:
            n = norm_length(case)
            atol = 16 * u * (n + 8) * (np.nanmax(np.abs(w64)) if w64.size else 0.0)
            np.testing.assert_allclose(g64, w64, rtol=0, atol=atol, err_msg=f"{case.op}: {name}")
