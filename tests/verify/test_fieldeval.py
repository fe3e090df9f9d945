"""Field evaluation against the float semantics, and at chosen positions against whole tensors.

Inputs are small integers (times 2520 where an op divides by window counts), so NumPy's float64
results are exact rationals and their embedding must equal the field result exactly.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einsat
from einsat.ir import GraphBuilder
from einsat.ir.registry import REGISTRY, Op
from einsat.testing.strategies import multilinear_programs
from einsat.verify.field import NotMultilinearError, P, Source, embed
from einsat.verify.fieldeval import FieldEnv, evaluate, evaluate_at
from einsat.verify.fieldops import RULES

F64 = np.float64


def ints(rng, shape, scale=1):
    return rng.integers(-3, 4, size=shape).astype(F64) * scale


def exact_env(inputs):
    return FieldEnv({k: Source(const=embed(v)) for k, v in inputs.items()})


def assert_field_matches_numpy(g, inputs, rng):
    env = exact_env(inputs)
    ref = einsat.run(g, inputs)
    got = evaluate(g, env)
    for o in g.outputs:
        np.testing.assert_array_equal(got[o][0], embed(ref[o]), err_msg=o)
        pos = rng.choice(ref[o].size, size=min(ref[o].size, 7), replace=False)
        np.testing.assert_array_equal(evaluate_at(g, env, {o: pos})[o][0], got[o][0].reshape(-1)[pos])


def case_conv(rng):
    b = GraphBuilder("conv")
    x = b.input("x", (2, 4, 5, 6), F64)
    w, bias = b.weight("w", ints(rng, (6, 2, 3, 3))), b.weight("bias", ints(rng, (6,)))
    y = b.conv(x, w, bias, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    return b.build(y, b.conv(x, b.weight("w1", ints(rng, (3, 4, 2)).reshape(3, 4, 2, 1)))), \
        {"x": ints(rng, (2, 4, 5, 6))}


def case_conv_transpose(rng):
    b = GraphBuilder("conv_transpose")
    x = b.input("x", (2, 4, 5, 6), F64)
    y = b.conv_transpose(x, b.weight("w", ints(rng, (4, 3, 3, 2))), stride=(2, 3), padding=(1, 0, 0, 1),
                         groups=2, dilation=(1, 2))
    return b.build(y), {"x": ints(rng, (2, 4, 5, 6))}


def case_matmul(rng):
    b = GraphBuilder("matmul")
    x = b.input("x", (3, 1, 4, 5), F64)
    y = b.matmul(x, b.weight("w", ints(rng, (2, 5, 3))))
    v = b.matmul(y, b.weight("v", ints(rng, (3,))))
    z = b.batchmatmul(b.reshape(y, shape=(6, 4, 3)), b.weight("u", ints(rng, (6, 3, 2))))
    g = b.gemm(b.reshape(x, shape=(12, 5)), b.weight("gw", ints(rng, (3, 5))), b.weight("gc", ints(rng, (3,))),
               trans_b=1, alpha=2.0, beta=0.5)
    return b.build(y, v, z, g), {"x": ints(rng, (3, 1, 4, 5))}


def case_layout(rng):
    b = GraphBuilder("layout")
    x = b.input("x", (2, 3, 4), F64)
    t = b.reshape(b.transpose(x, perm=(2, 0, 1)), shape=(4, 6))
    s = b.slice(t, starts=(3, 5), ends=(0, 0), steps=(-1, -2))
    outs = [b.pad(s, pads=(1, 2, 0, 1), value=1.5),
            b.pad(x, pads=(0, 2, 1, 0, 2, 1), mode="reflect"), b.pad(x, pads=(0, 2, 1, 0, 2, 1), mode="edge")]
    c = b.concat(x, b.mul(x, x), axis=1)
    s1, s2 = b.split(c, axis=1, sizes=(2, 4))
    outs += [s2, b.sub(s1, b.neg(s1)), b.flatten(x, axis=2), b.squeeze(b.unsqueeze(x, axes=(1,)))]
    outs += [b.expand(b.reduce_sum(x, axes=(1,), keepdims=1), shape=(2, 3, 4)),
             b.reduce_mean(b.mul(x, b.const(4.0, F64)), axes=(0, 2), keepdims=0),
             b.div(x, b.weight("d", np.array([2.0, -4.0, 0.5, 1.0]))),
             b.gather(x, b.weight("idx", np.array([[3, 0], [-1, 2]], np.int64)), axis=2),
             b.identity(x)]
    return b.build(*outs), {"x": ints(rng, (2, 3, 4))}


def case_pool(rng):
    b = GraphBuilder("pool")
    x = b.input("x", (2, 3, 7, 6), F64)
    a1 = b.avgpool(x, kernel=(3, 2), stride=(2, 2), padding=(1, 0, 1, 1), ceil_mode=1)
    a2 = b.avgpool(x, kernel=(3, 3), stride=(2, 1), padding=(1, 1, 1, 1), count_include_pad=1)
    return b.build(a1, a2, b.global_avgpool(x)), {"x": ints(rng, (2, 3, 7, 6), 2520)}


def case_correct_and_band(rng):
    b = GraphBuilder("correct_band")
    x = b.input("x", (4, 5), F64)
    fix = b.slice(b.mul(x, b.const(2.0, F64)), starts=(1, 2), ends=(3, 5))
    q, k = b.input("q", (2, 6, 3), F64), b.input("k", (2, 6, 3), F64)
    s = b.g2bmm(q, k, width=2, dilation=2)
    return b.build(b.correct(x, fix, region=(1, 2, 3, 5)), s, b.gbmm(s, k, dilation=2)), \
        {"x": ints(rng, (4, 5)), "q": ints(rng, (2, 6, 3)), "k": ints(rng, (2, 6, 3))}


@pytest.mark.parametrize("case", [case_conv, case_conv_transpose, case_matmul, case_layout, case_pool,
                                  case_correct_and_band])
def test_field_semantics_match_numpy_exactly(case, rng):
    g, inputs = case(rng)
    assert_field_matches_numpy(g, inputs, rng)


def test_batchnorm_is_the_affine_map_of_its_float64_coefficients(rng):
    b = GraphBuilder("bn")
    x = b.input("x", (2, 3, 4), F64)
    scale, bias = np.array([1.0, 2.0, -1.0]), np.array([0.5, 0.0, 3.0])
    mean, var = np.array([1.0, -2.0, 0.0]), np.array([3.0, 0.75, 1.0])
    g = b.build(b.batchnorm(x, b.weight("s", scale), b.weight("b", bias), b.weight("m", mean),
                            b.weight("v", var), epsilon=1.0))  # var + eps: 4, 1.75, 2
    xv = ints(rng, (2, 3, 4))
    a = scale / np.sqrt(var + 1.0)
    want = (embed(xv) * embed(a)[None, :, None] + embed(bias - mean * a)[None, :, None]) % P
    np.testing.assert_array_equal(evaluate(g, exact_env({"x": xv}))[g.outputs[0]][0], want)


def test_every_multilinear_registry_op_has_a_field_rule():
    missing = [op.value for op, d in REGISTRY.items() if d.multilinear and op not in RULES]
    assert missing == []
    for op in (Op.PAD, Op.BATCHNORM, Op.CORRECT, Op.IDENTITY, Op.CONSTANT, Op.DIV):
        assert op in RULES  # affine or plumbing ops the flag leaves out


def test_a_non_linear_op_is_refused_naming_the_node():
    b = GraphBuilder("nl")
    x = b.input("x", (3,))
    g = b.build(b.relu(b.add(x, x), name="act"))
    with pytest.raises(NotMultilinearError, match="'act'.*relu"):
        evaluate(g, FieldEnv({"x": Source(key=1)}))


def test_division_by_a_variable_is_refused():
    b = GraphBuilder("div")
    x = b.input("x", (3,))
    g = b.build(b.div(x, x, name="ratio"))
    with pytest.raises(NotMultilinearError, match="'ratio'"):
        evaluate(g, FieldEnv({"x": Source(key=1)}))


@given(multilinear_programs(max_nodes=4, max_side=4), st.integers(0, 2**16))
def test_values_at_positions_equal_the_whole_tensors(g, seed):
    env = FieldEnv({n: Source(key=k + 1) for k, n in enumerate(g.inputs)}, tests=2)
    whole = evaluate(g, env)
    rng = np.random.default_rng(seed)
    for o in g.outputs:
        size = whole[o][0].size
        pos = rng.choice(size, size=min(size, 5), replace=False)
        coords = np.stack(np.unravel_index(pos, whole[o].shape[1:]), -1) if whole[o].ndim > 1 else pos
        got = evaluate_at(g, env, {o: coords})[o]
        np.testing.assert_array_equal(got, whole[o].reshape(2, -1)[:, pos])
