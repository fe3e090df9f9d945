"""Concat and split: geometry, and concat commuting with element-wise ops, products and pooling."""

import pytest
from hypothesis import strategies as st

from einsat.egraph.encoding import ctor_name
from einsat.rewrites.algebra.layout import BINARY, UNARY
from tests.rewrites.harness import Case, dims, leaves, parametrize, shapes
from tests.rewrites.test_layout import ACT_ATTRS, ACTS, OPS


@st.composite
def along(draw, n: int = 2, min_rank: int = 1):
    """A base shape, an axis, and n shapes that differ from it only along that axis."""
    base = draw(shapes(min_rank, 3))
    ax = draw(st.integers(0, len(base) - 1))
    parts = [base[:ax] + (draw(dims()),) + base[ax + 1:] for _ in range(n)]
    return ax, parts


def pairs(**kw):
    return along().flatmap(lambda x: leaves({"a": x[1][0], "b": x[1][1]}, ax=x[0], **kw))


def quads():
    return along().flatmap(lambda x: leaves({"a": x[1][0], "b": x[1][0], "c": x[1][1], "d": x[1][1]}, ax=x[0]))


def relus(b, *xs):
    return tuple(b.relu(x) for x in xs)


SPLIT2 = along(2).flatmap(lambda x: leaves(
    {"x": x[1][0][:x[0]] + (x[1][0][x[0]] + x[1][1][x[0]],) + x[1][0][x[0] + 1:]},
    ax=x[0], n=(x[1][0][x[0]], x[1][1][x[0]])))
SPLIT3 = along(3).flatmap(lambda x: leaves(
    {"x": x[1][0][:x[0]] + (sum(s[x[0]] for s in x[1]),) + x[1][0][x[0] + 1:]},
    ax=x[0], n=tuple(s[x[0]] for s in x[1])))


def split_split_lhs(b, t, p):
    n0, n1, n2 = p["n"]
    head, tail = b.split(t["x"], axis=p["ax"], sizes=(n0 + n1, n2))
    s0, s1 = b.split(head, axis=p["ax"], sizes=(n0, n1))
    return relus(b, s0, s1, tail)


def conv(b, x, w, bias=None, **kw):
    return b.conv(x, w, bias, **kw)


CONV_CH = st.tuples(dims(), dims(), dims(), dims(), dims(3, 5), st.integers(1, 3), st.booleans()).flatmap(
    lambda s: leaves({"x": (s[0], s[1], s[4], s[4])},
                     {"w1": (s[2], s[1], s[5], s[5]), "w2": (s[3], s[1], s[5], s[5]),
                      **({"b1": (s[2],), "b2": (s[3],)} if s[6] else {})}, pad=s[5] // 2))
CONV_BATCH = st.tuples(dims(), dims(), dims(), dims(), dims(3, 5)).flatmap(
    lambda s: leaves({"a": (s[0], s[2], s[4], s[4]), "b": (s[1], s[2], s[4], s[4])}, {"w": (s[3], s[2], 3, 3)}))
POOL = st.tuples(st.integers(0, 1), dims(), dims(), dims(), dims(4, 6)).flatmap(
    lambda s: leaves({"a": (s[1], s[3], s[4], s[4]) if s[0] == 1 else (s[1], s[2], s[4], s[4]),
                      "b": (s[1], s[2], s[4], s[4]) if s[0] == 1 else (s[3], s[2], s[4], s[4])}, ax=s[0]))
ROWS = st.tuples(st.lists(dims(), max_size=1).map(tuple), dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[3]), "b": s[0] + (s[2], s[3])}, {"w": (s[3], s[4])}))
COLS = st.tuples(st.lists(dims(), max_size=1).map(tuple), dims(), dims(), dims(), dims()).flatmap(
    lambda s: leaves({"a": s[0] + (s[1], s[2])}, {"b": (s[2], s[3]), "c": (s[2], s[4])}))


def concat_conv_rhs(b, t, p):
    bias = b.concat(t["b1"], t["b2"], axis=0) if "b1" in t else None
    return conv(b, t["x"], b.concat(t["w1"], t["w2"], axis=0), bias, padding=p["pad"])


def pool(kind):
    return {"maxpool": lambda b, x: b.maxpool(x, kernel=(2, 2), stride=(2, 2)),
            "avgpool": lambda b, x: b.avgpool(x, kernel=(3, 3), padding=(1, 1), count_include_pad=1),
            "global-avgpool": lambda b, x: b.global_avgpool(x)}[kind]


