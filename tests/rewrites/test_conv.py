"""Convolution: linearity, bias, batch-norm folding, pooling as convolution."""

import numpy as np
from hypothesis import strategies as st

from tests.rewrites.harness import Case, dims, fill, leaves, parametrize


@st.composite
def conv_shapes(draw, nsp=None):
    """x [N, C, *sp], w [F, C, *k] with 'same'-ish padding and stride 1 or 2."""
    nsp = nsp or draw(st.integers(1, 3))
    n, c, f = draw(dims(1, 2)), draw(dims(1, 3)), draw(dims(1, 3))
    k = draw(st.sampled_from([1, 3]))
    sp = tuple(draw(dims(k, 5)) for _ in range(nsp))
    return {"x": (n, c) + sp, "w": (f, c) + (k,) * nsp, "stride": draw(st.integers(1, 2)), "pad": k // 2}


def conv(b, x, w, p, bias=None):
    return b.conv(x, w, bias, stride=p["stride"], padding=p["pad"])


def with_leaves(build):
    return conv_shapes().flatmap(build)


ADD_INPUT = with_leaves(lambda s: leaves({"a": s["x"], "b": s["x"]}, {"w": s["w"]}, stride=s["stride"], pad=s["pad"]))
ADD_WEIGHT = with_leaves(lambda s: leaves({"x": s["x"]}, {"w1": s["w"], "w2": s["w"]},
                                          stride=s["stride"], pad=s["pad"]))
SCALAR = with_leaves(lambda s: leaves({"x": s["x"], "s": ()}, {"w": s["w"]}, stride=s["stride"], pad=s["pad"]))
BIAS = with_leaves(lambda s: leaves({"x": s["x"]}, {"w": s["w"], "b": s["w"][:1]}, stride=s["stride"], pad=s["pad"]))
BN = with_leaves(lambda s: st.booleans().flatmap(lambda bias: leaves(
    {"x": s["x"]}, {"w": s["w"], **({"b": s["w"][:1]} if bias else {}), "s": s["w"][:1], "beta": s["w"][:1],
                    "m": s["w"][:1], "var": s["w"][:1]}, stride=s["stride"], pad=s["pad"], eps=1e-3)))
CAT = st.tuples(dims(1, 2), dims(), dims(), dims(), dims(3, 5)).flatmap(lambda s: leaves(
    {"a": (s[0], s[1], s[4], s[4]), "b": (s[0], s[2], s[4], s[4])}, {"w": (s[3], s[1] + s[2], 3, 3)}, stride=1, pad=1))
POOL = st.tuples(dims(1, 2), dims(), dims(3, 6), st.sampled_from([(1, 1), (2, 2), (3, 3), (2, 3)]),
                 st.integers(1, 2), st.booleans(), st.integers(0, 1)).flatmap(lambda s: leaves(
                     {"x": (s[0], s[1], s[2], s[2])}, kernel=s[3], stride=(s[4], s[4]),
                     pad=(1, 1, 1, 1) if s[5] and s[3][0] > 1 and s[3][1] > 1 else (0, 0, 0, 0),
                     cip=1 if s[5] and s[3][0] > 1 and s[3][1] > 1 else s[6]))  # padded: counted


def bn_lhs(b, t, p):
    return b.batchnorm(conv(b, t["x"], t["w"], p, t.get("b")), t["s"], t["beta"], t["m"], t["var"], epsilon=p["eps"])


def bn_rhs(b, t, p):
    f, nsp = p.weights["w"][0], len(p.weights["w"]) - 2
    eps = float(np.float32(p["eps"]))  # the registry stores float attributes as ONNX does
    a = b.div(t["s"], b.sqrt(b.add(t["var"], fill(b, eps))))
    w = b.mul(t["w"], b.reshape(a, shape=(f,) + (1,) * (nsp + 1)))
    bias = b.add(b.mul(b.sub(t["b"], t["m"]), a), t["beta"]) if "b" in t else b.sub(t["beta"], b.mul(t["m"], a))
    return conv(b, t["x"], w, p, bias)


def pool_rhs(b, t, p):
    (kh, kw), c = p["kernel"], p.inputs["x"][1]
    w = fill(b, 1.0 / (kh * kw), (c, 1, kh, kw))
    return b.conv(t["x"], w, stride=p["stride"], padding=p["pad"], groups=c)


CASES = [
    Case("conv-add-input", ADD_INPUT, lambda b, t, p: conv(b, b.add(t["a"], t["b"]), t["w"], p),
         lambda b, t, p: b.add(conv(b, t["a"], t["w"], p), conv(b, t["b"], t["w"], p))),
    Case("conv-add-weight", ADD_WEIGHT, lambda b, t, p: b.add(conv(b, t["x"], t["w1"], p), conv(b, t["x"], t["w2"], p)),
         lambda b, t, p: conv(b, t["x"], b.add(t["w1"], t["w2"]), p)),
    Case("conv-scalar", SCALAR, lambda b, t, p: conv(b, b.mul(t["s"], t["x"]), t["w"], p),
         lambda b, t, p: b.mul(t["s"], conv(b, t["x"], t["w"], p))),
    Case("conv-bias", BIAS, lambda b, t, p: conv(b, t["x"], t["w"], p, t["b"]),
         lambda b, t, p: b.add(conv(b, t["x"], t["w"], p),
                               b.reshape(t["b"], shape=(1, p.weights["b"][0]) + (1,) * (len(p.inputs["x"]) - 2)))),
    Case("conv-bias", BIAS, lambda b, t, p: b.add(conv(b, t["x"], t["w"], p), b.reshape(
        t["b"], shape=(1, p.weights["b"][0]) + (1,) * (len(p.inputs["x"]) - 2))),
         lambda b, t, p: conv(b, t["x"], t["w"], p, t["b"]), variant="unfold"),
    Case("conv-batchnorm", BN, bn_lhs, bn_rhs),
    Case("avgpool-as-conv", POOL,
         lambda b, t, p: b.avgpool(t["x"], kernel=p["kernel"], stride=p["stride"], padding=p["pad"],
                                   count_include_pad=p["cip"]),
         pool_rhs),
    Case("global-avgpool-reduce", st.tuples(dims(), dims(), dims(), dims()).flatmap(lambda s: leaves({"x": s})),
         lambda b, t, p: b.global_avgpool(t["x"]), lambda b, t, p: b.reduce_mean(t["x"], axes=(2, 3), keepdims=1)),
    Case("conv-concat-input", CAT, lambda b, t, p: conv(b, b.concat(t["a"], t["b"], axis=1), t["w"], p),
         lambda b, t, p: b.add(*(conv(b, x, w, p) for x, w in zip(
             (t["a"], t["b"]), b.split(t["w"], axis=1, sizes=(p.inputs["a"][1], p.inputs["b"][1])))))),
]

test_sound, test_goal = parametrize(CASES)
