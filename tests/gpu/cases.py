"""One hypothesis strategy per registry op: a small program applying it, with inputs.

Each strategy draws a `Case`: a graph whose last node is the op under test (preceded, when
`strided` is drawn, by a transpose that hands the op a non-contiguous view of its first
input), its inputs, and the tolerance class the comparison with NumPy uses. Shapes and
attributes come from `einsat.testing.strategies` where the registry defines them (conv,
conv_transpose, pooling, slice) and are drawn here otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from einsat.ir.builder import GraphBuilder
from einsat.ir.graph import Graph
from einsat.ir.registry import Op
from einsat.testing import strategies as rs

F32 = np.float32
# mostly fp32 (what the GPU runs), fp64 now and then (cuBLAS/cuDNN/kernels in double)
floats = st.sampled_from([F32, F32, F32, np.float64])


@dataclass
class Case:
    op: str
    graph: Graph
    inputs: dict[str, np.ndarray]
    tolerance: str                      # exact | ulp | sum | norm
    abs_inputs: dict[str, np.ndarray] = field(default_factory=dict)

    def __repr__(self):
        shapes = {k: list(v.shape) for k, v in self.inputs.items()}
        return f"Case({self.op}, inputs={shapes}, nodes={[str(n.op_name) for n in self.graph.nodes]})"


class _B:
    """A builder that records input arrays, with an optional transposed-view first input."""

    def __init__(self, op: str, seed: int, dtype=F32):
        self.b = GraphBuilder(op)
        self.rng = np.random.default_rng(seed)
        self.inputs: dict[str, np.ndarray] = {}
        self.dtype = np.dtype(dtype)

    def tensor(self, name: str, value: np.ndarray, strided: bool = False):
        if strided and value.ndim >= 2:
            perm = tuple(reversed(range(value.ndim)))
            t = self.b.input(name, value.transpose(perm).shape, value.dtype)
            self.inputs[name] = np.ascontiguousarray(value.transpose(perm))
            return self.b.transpose(t, perm=perm)
        self.inputs[name] = value
        return self.b.input(name, value.shape, value.dtype)

    def normal(self, shape, scale=1.0, dtype=None):
        return np.asarray(self.rng.standard_normal(shape) * scale, dtype=dtype or self.dtype)

    def case(self, op: str, out, tolerance: str) -> Case:
        return Case(op, self.b.build(out), self.inputs, tolerance)


UNARY = {"relu": None, "sigmoid": None, "tanh": None, "erf": None, "gelu": None, "leaky_relu": None,
         "exp": None, "log": "positive", "sqrt": "positive", "neg": None, "abs": None, "floor": None,
         "sin": None, "cos": None,
         "isnan": "nans", "clip": None}
EXACT_UNARY = {"relu", "neg", "abs", "floor", "leaky_relu", "isnan", "clip"}


@st.composite
def unary(draw, op: str):
    x = _B(op, draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(0, 4, 1, 5))
    v = x.normal(shape, 3.0)
    if UNARY[op] == "positive":
        v = np.abs(v) + F32(0.01)
    if UNARY[op] == "nans":
        v[x.rng.random(shape) < 0.3] = np.nan
    t = x.tensor("x", v, draw(st.booleans()))
    attrs = {}
    if op == "clip":
        attrs["low"] = draw(st.sampled_from([-np.inf, -1.0, 0.0]))
        attrs["high"] = draw(st.sampled_from([np.inf, 6.0, -2.0]))
    if op == "gelu":
        attrs["approximate"] = draw(st.sampled_from(["none", "tanh"]))
    if op == "leaky_relu":
        attrs["alpha"] = draw(st.sampled_from([0.01, 0.2, 1.5]))
    return x.case(op, getattr(x.b, op)(t, **attrs), "exact" if op in EXACT_UNARY else "ulp")


BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
COMPARE = {"greater", "less", "greater_equal", "less_equal", "equal"}
LOGIC = {"logical_and", "logical_or", "logical_xor"}


@st.composite
def binary(draw, op: str):
    x = _B(op, draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(0, 4, 1, 4))
    other = draw(rs.broadcastable(shape))
    if draw(st.booleans()):
        shape, other = other, shape
    if op in LOGIC:
        a, b = x.rng.random(shape) < 0.5, x.rng.random(other) < 0.5
    elif op in COMPARE:  # small integers, so that ties happen
        a, b = x.rng.integers(-2, 3, shape).astype(F32), x.rng.integers(-2, 3, other).astype(F32)
    elif op == "pow":
        a, b = np.abs(x.normal(shape)) + F32(0.1), x.normal(other)
    elif op == "div":
        b = x.normal(other)
        a, b = x.normal(shape), np.where(np.abs(b) < 0.1, 0.5, b).astype(b.dtype)
    else:
        a, b = x.normal(shape), x.normal(other)
    ta, tb = x.tensor("a", a, draw(st.booleans())), x.tensor("b", b)
    exact = op in COMPARE | LOGIC | {"add", "sub", "mul", "div", "maximum", "minimum"}
    return x.case(op, getattr(x.b, op)(ta, tb), "exact" if exact else "ulp")


@st.composite
def logical_not(draw):
    x = _B("logical_not", draw(rs.seeds))
    t = x.tensor("x", x.rng.random(draw(rs.shapes(0, 3, 1, 5))) < 0.5)
    return x.case("logical_not", x.b.logical_not(t), "exact")


@st.composite
def where(draw):
    x = _B("where", draw(rs.seeds))
    shape = draw(rs.shapes(0, 3, 1, 4))
    c = x.tensor("c", x.rng.random(draw(rs.broadcastable(shape))) < 0.5)
    a = x.tensor("a", x.normal(shape), draw(st.booleans()))
    b = x.tensor("b", x.normal(draw(rs.broadcastable(shape))))
    return x.case("where", x.b.where(c, a, b), "exact")


@st.composite
def cast(draw):
    x = _B("cast", draw(rs.seeds))
    to = draw(st.sampled_from(["int32", "int64", "float64", "bool", "float32"]))
    t = x.tensor("x", x.normal(draw(rs.shapes(0, 3, 1, 5)), 5.0), draw(st.booleans()))
    return x.case("cast", x.b.cast(t, dtype=to), "exact")


@st.composite
def matmul(draw, op: str = "matmul"):
    x = _B(op, draw(rs.seeds), draw(floats))
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    if op == "batchmatmul":
        bt = draw(st.integers(1, 3))
        sa, sb = (bt, m, k), (bt, k, n)
    else:
        batch = draw(rs.shapes(0, 2, 1, 3))
        sa = draw(st.sampled_from([(k,), (m, k)])) if not batch else (m, k)
        sa = tuple(draw(rs.broadcastable(batch))) + sa if len(sa) == 2 else sa
        sb = draw(st.sampled_from([(k,), (k, n)]))
        sb = tuple(batch) + sb if len(sb) == 2 else sb
    if draw(st.integers(0, 3)) == 0:  # integers: no cuBLAS, einsat's own kernel
        va, vb = x.rng.integers(-5, 6, sa).astype(np.int32), x.rng.integers(-5, 6, sb).astype(np.int32)
    else:
        va, vb = x.normal(sa), x.normal(sb)
    a = x.tensor("a", va, draw(st.booleans()))
    b = x.tensor("b", vb, draw(st.booleans()))
    return x.case(op, getattr(x.b, op)(a, b), "sum")


@st.composite
def gemm(draw):
    x = _B("gemm", draw(rs.seeds))
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    ta, tb = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    a = x.tensor("a", x.normal((k, m) if ta else (m, k)), draw(st.booleans()))
    b = x.tensor("b", x.normal((n, k) if tb else (k, n)), draw(st.booleans()))
    c = x.tensor("c", x.normal(draw(rs.broadcastable((m, n))))) if draw(st.booleans()) else None
    attrs = {"trans_a": ta, "trans_b": tb, "alpha": draw(st.sampled_from([1.0, 0.5, -2.0])),
             "beta": draw(st.sampled_from([1.0, 0.0, 3.0]))}
    return x.case("gemm", x.b.gemm(a, b, c, **attrs), "sum")


@st.composite
def banded(draw, op: str):
    x = _B(op, draw(rs.seeds))
    z, m, k = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 40))
    width, dil = draw(st.integers(0, 3)), draw(st.integers(1, 2))
    if op == "g2bmm":
        a, b = x.tensor("a", x.normal((z, m, k))), x.tensor("b", x.normal((z, m, k)), draw(st.booleans()))
        return x.case(op, x.b.g2bmm(a, b, width=width, dilation=dil), "sum")
    p = x.tensor("p", x.normal((z, m, 2 * width + 1)))
    v = x.tensor("v", x.normal((z, m, k)), draw(st.booleans()))
    return x.case(op, x.b.gbmm(p, v, dilation=dil), "sum")


@st.composite
def conv(draw, op: str = "conv"):
    x = _B(op, draw(rs.seeds))
    if op == "conv_transpose":
        c = draw(rs.conv_transpose_cases(1, 3))
    else:
        c = draw(rs.conv_cases(1, 3))
    xin = x.tensor("x", x.normal(c["x"]), draw(st.booleans()))
    w = x.tensor("w", x.normal(c["w"]))
    f = c["w"][0] if op != "conv_transpose" else c["w"][1] * c["attrs"]["groups"]
    bias = x.tensor("bias", x.normal((f,))) if c["bias"] else None
    attrs = dict(c["attrs"])
    if op == "fused_conv":
        probe = GraphBuilder("probe")  # the conv's output shape, without a node in the case
        res_shape = probe.conv(probe.input("x", c["x"]), probe.input("w", c["w"]), **attrs).shape
        res = x.tensor("res", x.normal(res_shape)) if draw(st.booleans()) else None
        attrs["activation"] = draw(st.sampled_from(["none", "relu", "sigmoid", "tanh"]))
        return x.case(op, x.b.fused_conv(xin, w, bias, res, **attrs), "sum")
    return x.case(op, getattr(x.b, op)(xin, w, bias, **attrs), "sum")


@st.composite
def fused_matmul(draw):
    x = _B("fused_matmul", draw(rs.seeds))
    m, k, n, bt = (draw(st.integers(1, 8)) for _ in range(4))
    a, b = x.tensor("a", x.normal((bt, m, k)), draw(st.booleans())), x.tensor("b", x.normal((k, n)))
    bias = x.tensor("bias", x.normal((n,))) if draw(st.booleans()) else None
    res = x.tensor("res", x.normal((bt, m, n))) if draw(st.booleans()) else None
    act = draw(st.sampled_from(["none", "relu", "sigmoid", "tanh"]))
    return x.case("fused_matmul", x.b.fused_matmul(a, b, bias, res, activation=act), "sum")


@st.composite
def attention(draw):
    x = _B("attention", draw(rs.seeds), draw(floats))
    heads, kv_heads = draw(st.sampled_from([(1, 1), (2, 2), (4, 1)]))  # (4, 1): one K/V head for all
    sq, sk, d, dv = (draw(st.integers(1, 9)) for _ in range(4))
    batch = (draw(st.integers(1, 2)), heads)
    kv = (batch[0], kv_heads)
    q = x.tensor("q", x.normal(batch + (sq, d)), draw(st.booleans()))
    k = x.tensor("k", x.normal(kv + (sk, d)), draw(st.booleans()))
    v = x.tensor("v", x.normal(kv + (sk, dv)))
    mask = None
    if draw(st.booleans()):  # a padding mask: 0 or a large negative, the last key always visible
        keep = x.rng.random((batch[0], 1, 1, sk)) < 0.7
        keep[..., -1] = True
        mask = x.tensor("mask", np.where(keep, 0.0, -1e4).astype(x.dtype))
    causal = int(draw(st.integers(0, 3)) == 0)
    scale = draw(st.sampled_from([None, 0.125, 1.0]))
    return x.case("attention", x.b.attention(q, k, v, mask, scale=scale, causal=causal), "norm")


@st.composite
def packed_attention(draw):
    """packed_attention: x [B, S, Hin] projected by w [Hin, 3·H] (+ b) into N heads, a padding mask or
    none, causal or not."""
    x = _B("packed_attention", draw(rs.seeds), draw(floats))
    bsz, s, hin, heads, d = (draw(st.integers(1, 3)) for _ in range(5))
    t = x.tensor("x", x.normal((bsz, s, hin)))
    w = x.tensor("w", x.normal((hin, 3 * heads * d), 0.5))
    b = x.tensor("b", x.normal((3 * heads * d,))) if draw(st.booleans()) else None
    mask = None
    if draw(st.booleans()):  # a padding mask: 0 or a large negative, the last key always visible
        keep = x.rng.random((bsz, 1, 1, s)) < 0.7
        keep[..., -1] = True
        mask = x.tensor("mask", np.where(keep, 0.0, -1e4).astype(x.dtype))
    y = x.b.op(Op.PACKED_ATTENTION, t, w, b, mask, num_heads=heads, causal=int(draw(st.booleans())))
    return x.case("packed_attention", y, "norm")


@st.composite
def pool(draw, op: str):
    x = _B(op, draw(rs.seeds), draw(floats))
    c = draw(rs.pool_cases("max" if op == "maxpool" else "avg"))
    t = x.tensor("x", x.normal(c["x"]), draw(st.booleans()))
    return x.case(op, getattr(x.b, op)(t, **c["attrs"]), "exact" if op == "maxpool" else "sum")


@st.composite
def global_avgpool(draw):
    x = _B("global_avgpool", draw(rs.seeds))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 4))) + draw(rs.shapes(1, 3, 1, 9))
    t = x.tensor("x", x.normal(shape), draw(st.booleans()))
    return x.case("global_avgpool", x.b.global_avgpool(t), "sum")


@st.composite
def batchnorm(draw):
    x = _B("batchnorm", draw(rs.seeds))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 5))) + draw(rs.shapes(0, 2, 1, 5))
    c = shape[1]
    t = x.tensor("x", x.normal(shape), draw(st.booleans()))
    p = [x.tensor(n, x.normal((c,))) for n in ("scale", "bias", "mean")]
    var = x.tensor("var", np.abs(x.normal((c,))) + F32(0.1))
    return x.case("batchnorm", x.b.batchnorm(t, *p, var, epsilon=draw(st.sampled_from([1e-5, 0.1]))), "norm")


@st.composite
def layernorm(draw):
    x = _B("layernorm", draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 300)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    t = x.tensor("x", x.normal(shape, 2.0) + F32(1.0), draw(st.booleans()))
    s = x.tensor("scale", x.normal(draw(rs.broadcastable(norm))))
    b = x.tensor("bias", x.normal(draw(rs.broadcastable(norm)))) if draw(st.booleans()) else None
    return x.case("layernorm", x.b.layernorm(t, s, b, axis=axis), "norm")


@st.composite
def rmsnorm(draw):
    x = _B("rmsnorm", draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 300)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    t = x.tensor("x", x.normal(shape, 2.0) + F32(1.0), draw(st.booleans()))
    s = x.tensor("scale", x.normal(draw(rs.broadcastable(norm))))
    return x.case("rmsnorm", x.b.rmsnorm(t, s, axis=axis), "norm")


@st.composite
def skip_norm(draw, op: str):
    """skip_layernorm / skip_rmsnorm: x + skip (+ bias) normalized over the dims from `axis`, and the sum."""
    x = _B(op, draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 300)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis % len(shape):]
    t = x.tensor("x", x.normal(shape, 2.0) + F32(1.0), draw(st.booleans()))
    skip = x.tensor("skip", x.normal(draw(rs.broadcastable(shape))))
    params = [x.tensor("scale", x.normal(draw(rs.broadcastable(norm))))]
    if op == "skip_layernorm":
        params.append(x.tensor("beta", x.normal(draw(rs.broadcastable(norm)))) if draw(st.booleans()) else None)
    bias = x.tensor("bias", x.normal(draw(rs.broadcastable(norm)))) if draw(st.booleans()) else None
    y, s = x.b.op(Op(op), t, skip, *params, bias, axis=axis)
    return Case(op, x.b.build(y, s), x.inputs, "norm")


@st.composite
def rotary(draw):
    """rotary: x [B, H, S, D] rotated by cos and sin [B or 1, S, R/2], rotate-half or interleaved, R <= D."""
    x = _B("rotary", draw(rs.seeds), draw(floats))
    b, h, s, half = (draw(st.integers(1, 3)) for _ in range(4))
    d = 2 * half + draw(st.sampled_from([0, 0, 1, 2]))
    t = x.tensor("x", x.normal((b, h, s, d)), draw(st.booleans()))
    cb = draw(st.sampled_from([1, b]))
    cos = x.tensor("cos", x.normal((cb, s, half)))
    sin = x.tensor("sin", x.normal((cb, s, half)))
    return x.case("rotary", x.b.rotary(t, cos, sin, interleaved=draw(st.integers(0, 1))), "norm")


@st.composite
def softmax(draw):
    x = _B("softmax", draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (3, draw(st.integers(65, 300)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    t = x.tensor("x", x.normal(shape, 3.0), draw(st.booleans()))
    return x.case("softmax", x.b.softmax(t, axis=axis), "norm")


@st.composite
def reduce(draw, op: str):
    x = _B(op, draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 400)))
    axes = draw(rs.axes(len(shape)))
    keep = draw(st.integers(0, 1))
    t = x.tensor("x", x.normal(shape), draw(st.booleans()))
    tol = "sum" if op in ("reduce_sum", "reduce_mean") else "exact"
    return x.case(op, getattr(x.b, op)(t, axes=axes, keepdims=keep), tol)


@st.composite
def lrn(draw):
    x = _B("lrn", draw(rs.seeds), draw(floats))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 9)), *draw(rs.shapes(1, 2, 1, 4)))
    t = x.tensor("x", x.normal(shape, 3.0), draw(st.booleans()))
    attrs = {"size": draw(st.integers(1, 6)), "alpha": draw(st.sampled_from([1e-4, 0.1])),
             "beta": draw(st.sampled_from([0.75, 1.0])), "bias": draw(st.sampled_from([1.0, 2.0]))}
    return x.case("lrn", x.b.lrn(t, **attrs), "ulp")


@st.composite
def cumsum(draw):
    x = _B("cumsum", draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 300)))
    t = x.tensor("x", x.normal(shape), draw(st.booleans()))
    attrs = {"axis": draw(st.integers(-len(shape), len(shape) - 1)), "exclusive": draw(st.integers(0, 1)),
             "reverse": draw(st.integers(0, 1))}
    return x.case("cumsum", x.b.cumsum(t, **attrs), "exact")  # the kernel adds in NumPy's order


@st.composite
def einsum(draw):
    x = _B("einsum", draw(rs.seeds), draw(floats))
    eq, shapes = draw(rs.einsum_cases())
    ts = [x.tensor(f"x{k}", x.normal(s), draw(st.booleans())) for k, s in enumerate(shapes)]
    return x.case("einsum", x.b.einsum(*ts, equation=eq), "sum")


@st.composite
def gathers(draw, op: str):
    """gather_elements / gather_nd with indices in range, negative ones included."""
    x = _B(op, draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 4, 1, 5))
    data = x.tensor("x", x.normal(shape), draw(st.booleans()))
    if op == "gather_elements":
        axis = draw(st.integers(0, len(shape) - 1))
        ishape = tuple(draw(st.integers(1, d + 2 if k == axis else d)) for k, d in enumerate(shape))
        idx = x.rng.integers(-shape[axis], shape[axis], ishape)
        return x.case(op, x.b.gather_elements(data, x.tensor("i", idx, draw(st.booleans())), axis=axis), "exact")
    b = draw(st.integers(0, len(shape) - 1))
    m = draw(st.integers(1, len(shape) - b))
    mid = draw(rs.shapes(0, 2, 1, 3))
    idx = np.stack([x.rng.integers(-shape[b + j], shape[b + j], shape[:b] + mid) for j in range(m)], axis=-1)
    itype = draw(st.sampled_from([np.int64, np.int32]))
    return x.case(op, x.b.gather_nd(data, x.tensor("i", idx.astype(itype)), batch_dims=b), "exact")


@st.composite
def argmax(draw):
    x = _B("argmax", draw(rs.seeds))
    shape = draw(rs.shapes(1, 4, 1, 6))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    t = x.tensor("x", x.rng.integers(-3, 4, shape).astype(F32), draw(st.booleans()))  # ties: first wins
    return x.case("argmax", x.b.argmax(t, axis=axis, keepdims=draw(st.integers(0, 1))), "exact")


@st.composite
def layout(draw, op: str):
    x = _B(op, draw(rs.seeds))
    strided = draw(st.booleans())
    if op == "transpose":
        shape = draw(rs.shapes(1, 5, 1, 4))
        perm = tuple(draw(st.permutations(range(len(shape)))))
        out = x.b.transpose(x.tensor("x", x.normal(shape), strided), perm=perm)
    elif op in ("reshape", "flatten"):
        shape = draw(rs.shapes(1, 4, 1, 4))
        t = x.tensor("x", x.normal(shape), strided)
        if op == "flatten":
            out = x.b.flatten(t, axis=draw(st.integers(0, len(shape))))
        else:
            n = prod(shape)
            d = draw(st.sampled_from([q for q in range(1, n + 1) if n % q == 0]))
            target = draw(st.sampled_from([(n,), (d, n // d), (n // d, 1, d), (-1, d)]))
            out = x.b.reshape(t, shape=target)
    elif op == "squeeze":
        shape = tuple(draw(st.sampled_from([1, 1, 3])) for _ in range(draw(st.integers(1, 4))))
        ones = [k for k, d in enumerate(shape) if d == 1]
        axes = tuple(draw(st.lists(st.sampled_from(ones), unique=True))) if ones else ()
        out = x.b.squeeze(x.tensor("x", x.normal(shape), strided), axes=axes or None)
    elif op == "unsqueeze":
        shape = draw(rs.shapes(0, 3, 1, 4))
        axes = tuple(draw(st.lists(st.integers(0, len(shape)), min_size=1, max_size=2, unique=True)))
        out = x.b.unsqueeze(x.tensor("x", x.normal(shape), strided), axes=axes)
    elif op == "expand":
        shape = draw(rs.shapes(1, 3, 1, 4))
        small = draw(rs.broadcastable(shape))
        out = x.b.expand(x.tensor("x", x.normal(small), strided), shape=shape)
    elif op == "concat":
        shape = draw(rs.shapes(1, 3, 1, 4))
        axis = draw(st.integers(0, len(shape) - 1))
        parts = []
        for k in range(draw(st.integers(1, 4))):
            s = shape[:axis] + (draw(st.integers(0, 3)),) + shape[axis + 1:]
            parts.append(x.tensor(f"x{k}", x.normal(s), strided and k == 0))
        out = x.b.concat(*parts, axis=axis)
    elif op == "split":
        shape = draw(rs.shapes(1, 3, 1, 6))
        axis = draw(st.integers(0, len(shape) - 1))
        cut = sorted(draw(st.lists(st.integers(0, shape[axis]), max_size=2)))
        sizes = tuple(np.diff([0, *cut, shape[axis]]).tolist())
        outs = x.b.split(x.tensor("x", x.normal(shape), strided), axis=axis, sizes=sizes)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return Case(op, x.b.build(*outs), x.inputs, "exact")
    elif op == "slice":
        c = draw(rs.slice_cases())
        out = x.b.slice(x.tensor("x", x.normal(c["x"]), strided), **c["attrs"])
    elif op == "pad":
        shape = draw(rs.shapes(1, 3, 1, 4))
        mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
        top = [d - 1 if mode == "reflect" else 3 for d in shape] * 2
        pads = tuple(draw(st.integers(0, t)) for t in top)
        value = draw(st.sampled_from([0.0, 1.5])) if mode == "constant" else 0.0
        out = x.b.pad(x.tensor("x", x.normal(shape), strided), pads=pads, mode=mode, value=value)
    elif op == "gather":
        shape = draw(rs.shapes(1, 3, 1, 5))
        axis = draw(st.integers(0, len(shape) - 1))
        ishape = draw(rs.shapes(0, 2, 1, 4))
        idx = x.rng.integers(-shape[axis], shape[axis], ishape).astype(draw(st.sampled_from([np.int64, np.int32])))
        out = x.b.gather(x.tensor("x", x.normal(shape), strided), x.tensor("i", idx), axis=axis)
    elif op == "identity":
        out = x.b.identity(x.tensor("x", x.normal(draw(rs.shapes(0, 3, 1, 4))), strided))
    elif op == "constant":
        out = x.b.constant(value=x.normal(draw(rs.shapes(0, 3, 1, 4))))
    else:  # correct, fused_correct
        shape = draw(rs.shapes(1, 3, 1, 5))
        starts = tuple(draw(st.integers(0, d)) for d in shape)
        ends = tuple(draw(st.integers(s, d)) for s, d in zip(starts, shape))
        fix = x.tensor("fix", x.normal(tuple(e - s for s, e in zip(starts, ends))))
        m = x.tensor("m", x.normal(shape), strided)
        if op == "correct":
            out = x.b.correct(m, fix, region=starts + ends)
        else:  # a view that splits the first dim's factor 1 off, a transpose, the flat shape
            view = draw(st.sampled_from([(), (1,) + shape]))
            perm = tuple(draw(st.permutations(range(len(view or shape)))))
            final = draw(st.sampled_from([(), (int(np.prod(shape)),)]))
            out = x.b.fused_correct(m, fix, region=starts + ends, view=view, perm=perm, shape=final)
    return x.case(op, out, "exact")


@st.composite
def views(draw, op: str):
    """access / assign through a chain of slice, select, transpose, reshape (and expand) steps."""
    x = _B(op, draw(rs.seeds))
    shape = draw(rs.shapes(1, 3, 1, 5))
    spec, cur = [], list(shape)
    for _ in range(draw(st.integers(1, 3))):
        kinds = ["slice", "select", "transpose", "reshape"] + (["expand"] if op == "access" else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "slice" and cur:
            ax = draw(st.integers(0, len(cur) - 1))
            step = draw(st.sampled_from([1, 2, -1]))
            count = draw(st.integers(0, max(1, cur[ax] // abs(step))))
            count = min(count, len(range(0, cur[ax], abs(step))))
            start = draw(st.integers(0, cur[ax] - 1)) if count else 0
            start = min(start, cur[ax] - 1 - step * (count - 1)) if step > 0 and count else start
            start = max(start, -step * (count - 1)) if step < 0 and count else start
            spec.append(("slice", ax, start, step, count))
            cur[ax] = count
        elif kind == "select" and cur and all(cur):
            ax = draw(st.integers(0, len(cur) - 1))
            spec.append(("select", ax, draw(st.integers(0, cur[ax] - 1))))
            cur.pop(ax)
        elif kind == "transpose" and cur:
            perm = tuple(draw(st.permutations(range(len(cur)))))
            spec.append(("transpose", perm))
            cur = [cur[p] for p in perm]
        elif kind == "reshape":
            spec.append(("reshape", (prod(cur),)))
            cur = [prod(cur)]
        elif kind == "expand":
            spec.append(("expand", (2, *cur)))
            cur = [2, *cur]
    base = x.tensor("x", x.normal(shape), draw(st.booleans()))
    if op == "access":
        return x.case(op, x.b.access(base, spec=tuple(spec)), "exact")
    w = x.tensor("w", x.normal(draw(rs.broadcastable(tuple(cur)))))
    return x.case(op, x.b.assign(base, w, spec=tuple(spec)), "exact")


@st.composite
def control(draw, op: str):
    x = _B(op, draw(rs.seeds))
    shape = draw(rs.shapes(1, 2, 1, 4))
    v = x.tensor("v", x.normal(shape))
    if op == "loop":
        bb = GraphBuilder("body")
        i, c, cap = bb.input("i", (), np.int64), bb.input("c", shape), bb.input("cap", shape)
        body = bb.build(bb.add(bb.mul(c, cap), bb.cast(i, dtype="float32")))
        trip = x.tensor("trip", np.asarray(draw(st.integers(0, 3)), np.int64))
        return x.case(op, x.b.loop(trip, v, v, body=body, n_carried=1), "sum")
    then_b, else_b = GraphBuilder("then"), GraphBuilder("else")
    tv, ev = then_b.input("v", shape), else_b.input("v", shape)
    cond = x.tensor("cond", np.asarray(draw(st.booleans())))
    return x.case(op, x.b.if_(cond, v, then_branch=then_b.build(then_b.relu(tv)),
                              else_branch=else_b.build(else_b.neg(ev))), "exact")


EOP_SOURCES = ("conv", "conv_transpose", "fused_conv", "g2bmm", "gbmm", "matmul", "avgpool", "reshape", "concat",
               "correct", "gelu")


@st.composite
def eop(draw):
    """An eOperator: the last node of another op's case, replaced by the eop of its expression
    (windows, guards of dilated transposed convs, scopes of biases and epilogues, div/mod of
    reshapes, functions)."""
    from einsat.ir.expr import fingerprint
    from einsat.ir.expr.nodes import relabel_inputs
    from einsat.ir.graph import Graph, Node
    from einsat.ir.registry import Op

    source = draw(strategy(draw(st.sampled_from(EOP_SOURCES))))
    g = source.graph
    node = g.nodes[-1]
    e = node.definition.expression([g.types[i] if i else None for i in node.inputs], node.attrs)
    assume(e is not None)  # attributes outside the op's expression (a ceil-mode or pad-excluding avgpool)
    present = [k for k, i in enumerate(node.inputs) if i]
    e = relabel_inputs(e, {k: j for j, k in enumerate(present)})
    eop_node = Node(Op.EOP, [node.inputs[k] for k in present], node.outputs, {"expr": fingerprint(e)})
    graph = Graph(list(g.nodes[:-1]) + [eop_node], g.input_types(), g.outputs, g.weights, "eop")
    return Case("eop", graph, source.inputs, "sum" if source.tolerance == "exact" else source.tolerance)


@st.composite
def eop_multi(draw):
    """A fused eOperator with two outputs, as the fusion generator makes them: a row's norm,
    softmax or an activation of x + y (layernorm: scale and bias too), and the sum x + y."""
    from einsat.ir.expr.compose import compose
    from einsat.ir.expr.nodes import relabel_inputs
    from einsat.ir.ops.eop import join_expressions
    from einsat.ir.registry import Op, opdef
    from einsat.ir.types import TensorType

    x = _B("eop_multi", draw(rs.seeds), draw(floats))
    shape = draw(rs.shapes(1, 3, 1, 6)) if draw(st.booleans()) else (2, draw(st.integers(65, 200)))
    t = TensorType(shape, x.dtype)
    add = opdef(Op.ADD).expression([t, t], {})
    kind = draw(st.sampled_from(["layernorm", "softmax", "relu"]))
    a, b = x.tensor("x", x.normal(shape)), x.tensor("y", x.normal(shape))
    if kind == "layernorm":
        g = TensorType(shape[-1:], x.dtype)
        outer = opdef(Op.LAYERNORM).expression([t, g, g], {"axis": len(shape) - 1, "epsilon": 1e-5})
        ins = [a, x.tensor("scale", x.normal(shape[-1:])), x.tensor("bias", x.normal(shape[-1:])), b]
        main = compose(outer, 0, add, [0, 3])
        extra = relabel_inputs(add, {0: 0, 1: 3})
    else:
        attrs = {"axis": len(shape) - 1} if kind == "softmax" else {}
        main = compose(opdef(Op(kind)).expression([t], attrs), 0, add, [0, 1])
        ins, extra = [a, b], add
    first, _ = x.b.eop_multi(*ins, exprs=join_expressions([main, extra]))
    return Case("eop_multi", x.b.build(first, _), x.inputs, "norm")


def strategy(op: str):
    """The case strategy of one op (by `Op.value`)."""
    if op in UNARY:
        return unary(op)
    if op in BINARY | COMPARE | LOGIC:
        return binary(op)
    simple = {"eop": eop, "eop_multi": eop_multi, "logical_not": logical_not, "where": where, "cast": cast,
              "gemm": gemm,
              "fused_matmul": fused_matmul, "global_avgpool": global_avgpool, "batchnorm": batchnorm,
              "layernorm": layernorm, "rmsnorm": rmsnorm, "softmax": softmax, "argmax": argmax, "cumsum": cumsum,
              "einsum": einsum, "lrn": lrn, "attention": attention, "rotary": rotary,
              "packed_attention": packed_attention}
    if op in simple:
        return simple[op]()
    if op in ("skip_layernorm", "skip_rmsnorm"):
        return skip_norm(op)
    if op in ("matmul", "batchmatmul"):
        return matmul(op)
    if op in ("g2bmm", "gbmm"):
        return banded(op)
    if op in ("conv", "conv_transpose", "fused_conv"):
        return conv(op)
    if op in ("maxpool", "avgpool"):
        return pool(op)
    if op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min"):
        return reduce(op)
    if op in ("access", "assign"):
        return views(op)
    if op in ("gather_elements", "gather_nd"):
        return gathers(op)
    if op in ("loop", "if_"):
        return control(op)
    return layout(op)


LAYOUT_OPS = ("transpose", "reshape", "flatten", "squeeze", "unsqueeze", "expand", "concat", "split", "slice",
              "pad", "gather", "identity", "constant", "correct", "fused_correct")