CASES = [
    Case("split-concat", pairs(),
         lambda b, t, p: relus(b, *b.split(b.concat(t["a"], t["b"], axis=p["ax"]), axis=p["ax"],
                                           sizes=(p.inputs["a"][p["ax"]], p.inputs["b"][p["ax"]]))),
         lambda b, t, p: relus(b, t["a"], t["b"])),
    Case("concat-split", SPLIT2,
         lambda b, t, p: b.relu(b.concat(*b.split(t["x"], axis=p["ax"], sizes=p["n"]), axis=p["ax"])),
         lambda b, t, p: b.relu(t["x"])),
    Case("concat-flatten", along(3).flatmap(lambda x: leaves({"a": x[1][0], "b": x[1][1], "c": x[1][2]}, ax=x[0])),
         lambda b, t, p: b.concat(b.concat(t["a"], t["b"], axis=p["ax"]), t["c"], axis=p["ax"]),
         lambda b, t, p: b.concat(t["a"], t["b"], t["c"], axis=p["ax"])),
    Case("concat-flatten", along(3).flatmap(lambda x: leaves({"a": x[1][0], "b": x[1][1], "c": x[1][2]}, ax=x[0])),
         lambda b, t, p: b.concat(t["a"], b.concat(t["b"], t["c"], axis=p["ax"]), axis=p["ax"]),
         lambda b, t, p: b.concat(t["a"], t["b"], t["c"], axis=p["ax"]), variant="right"),
    Case("split-split", SPLIT3, split_split_lhs,
         lambda b, t, p: relus(b, *b.split(t["x"], axis=p["ax"], sizes=p["n"]))),
    *[Case(f"concat-{op.lower()}", quads(),
           lambda b, t, p, f=OPS[op]: b.concat(getattr(b, f)(t["a"], t["b"]), getattr(b, f)(t["c"], t["d"]),
                                               axis=p["ax"]),
           lambda b, t, p, f=OPS[op]: getattr(b, f)(b.concat(t["a"], t["c"], axis=p["ax"]),
                                                    b.concat(t["b"], t["d"], axis=p["ax"]))) for op in BINARY],
    *[Case(f"concat-{op.lower()}", pairs(),
           lambda b, t, p, f=ACTS[op], kw=ACT_ATTRS.get(op, {}): b.concat(getattr(b, f)(t["a"], **kw),
                                                                        getattr(b, f)(t["b"], **kw), axis=p["ax"]),
           lambda b, t, p, f=ACTS[op], kw=ACT_ATTRS.get(op, {}): getattr(b, f)(b.concat(t["a"], t["b"], axis=p["ax"]),
                                                                             **kw)) for op in map(ctor_name, UNARY)],
    Case("concat-matmul-rows", ROWS,
         lambda b, t, p: b.concat(b.matmul(t["a"], t["w"]), b.matmul(t["b"], t["w"]), axis=len(p.inputs["a"]) - 2),
         lambda b, t, p: b.matmul(b.concat(t["a"], t["b"], axis=len(p.inputs["a"]) - 2), t["w"])),
    Case("concat-matmul-cols", COLS,
         lambda b, t, p: b.concat(b.matmul(t["a"], t["b"]), b.matmul(t["a"], t["c"]), axis=len(p.inputs["a"]) - 1),
         lambda b, t, p: b.matmul(t["a"], b.concat(t["b"], t["c"], axis=1))),
    Case("concat-conv-channels", CONV_CH,
         lambda b, t, p: b.concat(conv(b, t["x"], t["w1"], t.get("b1"), padding=p["pad"]),
                                  conv(b, t["x"], t["w2"], t.get("b2"), padding=p["pad"]), axis=1),
         concat_conv_rhs),
    Case("concat-conv-batch", CONV_BATCH,
         lambda b, t, p: b.concat(conv(b, t["a"], t["w"]), conv(b, t["b"], t["w"]), axis=0),
         lambda b, t, p: conv(b, b.concat(t["a"], t["b"], axis=0), t["w"])),
    *[Case(f"concat-{kind}", POOL,
           lambda b, t, p, f=pool(kind): b.concat(f(b, t["a"]), f(b, t["b"]), axis=p["ax"]),
           lambda b, t, p, f=pool(kind): f(b, b.concat(t["a"], t["b"], axis=p["ax"])))
      for kind in ("maxpool", "avgpool", "global-avgpool")],
]

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # NaN must match NaN
test_sound, test_goal = parametrize(CASES)
