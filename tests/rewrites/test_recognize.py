"""Written-out RMSNorm, layernorm and GELU recognized as their ops (`einsat.rewrites.algebra.norms`,
`einsat.rewrites.algebra.gelu`).

Each form a generator reads is a case: its two sides are sound on random float64 inputs
(hypothesis shapes and axes), and the generator, run alone on the left side, puts the right side
into its e-class. Forms it must not take (another axis, a wrong constant, a float64 epsilon that
is no float32) stay out. The bundled exports' forms are in `test_recognize_models.py`.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.egraph import Limits, Schedule, Session
from einsat.rewrites.algebra.gelu import gelu_generator
from einsat.rewrites.algebra.norms import layernorm_generator, rmsnorm_generator
from tests.rewrites.harness import F64, Case, Leaves, check_sound, leaves, shapes

SQRT2 = np.sqrt(2.0)
TANH_SCALE = np.sqrt(2.0 / np.pi)


def _norm_leaves(shape):
    return st.integers(0, len(shape) - 1).flatmap(
        lambda axis: st.sampled_from([0, 1]).flatmap(
            lambda full: leaves({"x": shape}, {"w": shape[axis:] if full else shape[-1:], "b": shape[axis:]},
                                axis=axis, eps=st.sampled_from([2.0 ** -20, 0.5, 1e-6]))))


NORM = shapes(1, 3, 1, 5).flatmap(_norm_leaves)
EXACT = shapes(1, 3, 1, 5).flatmap(  # epsilons exact in float32 (float64 programs need them so)
    lambda s: st.integers(0, len(s) - 1).flatmap(
        lambda axis: leaves({"x": s}, {"w": s[axis:], "b": s[axis:]}, axis=axis,
                            eps=st.sampled_from([2.0 ** -20, 0.5]))))
ACT = shapes(1, 3, 1, 5).flatmap(lambda s: leaves({"x": s}))


def _c(b, v):
    return b.const(v, F64)


def _axes(t, p):
    return tuple(range(p["axis"], len(t["x"].type.shape)))


def _mean(b, t, p, v):
    return b.reduce_mean(v, axes=_axes(t, p), keepdims=1)


def _rms_inv(b, t, p, x, square="pow", inverse="div"):
    sq = b.pow(x, _c(b, 2.0)) if square == "pow" else b.mul(x, x)
    v = b.add(_mean(b, t, p, sq), _c(b, p["eps"]))
    if inverse == "pow":
        return b.pow(v, _c(b, -0.5))
    return b.div(_c(b, 1.0), b.sqrt(v))


def _rms(b, t, p, x=None):
    return b.rmsnorm(t["x"] if x is None else x, t["w"], axis=p["axis"], epsilon=p["eps"])


RMS_FORMS = [  # (name, lhs, rhs)
    ("dynamo",  # w · (x · (1 / sqrt(mean(x^2) + eps)))
     lambda b, t, p: b.mul(t["w"], b.mul(t["x"], _rms_inv(b, t, p, t["x"]))), _rms),
    ("divided-x-times-x",  # (x / sqrt(mean(x · x) + eps)) · w
     lambda b, t, p: b.mul(b.div(t["x"], b.sqrt(b.add(_c(b, p["eps"]), _mean(b, t, p, b.mul(t["x"], t["x"]))))),
                           t["w"]), _rms),
    ("rsqrt-as-pow",  # (rsqrt(v) · x) · w, rsqrt as Pow(v, -0.5)
     lambda b, t, p: b.mul(b.mul(_rms_inv(b, t, p, t["x"], inverse="pow"), t["x"]), t["w"]), _rms),
    ("legacy-casts",  # the TorchScript export: Cast(x, own dtype) in and out
     lambda b, t, p: b.mul(t["w"], b.cast(b.mul(b.cast(t["x"], dtype="float64"),
                                                _rms_inv(b, t, p, b.cast(t["x"], dtype="float64"))),
                                          dtype="float64")),
     lambda b, t, p: _rms(b, t, p, b.cast(t["x"], dtype="float64"))),
]


def _ln_parts(b, t, p):
    d = b.sub(t["x"], _mean(b, t, p, t["x"]))
    return d, b.sqrt(b.add(_mean(b, t, p, b.pow(d, _c(b, 2.0))), _c(b, p["eps"])))


LN_FORMS = [
    ("divided-bias",  # (x - mean) / sqrt(var + eps) · w + b
     lambda b, t, p: b.add(b.mul(b.div(*_ln_parts(b, t, p)), t["w"]), t["b"]),
     lambda b, t, p: b.layernorm(t["x"], t["w"], t["b"], axis=p["axis"], epsilon=p["eps"])),
    ("reciprocal-no-bias",  # w · ((x - mean) · (1 / sqrt(var + eps)))
     lambda b, t, p: b.mul(t["w"], b.mul(_ln_parts(b, t, p)[0], b.div(_c(b, 1.0), _ln_parts(b, t, p)[1]))),
     lambda b, t, p: b.layernorm(t["x"], t["w"], axis=p["axis"], epsilon=p["eps"])),
    ("bias-first",  # b + w · (x - mean) / sqrt(..) with x · x as the square
     lambda b, t, p: b.add(t["b"], b.mul(t["w"], b.div(
         b.sub(t["x"], _mean(b, t, p, t["x"])),
         b.sqrt(b.add(_mean(b, t, p, b.mul(b.sub(t["x"], _mean(b, t, p, t["x"])),
                                           b.sub(t["x"], _mean(b, t, p, t["x"])))), _c(b, p["eps"])))))),
     lambda b, t, p: b.layernorm(t["x"], t["w"], t["b"], axis=p["axis"], epsilon=p["eps"])),
]


def _erf_term(b, x, div=True):
    z = b.div(x, _c(b, SQRT2)) if div else b.mul(x, _c(b, 1 / SQRT2))
    return b.erf(z)


def _tanh_term(b, x, cube="pow"):
    x3 = b.pow(x, _c(b, 3.0)) if cube == "pow" else b.mul(b.mul(x, x), x)
    return b.tanh(b.mul(b.add(x, b.mul(x3, _c(b, 0.044715))), _c(b, TANH_SCALE)))


GELU_FORMS = [
    ("erf-bert",  # x · (0.5 · (1 + erf(x / √2)))
     lambda b, t, p: b.mul(t["x"], b.mul(_c(b, 0.5), b.add(_erf_term(b, t["x"]), _c(b, 1.0)))),
     lambda b, t, p: b.gelu(t["x"])),
    ("erf-times-half-first",  # (0.5 · x) · (erf(x · (1/√2)) + 1)
     lambda b, t, p: b.mul(b.mul(_c(b, 0.5), t["x"]), b.add(_c(b, 1.0), _erf_term(b, t["x"], div=False))),
     lambda b, t, p: b.gelu(t["x"])),
    ("tanh-gpt2",  # (x · 0.5) · (1 + tanh((x + 0.044715 · x³) · √(2/π)))
     lambda b, t, p: b.mul(b.mul(t["x"], _c(b, 0.5)), b.add(_tanh_term(b, t["x"]), _c(b, 1.0))),
     lambda b, t, p: b.gelu(t["x"], approximate="tanh")),
    ("tanh-cube-as-products",  # 0.5 · (x · (1 + tanh(..(x · x) · x..)))
     lambda b, t, p: b.mul(_c(b, 0.5), b.mul(t["x"], b.add(_c(b, 1.0), _tanh_term(b, t["x"], cube="mul")))),
     lambda b, t, p: b.gelu(t["x"], approximate="tanh")),
]

CASES = ([(Case("rmsnorm", NORM if name != "legacy-casts" else EXACT, lhs, rhs, variant=name), rmsnorm_generator)
          for name, lhs, rhs in RMS_FORMS]
         + [(Case("layernorm", NORM, lhs, rhs, variant=name), layernorm_generator) for name, lhs, rhs in LN_FORMS]
         + [(Case("gelu", ACT, lhs, rhs, variant=name), gelu_generator) for name, lhs, rhs in GELU_FORMS])
IDS = [repr(c) for c, _ in CASES]


def run_generator(case: Case, p, generator):
    s = Session(Limits(iterations=1, nodes=20_000, time_s=60))
    (left,) = s.add_graph(case.program(case.lhs, p, "lhs"))
    report = s.run(Schedule((generator(),)))
    return s, left, report


@pytest.mark.parametrize("case, generator", CASES, ids=IDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_forms_are_sound(case, generator, data):
    # the float64 chains round the epsilon to nothing: the op keeps it a float32, as exact here
    check_sound(case, data.draw(case.leaves), rtol=1e-9)


@pytest.mark.parametrize("case, generator", CASES, ids=IDS)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_generator_puts_the_op_in_the_chain_class(case, generator, data):
    p = data.draw(case.leaves)
    if case.rule != "gelu" and float(np.float32(p["eps"])) != p["eps"]:  # a float64 program keeps it a chain
        p = type(p)(p.inputs, p.weights, {**p.attrs, "eps": 0.5}, p.seed)
    s, left, report = run_generator(case, p, generator)
    assert report.rules[case.rule].matches >= 1
    (right,) = s.add_graph(case.program(case.rhs, p, "rhs"), root=False)
    assert s.equivalent(left, right), f"{case!r}: the {case.rule} op is not in the chain's e-class"


def _stays(lhs, generator, name, p):
    case = Case(name, None, lhs, lhs)
    _, _, report = run_generator(case, p, generator)
    return report.rules[name].matches


P = Leaves({"x": (2, 3, 4)}, {"w": (4,), "b": (4,)}, {"axis": 2, "eps": 0.5}, seed=0)


def test_a_float64_epsilon_that_is_no_float32_stays_a_chain():
    p = type(P)(P.inputs, P.weights, {"axis": 2, "eps": 1e-6}, P.seed)
    assert _stays(RMS_FORMS[0][1], rmsnorm_generator, "rmsnorm", p) == 0
    assert _stays(LN_FORMS[0][1], layernorm_generator, "layernorm", p) == 0


def test_a_mean_over_other_axes_than_the_weight_s_stays_a_chain():
    """The mean over the middle axis alone is no normalization over trailing dims."""
    def lhs(b, t, p):
        v = b.add(b.reduce_mean(b.mul(t["x"], t["x"]), axes=(1,), keepdims=1), _c(b, 0.5))
        return b.mul(t["w"], b.mul(t["x"], b.div(_c(b, 1.0), b.sqrt(v))))
    assert _stays(lhs, rmsnorm_generator, "rmsnorm", P) == 0


def test_a_square_of_another_value_stays_a_chain():
    def lhs(b, t, p):
        v = b.add(_mean(b, t, p, b.mul(t["x"], b.neg(t["x"]))), _c(b, 0.5))
        return b.mul(t["w"], b.mul(t["x"], b.div(_c(b, 1.0), b.sqrt(v))))
    assert _stays(lhs, rmsnorm_generator, "rmsnorm", P) == 0


@pytest.mark.parametrize("half, one, root2", [(0.25, 1.0, SQRT2), (0.5, 2.0, SQRT2), (0.5, 1.0, 1.5)])
def test_a_gelu_with_a_wrong_constant_stays_a_chain(half, one, root2):
    def lhs(b, t, p):
        return b.mul(t["x"], b.mul(_c(b, half), b.add(b.erf(b.div(t["x"], _c(b, root2))), _c(b, one))))
    assert _stays(lhs, gelu_generator, "gelu", P) == 0
