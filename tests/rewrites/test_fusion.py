"""Epilogue fusion: convolutions and matmuls absorb bias, residual and activation."""

from hypothesis import strategies as st

from einsat.rewrites.post.fusion import ACTIVATIONS
from tests.rewrites.harness import Case, dims, leaves, parametrize

CONV = st.tuples(dims(1, 2), dims(), dims(), dims(3, 5), st.sampled_from([1, 3]), st.booleans(), st.booleans()).flatmap(
    lambda s: leaves({"x": (s[0], s[1], s[3], s[3]), "z": (s[0], s[2], s[3], s[3])},
                     {"w": (s[2], s[1], s[4], s[4]), **({"b": (s[2],)} if s[5] else {})}, pad=s[4] // 2))
MM = st.tuples(st.lists(dims(), max_size=1).map(tuple), dims(), dims(), dims(), st.booleans()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2]), "z": s[0] + (s[1], s[3])},
                     {"b": (s[2], s[3]), "c": (s[3],) if s[4] else (s[1], s[3])}))


def conv(b, t, p):
    return b.conv(t["x"], t["w"], t.get("b"), padding=p["pad"])


def fconv(b, t, p, act="none", residual=False):
    return b.fused_conv(t["x"], t["w"], t.get("b"), t["z"] if residual else None, padding=p["pad"], activation=act)


def fmm(b, t, p, act="none", bias=False, residual=False):
    return b.fused_matmul(t["a"], t["b"], t["c"] if bias else None, t["z"] if residual else None, activation=act)


CASES = []
for op, act in ACTIVATIONS.items():
    CASES += [
        Case(f"conv-{act}-fuse", CONV, lambda b, t, p, a=act: getattr(b, a)(conv(b, t, p)),
             lambda b, t, p, a=act: fconv(b, t, p, a)),
        Case(f"fused-conv-{act}", CONV, lambda b, t, p, a=act: getattr(b, a)(fconv(b, t, p, residual=True)),
             lambda b, t, p, a=act: fconv(b, t, p, a, residual=True)),
        Case(f"matmul-{act}-fuse", MM, lambda b, t, p, a=act: getattr(b, a)(b.matmul(t["a"], t["b"])),
             lambda b, t, p, a=act: fmm(b, t, p, a)),
        Case(f"fused-matmul-{act}", MM, lambda b, t, p, a=act: getattr(b, a)(fmm(b, t, p, bias=True, residual=True)),
             lambda b, t, p, a=act: fmm(b, t, p, a, bias=True, residual=True)),
    ]
CASES += [
    Case("conv-residual-fuse", CONV, lambda b, t, p: b.add(conv(b, t, p), t["z"]),
         lambda b, t, p: fconv(b, t, p, residual=True)),
    Case("fused-conv-residual", CONV, lambda b, t, p: b.add(fconv(b, t, p), t["z"]),
         lambda b, t, p: fconv(b, t, p, residual=True)),
    Case("matmul-bias-fuse", MM, lambda b, t, p: b.add(b.matmul(t["a"], t["b"]), t["c"]),
         lambda b, t, p: fmm(b, t, p, bias=True)),
    Case("fused-matmul-residual", MM, lambda b, t, p: b.add(fmm(b, t, p, bias=True), t["z"]),
         lambda b, t, p: fmm(b, t, p, bias=True, residual=True)),
    # the residual first: add-comm turns no sum of two computed values, so each rule reads both orders
    Case("conv-residual-fuse", CONV, lambda b, t, p: b.add(t["z"], conv(b, t, p)),
         lambda b, t, p: fconv(b, t, p, residual=True)),
    Case("fused-conv-residual", CONV, lambda b, t, p: b.add(t["z"], fconv(b, t, p)),
         lambda b, t, p: fconv(b, t, p, residual=True)),
    Case("matmul-bias-fuse", MM, lambda b, t, p: b.add(t["c"], b.matmul(t["a"], t["b"])),
         lambda b, t, p: fmm(b, t, p, bias=True)),
    Case("fused-matmul-residual", MM, lambda b, t, p: b.add(t["z"], fmm(b, t, p, bias=True)),
         lambda b, t, p: fmm(b, t, p, bias=True, residual=True)),
]

test_sound, test_goal = parametrize(CASES)
