"""Merging parallel ops that share an input: the multi-pattern rules and the n-ary generator."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat import GraphBuilder, Op
from einsat.egraph import Limits, Schedule, Session
from einsat.rewrites.algebra.merge import merge_generator
from tests.egraph.checks import assert_consistent
from tests.rewrites.harness import Case, dims, leaves, parametrize

MM = st.tuples(st.lists(dims(), max_size=1).map(tuple), dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2])}, {"w1": (s[2], s[3]), "w2": (s[2], s[4])}))
CONV = st.tuples(dims(1, 2), dims(), dims(), dims(), dims(3, 5), st.sampled_from([1, 3]), st.integers(1, 2),
                 st.booleans()).flatmap(lambda s: leaves(
                     {"x": (s[0], s[1], s[4], s[4])},
                     {"w1": (s[2], s[1], s[5], s[5]), "w2": (s[3], s[1], s[5], s[5]),
                      **({"b1": (s[2],), "b2": (s[3],)} if s[7] else {})}, pad=s[5] // 2, stride=s[6]))
KERNEL_PAIRS = [((1, 1), (3, 3)), ((1, 3), (3, 3)), ((1, 1), (5, 5)), ((3, 3), (5, 5))]
ENLARGE = st.tuples(dims(1, 2), dims(), dims(), dims(), dims(3, 5), st.sampled_from(KERNEL_PAIRS),
                    st.integers(1, 2)).flatmap(lambda s: leaves(
                        {"x": (s[0], s[1], s[4], s[4])},
                        {"w1": (s[2], s[1]) + s[5][0], "w2": (s[3], s[1]) + s[5][1]},
                        k1=s[5][0], k2=s[5][1], stride=s[6]))


def relus(b, *xs):
    return tuple(b.relu(x) for x in xs)


def merged_matmul(b, t, p):
    r = len(p.inputs["a"])
    m = b.matmul(t["a"], b.concat(t["w1"], t["w2"], axis=1))
    return relus(b, *b.split(m, axis=r - 1, sizes=(p.weights["w1"][1], p.weights["w2"][1])))


def conv2(b, t, p, w, bias, pad=None):
    return b.conv(t["x"], w, bias, stride=p["stride"], padding=p["pad"] if pad is None else pad)


def merged_conv(b, t, p):
    bias = b.concat(t["b1"], t["b2"], axis=0) if "b1" in t else None
    m = conv2(b, t, p, b.concat(t["w1"], t["w2"], axis=0), bias)
    return relus(b, *b.split(m, axis=1, sizes=(p.weights["w1"][0], p.weights["w2"][0])))


def same(k):
    return (k[0] // 2, k[1] // 2, k[0] // 2, k[1] // 2)


def enlarged(b, t, p):
    dh, dw = (p["k2"][0] - p["k1"][0]) // 2, (p["k2"][1] - p["k1"][1]) // 2
    w1 = b.pad(t["w1"], pads=(0, 0, dh, dw, 0, 0, dh, dw))
    return relus(b, conv2(b, t, p, w1, None, same(p["k2"])), conv2(b, t, p, t["w2"], None, same(p["k2"])))


CASES = [
    Case("merge-matmul", MM, lambda b, t, p: relus(b, b.matmul(t["a"], t["w1"]), b.matmul(t["a"], t["w2"])),
         merged_matmul),
    Case("merge-conv", CONV, lambda b, t, p: relus(b, conv2(b, t, p, t["w1"], t.get("b1")),
                                                   conv2(b, t, p, t["w2"], t.get("b2"))), merged_conv),
    Case("conv-enlarge", ENLARGE, lambda b, t, p: relus(b, conv2(b, t, p, t["w1"], None, same(p["k1"])),
                                                        conv2(b, t, p, t["w2"], None, same(p["k2"]))), enlarged),
]

test_sound, test_goal = parametrize(CASES)


def siblings(n: int, kind: str, seed: int = 0):
    """n matmuls (or convolutions) of one input over different weights, and their merged form."""
    rng = np.random.default_rng(seed)
    widths = [int(rng.integers(1, 5)) for _ in range(n)]
    arrays = [rng.standard_normal((4, c) if kind == "matmul" else (c, 2, 3, 3)).astype(np.float32) for c in widths]
    for merged in (False, True):
        b = GraphBuilder("siblings")
        x = b.input("x", (3, 4) if kind == "matmul" else (1, 2, 5, 5))
        ws = [b.weight(f"w{k}", a) for k, a in enumerate(arrays)]
        if kind == "matmul":
            outs = b.split(b.matmul(x, b.concat(*ws, axis=1)), axis=1, sizes=widths) if merged else \
                [b.matmul(x, w) for w in ws]
        else:
            outs = b.split(b.conv(x, b.concat(*ws, axis=0), padding=1), axis=1, sizes=widths) if merged else \
                [b.conv(x, w, padding=1) for w in ws]
        yield b.build(*(b.relu(o) for o in outs))


@settings(max_examples=6)
@given(st.integers(3, 6), st.sampled_from(["matmul", "conv"]), st.integers(0, 99))
def test_merge_siblings_generator_merges_all_at_once(n, kind, seed):
    separate, merged = siblings(n, kind, seed)
    s = Session(Limits(iterations=1))
    lhs = s.add_graph(separate)
    report = s.run(Schedule((merge_generator(),)))
    assert report.rules["merge-siblings"].matches == n
    rhs = s.add_graph(merged, root=False)
    assert all(s.equivalent(a, b) for a, b in zip(lhs, rhs))
    data = s.export()
    assert sum(1 for c in data.classes.values() for e in c.nodes if e.op in (Op.MATMUL, Op.CONV)) == n + 1
    assert_consistent(data, rtol=1e-5, atol=1e-5)
