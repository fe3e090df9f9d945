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
from einsat.testing.strategies import multilinear_programs
from einsat.verify.field import NotMultilinearError, P, Source, embed, unique
from einsat.verify.field import evaluate as fieldeval
from einsat.verify.field.base import digit_map
from einsat.verify.field.evaluate import FieldEnv, Known, evaluate, evaluate_at
from einsat.verify.field.table import exact_over_field

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




def test_pad_is_exact_over_the_field_with_any_fill_but_multilinear_only_with_zero():
    b = GraphBuilder("pads")
    x = b.input("x", (3,))
    g = b.build(b.pad(x, pads=(1, 1)), b.pad(x, pads=(1, 1), value=2.0))
    zero, two = g.nodes
    assert zero.definition.is_multilinear(zero.attrs) and not two.definition.is_multilinear(two.attrs)
    assert exact_over_field(zero) and exact_over_field(two)


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


def _known(shape, flat):
    flat = np.asarray(flat, np.int64)
    return Known(shape, flat, np.stack([flat * 3 + 1, flat * 5 + 2]))


@pytest.mark.parametrize("path", ["runs", "table", "search"])
def test_known_positions_read_alike_by_runs_table_or_search(monkeypatch, path):
    flat = np.concatenate([np.arange(100, 400), np.arange(900, 950), [1200, 1203, 1999]])
    if path != "runs":
        monkeypatch.setattr(fieldeval, "RUNS_LIMIT", 0)
    idx = np.array([[100, 399, -1], [1203, 949, 900]])
    if path == "table":
        idx = np.tile(idx, (1, 200))  # 64 reads per element of the tensor: worth a table
    got = _known((50, 40), flat).read(idx)
    assert got.shape == (2,) + idx.shape
    np.testing.assert_array_equal(got[0], np.where(idx >= 0, idx * 3 + 1, 0))
    np.testing.assert_array_equal(got[1], np.where(idx >= 0, idx * 5 + 2, 0))
    with pytest.raises(AssertionError, match="read but not pulled"):
        _known((50, 40), flat).read(np.array([101, 400] * (300 if path == "table" else 1)))


def test_known_reads_a_run_as_a_view_and_a_whole_tensor_by_position():
    k = _known((50, 40), np.concatenate([np.arange(100, 400), np.arange(900, 950)]))
    block = k.read_range(120, 180)
    assert np.shares_memory(block, k.vals)
    np.testing.assert_array_equal(block[0], np.arange(120, 180) * 3 + 1)
    np.testing.assert_array_equal(k.read_range(910, 950)[1], np.arange(910, 950) * 5 + 2)
    with pytest.raises(AssertionError):
        k.read_range(390, 910)
    whole = _known((3, 4), np.arange(12))
    np.testing.assert_array_equal(whole.read(np.array([11, -1, 0]))[0], [34, 0, 1])


@pytest.mark.parametrize("count", [3, 120])  # few positions: digits directly; many: two tables
def test_digit_map_is_the_weighted_sum_of_coordinates(rng, count):
    shape, coefs = (6, 5, 4), (7, -3, 100)
    flat = rng.choice(120, size=count, replace=False)
    c = np.unravel_index(flat, shape)
    want = 11 + sum(ci * w for ci, w in zip(c, coefs))
    np.testing.assert_array_equal(digit_map(flat, shape, coefs, offset=11), want)


def test_unique_sorts_and_keeps_what_is_already_sorted():
    a = np.array([1, 4, 9])
    assert np.shares_memory(unique(a), a)  # no copy, no sort
    np.testing.assert_array_equal(unique(np.array([4, 1, 4, 9, 1])), [1, 4, 9])


def test_envs_sharing_draws_draw_a_random_input_once():
    g = GraphBuilder("g")
    x = g.input("x", (10,))
    graph = g.build(g.neg(x))
    draws: dict = {}
    e1, e2 = (FieldEnv({"x": Source(key=7)}, tests=2, draws=draws) for _ in range(2))
    flat = np.array([1, 5, 8])
    first = e1.values(graph, "x", flat)
    assert e2.values(graph, "x", flat.copy()) is first
    np.testing.assert_array_equal(first, [Source(key=7).at(flat, k) for k in range(2)])
    other = e2.values(graph, "x", np.array([2, 3]))
    np.testing.assert_array_equal(other, [Source(key=7).at(np.array([2, 3]), k) for k in range(2)])
