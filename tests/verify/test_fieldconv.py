"""Conv over the field at requested positions: the dense (whole plane) and sparse (im2col) ways
give NumPy's exact results, each alone and mixed in one request."""

import numpy as np
import pytest

import einsat
from einsat.ir import GraphBuilder
from einsat.verify.field import Source, embed
from einsat.verify.field.conv import Conv
from einsat.verify.field.evaluate import Context, FieldEnv, degrees, evaluate_at

F64 = np.float64


def ints(rng, shape):
    return rng.integers(-3, 4, size=shape).astype(F64)


def conv_case(rng, transposed=False):
    b = GraphBuilder("conv")
    x = b.input("x", (3, 4, 20, 12), F64)
    if transposed:
        y = b.conv_transpose(x, b.weight("w", ints(rng, (4, 3, 3, 2))), stride=(2, 1), padding=(1, 0, 0, 1),
                             groups=2)
    else:
        y = b.conv(x, b.weight("w", ints(rng, (6, 2, 3, 3))), b.weight("bias", ints(rng, (6,))),
                   stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    return b.build(y), {"x": ints(rng, (3, 4, 20, 12))}


def field_at(g, inputs, flat):
    env = FieldEnv({k: Source(const=embed(v)) for k, v in inputs.items()})
    return evaluate_at(g, env, {g.outputs[0]: flat})[g.outputs[0]][0], Context(g, env, degrees(g, env))


def plan_kinds(g, ctx, flat):
    node = g.nodes[-1]
    dense, rest = Conv(node.op.value == "conv_transpose").dense_plans(node, ctx, flat)
    return sorted({(n, gi) for n, gi, *_ in dense}), len(rest)


@pytest.mark.parametrize("transposed", [False, True])
def test_dense_sparse_and_mixed_requests_equal_numpy(rng, transposed):
    g, inputs = conv_case(rng, transposed)
    want = embed(einsat.run(g, inputs)[g.outputs[0]]).reshape(-1)
    n, f, ho, wo = g.types[g.outputs[0]].shape
    plane = ho * wo
    every = np.arange(want.size)
    # image 1, filters 0 and 4 (groups 0 and 1) on the whole plane: dense; a few others (a plane
    # more than BLOCK_WASTE times larger than what they ask of it): sparse
    whole = np.concatenate([(1 * f + k) * plane + np.arange(plane) for k in (0, 4)])
    few = np.array([0, plane + 3, (2 * f + 5) * plane + 7])
    mixed = np.unique(np.concatenate([whole, few]))
    for flat in (every, few, mixed):
        got, ctx = field_at(g, inputs, flat)
        np.testing.assert_array_equal(got, want[flat])
    _, ctx = field_at(g, inputs, mixed)
    dense, sparse = plan_kinds(g, ctx, mixed)
    if transposed:
        assert dense == [] and sparse == len(mixed)   # conv_transpose is always gathered
    else:
        assert dense == [(1, 0), (1, 1)] and sparse == 3


def test_a_dense_plane_reads_only_its_image_and_group(rng):
    g, inputs = conv_case(rng)
    _, _, ho, wo = g.types[g.outputs[0]].shape
    _, ctx = field_at(g, inputs, np.arange(ho * wo))
    node = g.nodes[-1]
    x_need, w_need, _ = Conv().pull(node, ctx, [np.arange(ho * wo)])
    # image 0, group 0: x[0, 0:2] whole, filter 0's weights
    np.testing.assert_array_equal(np.sort(x_need), np.arange(2 * 20 * 12))
    np.testing.assert_array_equal(np.sort(w_need), np.arange(2 * 9))
