"""Matrix products: associativity, linearity, scalars, transposes, batched and GEMM forms."""

from hypothesis import strategies as st

from tests.rewrites.harness import Case, dims, fill, leaves, parametrize

T2 = (1, 0)


def swap_last(r):
    return tuple(range(r - 2)) + (r - 1, r - 2)


BATCH = st.lists(dims(), min_size=0, max_size=1).map(tuple)  # optional batch dims of A

ABC = st.tuples(BATCH, dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2])}, {"b": (s[2], s[3]), "c": (s[3], s[4])}))
SUM_LEFT = st.tuples(BATCH, dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2]), "b": s[0] + (s[1], s[2])}, {"c": (s[2], s[3])}))
SUM_RIGHT = st.tuples(BATCH, dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2]), "b": (s[2], s[3]), "c": (s[2], s[3])}))
SCALAR = st.tuples(BATCH, dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2]), "b": (s[2], s[3]), "s": ()}))
SAME_RANK = st.integers(2, 4).flatmap(lambda r: st.tuples(st.lists(dims(), min_size=r - 2, max_size=r - 2).map(tuple),
                                                          dims(), dims(), dims())).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2]), "b": s[0] + (s[2], s[3])}))
BATCHED = st.tuples(dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": (s[0], s[1], s[2]), "b": (s[0], s[2], s[3])}))
FOLD = st.tuples(dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": (s[0], s[1], s[2])}, {"w": (s[2], s[3])}))
GEMM = st.tuples(dims(), dims(), dims(), st.integers(0, 1), st.integers(0, 1), st.sampled_from([None, "row", "full"]),
                 st.sampled_from([1.0, 0.5]), st.sampled_from([1.0, -2.0])).flatmap(
    lambda s: leaves({"a": (s[1], s[0]) if s[3] else (s[0], s[1])},
                     {"b": (s[2], s[1]) if s[4] else (s[1], s[2]),
                      **({"c": (s[2],) if s[5] == "row" else (s[0], s[2])} if s[5] else {})},
                     ta=s[3], tb=s[4], alpha=s[6], beta=s[7]))


def gemm_lhs(b, t, p):
    return b.gemm(t["a"], t["b"], t.get("c"), alpha=p["alpha"], beta=p["beta"], trans_a=p["ta"], trans_b=p["tb"])


def gemm_rhs(b, t, p):
    a = b.transpose(t["a"], perm=T2) if p["ta"] else t["a"]
    w = b.transpose(t["b"], perm=T2) if p["tb"] else t["b"]
    out = b.matmul(a, w)
    if p["alpha"] != 1.0:
        out = b.mul(fill(b, p["alpha"]), out)
    if "c" in t:
        c = t["c"] if p["beta"] == 1.0 else b.mul(fill(b, p["beta"]), t["c"])
        out = b.add(out, c)
    return out


BLOCKS = st.integers(2, 4).flatmap(lambda n: st.tuples(st.lists(dims(), max_size=1).map(tuple), dims(), dims(),
                                                       st.lists(dims(), min_size=n, max_size=n), st.integers(0, n - 1)))
BLOCK = BLOCKS.flatmap(lambda s: leaves({"a": s[0] + (s[1], s[2])},
                                        {"s": (), **{f"w{k}": (s[2], c) for k, c in enumerate(s[3])}},
                                        i=s[4], widths=tuple(s[3])))


def blocks(b, t, p, scaled):
    ws = [b.mul(t["s"], t[f"w{k}"]) if scaled and k == p["i"] else t[f"w{k}"] for k in range(len(p["widths"]))]
    outs = b.split(b.matmul(t["a"], b.concat(*ws, axis=1)), axis=len(p.inputs["a"]) - 1, sizes=p["widths"])
    return tuple(b.mul(t["s"], o) if not scaled and k == p["i"] else b.relu(o) if k != p["i"] else o
                 for k, o in enumerate(outs))


def transposed(b, x):
    return b.transpose(x, perm=swap_last(len(x.shape)))


CASES = [
    Case("matmul-assoc", ABC, lambda b, t, p: b.matmul(b.matmul(t["a"], t["b"]), t["c"]),
         lambda b, t, p: b.matmul(t["a"], b.matmul(t["b"], t["c"]))),
    Case("matmul-add-left", SUM_LEFT, lambda b, t, p: b.matmul(b.add(t["a"], t["b"]), t["c"]),
         lambda b, t, p: b.add(b.matmul(t["a"], t["c"]), b.matmul(t["b"], t["c"]))),
    Case("matmul-add-right", SUM_RIGHT, lambda b, t, p: b.matmul(t["a"], b.add(t["b"], t["c"])),
         lambda b, t, p: b.add(b.matmul(t["a"], t["b"]), b.matmul(t["a"], t["c"]))),
    Case("matmul-scalar-left", SCALAR, lambda b, t, p: b.matmul(b.mul(t["s"], t["a"]), t["b"]),
         lambda b, t, p: b.mul(t["s"], b.matmul(t["a"], t["b"]))),
    Case("matmul-scalar-right", SCALAR, lambda b, t, p: b.matmul(t["a"], b.mul(t["s"], t["b"])),
         lambda b, t, p: b.mul(t["s"], b.matmul(t["a"], t["b"]))),
    Case("matmul-transpose", SAME_RANK, lambda b, t, p: transposed(b, b.matmul(t["a"], t["b"])),
         lambda b, t, p: b.matmul(transposed(b, t["b"]), transposed(b, t["a"]))),
    Case("batchmatmul-matmul", BATCHED, lambda b, t, p: b.batchmatmul(t["a"], t["b"]),
         lambda b, t, p: b.matmul(t["a"], t["b"])),
    Case("matmul-fold-batch", FOLD, lambda b, t, p: b.matmul(t["a"], t["w"]),
         lambda b, t, p: b.reshape(b.matmul(b.reshape(t["a"], shape=(p.inputs["a"][0] * p.inputs["a"][1],
                                                                         p.inputs["a"][2])), t["w"]),
                                   shape=p.inputs["a"][:2] + (p.weights["w"][1],))),
    Case("merged-block-scalar", BLOCK, lambda b, t, p: blocks(b, t, p, False), lambda b, t, p: blocks(b, t, p, True)),
    Case("gemm-expand", GEMM, gemm_lhs, gemm_rhs),
]

test_sound, test_goal = parametrize(CASES)
