"""PET's corrector on the paper's own examples, on planted faults, and on random mutant pairs.

Every expected region is derived from the construction (see einsat.testing.mutants), and checked
against a second, independent answer: evaluating both programs over the field at every position.
"""

import numpy as np
import pytest
from hypothesis import given

from einsat.errors import ShapeError
from einsat.ir import GraphBuilder
from einsat.testing.mutants import batch_to_width, dilated_as_regular, fused_groups
from einsat.testing.strategies import multilinear_programs, mutant_pairs
from einsat.verify import Region, correct, find_differences
from einsat.verify import corrector as corrector_module
from einsat.verify.corrector import assign_sources
from einsat.verify.field import NotMultilinearError, P
from einsat.verify.field.evaluate import evaluate
from einsat.verify.numeric import equivalent

W32 = np.float32


def weights(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(W32)


def conv(shape, weight, name="conv", **attrs):
    b = GraphBuilder(name)
    x = b.input("x", shape)
    return b.build(b.conv(x, b.weight("w", weight), **attrs))


def truth(original, mutant) -> dict[str, np.ndarray]:
    """Where the two programs differ, from whole-tensor field evaluation (no boxes)."""
    e1, e2, _, _ = assign_sources(original, mutant, seed=5)
    e1.tests = e2.tests = 2
    v1, v2 = evaluate(original, e1), evaluate(mutant, e2)
    return {a: np.any(v1[a] != v2[b], axis=0) for a, b in zip(original.outputs, mutant.outputs)}


def check_corrected(original, mutant, diffs):
    fixed = correct(original, mutant, diffs)
    assert equivalent(original, fixed)
    assert find_differences(original, fixed).equivalent
    return fixed


def test_figure_1_boundary_columns_of_image_pairs():
    n, c, h, w = 4, 3, 5, 6
    wt = weights(2, c, 3, 3)
    original, mutant = conv((n, c, h, w), wt, padding=1), batch_to_width(n, c, h, w, wt, 0)
    diffs = find_differences(original, mutant)
    out = original.outputs[0]
    expected = np.zeros((n, 2, h, w), bool)
    expected[0::2, :, :, w - 1] = True  # the left image reads its right neighbour instead of padding
    expected[1::2, :, :, 0] = True
    np.testing.assert_array_equal(diffs.mask(out), expected)
    np.testing.assert_array_equal(truth(original, mutant)[out], expected)
    assert diffs.regions[out] == [Region((k, 0, 0, (w - 1) * (1 - k % 2)), (k + 1, 2, h, w if k % 2 == 0 else 1))
                                  for k in range(n)]
    fixed = check_corrected(original, mutant, diffs)
    assert sum(nd.op.value == "correct" for nd in fixed.nodes) == n


def test_figure_3_dilated_conv_as_a_regular_conv_on_parity_ordered_input():
    n, c, h, w = 1, 2, 6, 8
    wt = weights(3, c, 3, 3, seed=1)
    original = conv((n, c, h, w), wt, dilation=2, padding=2)
    mutant = dilated_as_regular(n, c, h, w, wt, 0)
    diffs = find_differences(original, mutant)
    out = original.outputs[0]
    expected = np.zeros((n, 3, h, w), bool)
    expected[:, :, [1, h - 2], :] = True   # rows next to the parity seam read across it
    expected[:, :, :, [1, w - 2]] = True
    np.testing.assert_array_equal(diffs.mask(out), expected)
    np.testing.assert_array_equal(truth(original, mutant)[out], expected)
    check_corrected(original, mutant, diffs)


def test_figure_10a_two_convs_as_one_grouped_conv_on_a_zero_padded_weight():
    x_shape = (1, 4, 5, 5)
    w1, w2 = weights(6, 4, 1, 1, seed=2), weights(4, 4, 1, 1, seed=3)
    b = GraphBuilder("two_convs")
    x = b.input("x", x_shape)
    original = b.build(b.conv(x, b.weight("w1", w1)), b.conv(x, b.weight("w2", w2)))
    mutant = fused_groups(x_shape, w1, w2, 0)
    diffs = find_differences(original, mutant)
    assert diffs.equivalent and set(diffs.regions) == set(original.outputs)
    assert equivalent(original, mutant)


def test_figure_10a_with_the_split_off_by_two_channels_is_wrong_on_the_second_output():
    x_shape = (1, 4, 3, 3)
    w1, w2 = weights(6, 4, 1, 1, seed=2), weights(4, 4, 1, 1, seed=3)
    b = GraphBuilder("two_convs")
    x = b.input("x", x_shape)
    original = b.build(b.conv(x, b.weight("w1", w1)), b.conv(x, b.weight("w2", w2)))
    b = GraphBuilder("misplaced")
    x = b.input("x", x_shape)
    wc = b.concat(b.weight("w1", w1), b.pad(b.weight("w2", w2), pads=(2, 0, 0, 0, 0, 0, 0, 0)), axis=0)
    y = b.conv(b.concat(x, x, axis=1), wc, groups=2)
    first, second, _ = b.split(y, axis=1, sizes=(6, 4, 2))  # the padding went first: off by two
    mutant = b.build(first, second)
    diffs = find_differences(original, mutant)
    a, c = original.outputs
    assert diffs.regions[a] == []
    assert diffs.regions[c] == [Region((0, 0, 0, 0), (1, 4, 3, 3))]
    check_corrected(original, mutant, diffs)


def test_figure_4_a_conv_without_padding_padded_back_differs_on_the_eight_border_boxes():
    shape, wt = (2, 3, 6, 7), weights(4, 3, 3, 3)
    original = conv(shape, wt, padding=1)
    b = GraphBuilder("unpadded")
    x = b.input("x", shape)
    mutant = b.build(b.pad(b.conv(x, b.weight("w", wt)), pads=(0, 0, 1, 1, 0, 0, 1, 1)))
    diffs = find_differences(original, mutant)
    out = original.outputs[0]
    border = np.ones((2, 4, 6, 7), bool)
    border[:, :, 1:5, 1:6] = False
    np.testing.assert_array_equal(diffs.mask(out), border)
    assert diffs.boxes[out] == 9
    check_corrected(original, mutant, diffs)


@pytest.mark.parametrize("shape, kernel", [((2, 3, 6, 7), 3), ((1, 2, 5, 5), 3), ((1, 1, 9, 8), 5)])
def test_average_pool_as_a_depthwise_conv_of_constant_weights_differs_exactly_at_the_border(shape, kernel):
    """PET §8.3.2's avgpool -> conv: the conv's weight float32(1/k²) is read as the fraction, so
    only the windows the padding cuts (divided by fewer positions in the pool) differ."""
    p = kernel // 2
    b = GraphBuilder("pool")
    pool = b.build(b.avgpool(b.input("x", shape), kernel=(kernel, kernel), padding=(p, p, p, p)))
    c = shape[1]
    k = np.full((c, 1, kernel, kernel), 1 / kernel**2, W32)
    depthwise = conv(shape, k, name="depthwise", padding=p, groups=c)
    diffs = find_differences(pool, depthwise)
    border = np.ones(shape, bool)
    border[:, :, p:shape[2] - p, p:shape[3] - p] = False
    (out,) = pool.outputs
    np.testing.assert_array_equal(diffs.mask(out), border)
    np.testing.assert_array_equal(truth(pool, depthwise)[out], border)
    check_corrected(pool, depthwise, diffs)


def test_planted_fault_one_output_element():
    wt = weights(4, 3, 3, 3)
    original = conv((2, 3, 5, 5), wt, padding=1)
    b = GraphBuilder("one_element")
    x = b.input("x", (2, 3, 5, 5))
    y = b.conv(x, b.weight("w", wt), padding=1)
    bumped = b.add(b.slice(y, starts=(1, 2, 3, 0), ends=(2, 3, 4, 1)), b.const(np.ones((1, 1, 1, 1)), W32))
    mutant = b.build(b.correct(y, bumped, region=(1, 2, 3, 0, 2, 3, 4, 1)))
    diffs = find_differences(original, mutant)
    assert diffs.regions[original.outputs[0]] == [Region((1, 2, 3, 0), (2, 3, 4, 1))]
    check_corrected(original, mutant, diffs)


def test_planted_fault_one_weight_element():
    wt = weights(4, 3, 3, 3)
    changed = wt.copy()
    changed[2, 1, 0, 2] += 1.0  # filter 2, tap (0, 2)
    original = conv((2, 3, 5, 5), wt, padding=1)
    mutant = conv((2, 3, 5, 5), changed, padding=1)
    diffs = find_differences(original, mutant)
    # tap (0, 2) reads row o-1 and column o+1: inside for rows 1.. and columns ..3
    assert diffs.regions[original.outputs[0]] == [Region((0, 2, 1, 0), (2, 3, 5, 4))]
    check_corrected(original, mutant, diffs)


def test_planted_fault_one_padding_amount():
    wt = weights(4, 3, 3, 3)
    original = conv((1, 3, 5, 5), wt, padding=1)
    b = GraphBuilder("less_padding")
    x = b.input("x", (1, 3, 5, 5))
    y = b.conv(x, b.weight("w", wt), padding=(1, 1, 0, 1))  # bottom padding 0 instead of 1
    mutant = b.build(b.pad(y, pads=(0, 0, 0, 0, 0, 0, 1, 0)))
    diffs = find_differences(original, mutant)
    assert diffs.regions[original.outputs[0]] == [Region((0, 0, 4, 0), (1, 4, 5, 5))]
    check_corrected(original, mutant, diffs)


@given(mutant_pairs())
def test_random_mutant_pairs_exact_regions_and_sound_corrections(pair):
    diffs = find_differences(pair.original, pair.mutant)
    gt = truth(pair.original, pair.mutant)
    for o in pair.original.outputs:
        np.testing.assert_array_equal(diffs.mask(o), pair.mask(o), err_msg=f"{pair.family} {o}")
        np.testing.assert_array_equal(gt[o], pair.mask(o), err_msg=f"{pair.family} {o} (field truth)")
    check_corrected(pair.original, pair.mutant, diffs)


@given(multilinear_programs(max_nodes=4))
def test_a_program_is_never_reported_different_from_itself(g):
    assert find_differences(g, g).equivalent


@given(mutant_pairs(families=("sound", "fused_groups")))
def test_sound_mutants_are_never_reported(pair):
    assert find_differences(pair.original, pair.mutant).equivalent


def reads_at_two_rates():
    """P1(v) = x[4] + x[5+v] and P2(v) = x[4+2v] + x[5−v]: equal at v = 0, 1, not at 2, 3."""
    b = GraphBuilder("steady")
    x = b.input("x", (12,))
    p1 = b.add(b.expand(b.slice(x, starts=(4,), ends=(5,)), shape=(4,)), b.slice(x, starts=(5,), ends=(9,)))
    original = b.build(p1)
    b = GraphBuilder("two_rates")
    x = b.input("x", (12,))
    p2 = b.add(b.slice(x, starts=(4,), ends=(11,), steps=(2,)), b.slice(x, starts=(5,), ends=(1,), steps=(-1,)))
    return original, b.build(p2)


def test_reads_at_different_rates_are_caught_by_the_mirrored_positions(monkeypatch):
    original, mutant = reads_at_two_rates()
    out = original.outputs[0]
    np.testing.assert_array_equal(truth(original, mutant)[out], [False, False, True, True])
    diffs = find_differences(original, mutant)
    assert diffs.boxes[out] == 1 and diffs.mask(out)[2:].all()
    check_corrected(original, mutant, diffs)
    # Theorem 1's positions alone (v0 and v0 + e_i at the low corner) miss it
    low_only = lambda lo, hi: (np.concatenate([lo, np.minimum(lo + 1, hi - 1)]), np.array([0, 0]))
    monkeypatch.setattr(corrector_module, "_positions", low_only)
    assert find_differences(original, mutant).equivalent


def test_too_many_boxes_falls_back_to_every_position():
    n, c, h, w = 2, 2, 4, 5
    wt = weights(2, c, 3, 3)
    original, mutant = conv((n, c, h, w), wt, padding=1), batch_to_width(n, c, h, w, wt, 0)
    by_boxes = find_differences(original, mutant)
    dense = find_differences(original, mutant, max_boxes=4)
    out = original.outputs[0]
    assert dense.method[out] == "every position" and by_boxes.method[out] == "boxes"
    np.testing.assert_array_equal(dense.mask(out), by_boxes.mask(out))
    assert dense.positions == n * 2 * h * w


def test_the_error_bound_is_degree_over_p_to_the_tests():
    wt = weights(2, 3, 3, 3)
    g = conv((1, 3, 4, 4), wt, padding=1)
    d = find_differences(g, g, tests=3)
    assert d.degree == 2 and d.error_bound == pytest.approx((2 / P) ** 3)
    assert "error bound" in str(d)


def test_an_unrelated_mutant_weight_is_an_unknown_and_says_so():
    g = conv((1, 3, 4, 4), weights(2, 3, 3, 3))
    other = conv((1, 3, 4, 4), weights(2, 3, 3, 3, seed=9) + 5)
    other = other.replace(weights={"w2": other.weights["w"]}, nodes=[
        n.__class__(n.op, [n.inputs[0], "w2"], n.outputs, n.attrs, n.name) for n in other.nodes])
    d = find_differences(g, other)
    assert not d.equivalent and any("'w2'" in note and "unknown" in note for note in d.notes)


def test_programs_that_do_not_fit_are_refused():
    g = conv((1, 3, 4, 4), weights(2, 3, 3, 3), padding=1)
    h = conv((1, 3, 4, 4), weights(2, 3, 3, 3))
    with pytest.raises(ShapeError, match=r"differ in shape"):
        find_differences(g, h)
    k = conv((1, 3, 5, 4), weights(2, 3, 3, 3))
    with pytest.raises(ShapeError, match="different inputs"):
        find_differences(g, k)


def test_a_program_with_a_relu_is_refused_naming_the_graphs_the_node_and_what_to_use_instead():
    b = GraphBuilder("with_relu")
    y = b.relu(b.conv(b.input("x", (1, 3, 4, 4)), b.weight("w", weights(2, 3, 3, 3)), padding=1))
    g = b.build(y)
    relu = next(n.name for n in g.nodes if n.op.value == "relu")
    with pytest.raises(NotMultilinearError) as info:
        find_differences(g, g)
    message = str(info.value)
    assert "find_differences('with_relu', 'with_relu')" in message and f"'{relu}' (relu)" in message
    assert "multi-linear programs only" in message and "einsat.verify.equivalent" in message
    assert message.count("multi-linear programs only") == 1
    assert equivalent(g, g).equivalent  # what the message points to does check this pair


def test_too_many_boxes_and_too_many_positions_is_a_clear_error(monkeypatch):
    from einsat.errors import VerificationError
    g = conv((1, 3, 4, 4), weights(2, 3, 3, 3), padding=1)
    monkeypatch.setattr(corrector_module, "MAX_DENSE", 10)
    with pytest.raises(VerificationError, match=r"9 box intersections .*max_boxes=2.* 32 elements"):
        find_differences(g, g, max_boxes=2)


def test_figure_3_keeps_strided_boxes_and_finds_the_same_regions():
    n, c, h, w = 1, 2, 12, 16
    wt = weights(3, c, 3, 3, seed=1)
    original, mutant = conv((n, c, h, w), wt, dilation=2, padding=2), dilated_as_regular(n, c, h, w, wt, 0)
    diffs = find_differences(original, mutant)
    out = original.outputs[0]
    assert diffs.boxes[out] == 36  # (3 row boxes × 2 parities) × (3 × 2) columns, not 12 × 16 pixels
    expected = np.zeros((n, 3, h, w), bool)
    expected[:, :, [1, h - 2], :] = True
    expected[:, :, :, [1, w - 2]] = True
    np.testing.assert_array_equal(diffs.mask(out), expected)
    np.testing.assert_array_equal(truth(original, mutant)[out], expected)


def test_a_fault_in_the_original_is_found_through_the_mutants_strided_boxes():
    shape, wt, region = (1, 2, 16, 6), weights(3, 2, 3, 3), (0, 1, 4, 2, 1, 2, 5, 3)
    b = GraphBuilder("planted")
    x = b.input("x", shape)
    y = b.conv(x, b.weight("w", wt), padding=1)
    bumped = b.add(b.slice(y, starts=region[:4], ends=region[4:]), b.const(np.ones((1, 1, 1, 1)), W32))
    original = b.build(b.correct(y, bumped, region=region))
    b = GraphBuilder("rows_there_and_back")
    x = b.input("x", shape)
    y = b.reshape(b.conv(x, b.weight("w", wt), padding=1), shape=(1, 3, 8, 2, 6))
    y = b.transpose(b.transpose(y, perm=(0, 1, 3, 2, 4)), perm=(0, 1, 3, 2, 4))
    mutant = b.build(b.reshape(y, shape=(1, 3, 16, 6)))
    diffs = find_differences(original, mutant)
    out = original.outputs[0]
    # rows in the view (8, 2): the conv's seams and the fault's row 4 split the row pairs
    assert diffs.boxes[out] == 3 * 10 * 5
    assert diffs.regions[out] == [Region(region[:4], region[4:])]
    np.testing.assert_array_equal(truth(original, mutant)[out], diffs.mask(out))
