"""Layout laws (algebra) and layout clean-up (post): transposes, reshapes and views."""

from math import prod

from hypothesis import strategies as st

from einsat.egraph.encoding import ctor_name
from einsat.rewrites.algebra.layout import BINARY, UNARY
from tests.rewrites.harness import Case, leaves, parametrize, shapes

S = shapes(1, 4)
PERM = S.flatmap(lambda s: st.tuples(st.just(s), st.permutations(range(len(s))).map(tuple)))
RESHAPE = S.flatmap(lambda s: st.tuples(st.just(s), st.sampled_from([(prod(s),), tuple(reversed(s)), (1,) + s])))
OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
ACTS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp", "Sqrt": "sqrt",
        "Neg": "neg", "Gelu": "gelu", "LeakyRelu": "leaky_relu"}
ACT_ATTRS = {"Gelu": {"approximate": "tanh"}, "LeakyRelu": {"alpha": 0.25}}


def layout(kind):
    if kind == "Transpose":
        return PERM, lambda b, x, p: b.transpose(x, perm=p["arg"])
    return RESHAPE, lambda b, x, p: b.reshape(x, shape=p["arg"])


def binary_case(kind, op):
    strat, lay = layout(kind)
    f = OPS[op]
    pair = strat.flatmap(lambda sa: leaves({"a": sa[0], "b": sa[0]}, arg=sa[1]))
    return Case(f"{kind.lower()}-{op.lower()}", pair,
                lambda b, t, p: lay(b, getattr(b, f)(t["a"], t["b"]), p),
                lambda b, t, p: getattr(b, f)(lay(b, t["a"], p), lay(b, t["b"], p)))


def unary_case(kind, op):
    strat, lay = layout(kind)
    f, kw = ACTS[op], ACT_ATTRS.get(op, {})
    one = strat.flatmap(lambda sa: leaves({"a": sa[0]}, arg=sa[1]))

    def x(b, t):  # sqrt of a non-negative value
        return b.abs(t["a"]) if op == "Sqrt" else t["a"]

    return Case(f"{kind.lower()}-{op.lower()}", one,
                lambda b, t, p: lay(b, getattr(b, f)(x(b, t), **kw), p),
                lambda b, t, p: getattr(b, f)(lay(b, x(b, t), p), **kw))


def scalar_case(kind):
    strat, lay = layout(kind)
    one = strat.flatmap(lambda sa: leaves({"a": sa[0], "s": ()}, arg=sa[1]))
    return Case(f"{kind.lower()}-scalar", one, lambda b, t, p: lay(b, b.mul(t["s"], t["a"]), p),
                lambda b, t, p: b.mul(t["s"], lay(b, t["a"], p)))


def view_case(name, view, reshaped):
    return Case(name, S.flatmap(lambda s: leaves({"a": s})), lambda b, t, p: view(b, t["a"], p),
                lambda b, t, p: b.reshape(t["a"], shape=reshaped(p.inputs["a"])))


def squeezed(s):
    return tuple(d for d in s if d != 1) or ()


ALGEBRA = ([binary_case(k, op) for k in ("Transpose", "Reshape") for op in BINARY]
           + [unary_case(k, ctor_name(op)) for k in ("Transpose", "Reshape") for op in UNARY]
           + [scalar_case("Transpose"), scalar_case("Reshape")]
           + [view_case("flatten-reshape", lambda b, x, p: b.flatten(x, axis=1),
                        lambda s: (s[0], prod(s[1:]))),
              view_case("squeeze-reshape", lambda b, x, p: b.squeeze(x), squeezed),
              view_case("unsqueeze-reshape", lambda b, x, p: b.unsqueeze(x, axes=(0,)), lambda s: (1,) + s)])

TWO_PERMS = S.flatmap(lambda s: st.tuples(st.just(s), st.permutations(range(len(s))).map(tuple),
                                          st.permutations(range(len(s))).map(tuple)))

POST = [
    Case("transpose-chain", TWO_PERMS.flatmap(lambda x: leaves({"a": x[0]}, p=x[1], q=x[2])),
         lambda b, t, p: b.transpose(b.transpose(t["a"], perm=p["p"]), perm=p["q"]),
         lambda b, t, p: b.transpose(t["a"], perm=tuple(p["p"][i] for i in p["q"]))),
    Case("transpose-identity", S.flatmap(lambda s: leaves({"a": s})),
         lambda b, t, p: b.relu(b.transpose(t["a"], perm=tuple(range(len(p.inputs["a"]))))),
         lambda b, t, p: b.relu(t["a"])),
    Case("reshape-chain", RESHAPE.flatmap(lambda x: leaves({"a": x[0]}, arg=x[1])),
         lambda b, t, p: b.reshape(b.reshape(t["a"], shape=p["arg"]), shape=(prod(p.inputs["a"]), 1)),
         lambda b, t, p: b.reshape(t["a"], shape=(prod(p.inputs["a"]), 1))),
    Case("reshape-identity", S.flatmap(lambda s: leaves({"a": s})),
         lambda b, t, p: b.relu(b.reshape(t["a"], shape=p.inputs["a"])), lambda b, t, p: b.relu(t["a"])),
    Case("expand-identity", S.flatmap(lambda s: leaves({"a": s})),
         lambda b, t, p: b.relu(b.expand(t["a"], shape=p.inputs["a"])), lambda b, t, p: b.relu(t["a"])),
    Case("identity-elim", S.flatmap(lambda s: leaves({"a": s})),
         lambda b, t, p: b.relu(b.identity(t["a"])), lambda b, t, p: b.relu(t["a"])),
    Case("relu-idempotent", S.flatmap(lambda s: leaves({"a": s})),
         lambda b, t, p: b.relu(b.relu(t["a"])), lambda b, t, p: b.relu(t["a"])),
]

test_sound, test_goal = parametrize(ALGEBRA + POST)
