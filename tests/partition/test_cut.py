"""Where the partition cuts: layer-aligned pieces that cover the program once, cheap cuts."""

import numpy as np
import pytest

import einsat
from einsat.ir.graph import Graph
from einsat.partition import Partitioning, canonical, partition, stitch
from einsat.partition.cut import crossings
from tests.partition.common import assert_same_function, prenorm, stacked


def check_cover(graph: Graph, pieces) -> None:
    assert pieces[0].start == 0 and pieces[-1].stop == len(graph.nodes)
    for a, b in zip(pieces, pieces[1:]):
        assert a.stop == b.start
    assert sum(len(p.graph.nodes) for p in pieces) == len(graph.nodes)


def test_a_stack_of_layers_is_cut_into_one_piece_per_layer():
    graph = stacked(layers=5)
    pieces, cuts = partition(graph, Partitioning(piece_nodes=64))
    check_cover(graph, pieces)
    keys = [canonical(p.graph).key for p in pieces]
    # every layer reads one value and makes one; the repeated ones share one fingerprint
    assert len(pieces) == 5 and len(set(keys[:-1])) == 1
    assert [len(p.graph.nodes) for p in pieces[:-1]] == [len(pieces[0].graph.nodes)] * 4
    assert len(cuts) == 4 and all(len(c.values) == 1 and not c.forced for c in cuts)
    for c in cuts:  # each cut crosses a value made by the last node before it
        assert graph.nodes[c.after].outputs[0] == c.values[0]
        assert c.bytes == graph.types[c.values[0]].nbytes


def test_cuts_cross_few_values_from_ops_that_are_not_multilinear_or_have_other_uses():
    graph = stacked(layers=3, softmax=True)
    pieces, cuts = partition(graph, Partitioning(piece_nodes=64, max_crossing=2))
    check_cover(graph, pieces)
    uses = {}
    for n in graph.nodes:
        for i in n.inputs:
            uses[i] = uses.get(i, 0) + 1
    for c in cuts:
        assert 1 <= len(c.values) <= 2
        for v in c.values:
            p = graph.producer(v)
            assert uses[v] > 1 or not p.definition.is_multilinear(p.attrs), (c, p.op_name)
        assert c.values == crossings(graph)[c.after]


def test_stitching_the_pieces_back_unoptimized_gives_the_program():
    graph = stacked(layers=4, softmax=True)
    pieces, _ = partition(graph, Partitioning(piece_nodes=40))
    again = stitch(graph, pieces, [p.graph for p in pieces])
    assert [n.op for n in again.nodes] == [n.op for n in graph.nodes]
    assert again.outputs == graph.outputs and again.input_types() == graph.input_types()
    assert_same_function(graph, again, rtol=0)


def test_a_run_without_a_candidate_is_cut_by_force_and_every_piece_fits():
    b = einsat.GraphBuilder("chain")
    x = b.input("x", (8, 8))
    w = b.weight("w", (8, 8))
    t = x
    for _ in range(30):  # matmuls only: multilinear, one use each: no candidate boundary
        t = b.matmul(t, w)
    graph = b.build(t)
    pieces, cuts = partition(graph, Partitioning(piece_nodes=8))
    check_cover(graph, pieces)
    assert all(len(p.graph.nodes) <= 8 for p in pieces)
    assert cuts and all(c.forced for c in cuts)


def test_a_piece_reads_what_it_needs_and_exports_what_is_used_later():
    graph = stacked(layers=3)
    pieces, _ = partition(graph, Partitioning(piece_nodes=64))
    inside = set()
    for p in pieces:
        made = {o for n in p.graph.nodes for o in n.outputs}
        used_later = {i for q in pieces[p.index + 1:] for n in q.graph.nodes for i in n.inputs} | set(graph.outputs)
        assert set(p.graph.outputs) == made & used_later
        assert set(p.graph.inputs) <= set(graph.inputs) | inside
        assert set(p.graph.weights) <= set(graph.weights)
        inside |= made


@pytest.mark.parametrize("bad", [dict(executor="threads"), dict(piece_nodes=0)])
def test_bad_settings_are_clear_errors(bad):
    with pytest.raises(einsat.EinsatError, match="executor|partitioning"):
        Partitioning(**bad)


def test_partition_is_deterministic():
    graph = stacked(layers=4, softmax=True)
    one, cuts1 = partition(graph)
    two, cuts2 = partition(graph)
    assert [(p.start, p.stop) for p in one] == [(p.start, p.stop) for p in two] and cuts1 == cuts2
    assert np.all([canonical(a.graph) == canonical(b.graph) for a, b in zip(one, two)])


def test_the_last_layer_of_a_prenorm_stack_is_cut_off_the_final_norm():
    from einsat.partition.cut import candidates
    graph = prenorm(layers=3)
    pieces, cuts = partition(graph, Partitioning(above=0))
    check_cover(graph, pieces)
    keys = [canonical(p.graph).key for p in pieces]
    # three layers of one fingerprint, the last included, and the final norm on its own
    assert len(pieces) == 4 and len(set(keys[:3])) == 1 and keys[3] != keys[0]
    assert [n.op for n in pieces[3].graph.nodes] == [einsat.Op.LAYERNORM]
    last = cuts[-1]
    # the last layer's residual sum is read by the final norm alone: not a candidate boundary, a repeat cut
    assert not candidates(graph, crossings(graph), Partitioning().max_crossing)[last.after]
    assert last.repeat and not last.forced and graph.producer(last.values[0]).op is einsat.Op.ADD
    assert not any(c.repeat for c in cuts[:-1])
    assert "1 at a repeated unit's edge" in str(_summary(cuts))
    assert_same_function(graph, stitch(graph, pieces, [p.graph for p in pieces]), rtol=0)


def test_align_cuts_a_copy_of_the_unit_off_a_longer_neighbour_once():
    from einsat.partition.cut import align
    graph = prenorm(layers=3)  # 30 nodes a layer, then the final norm
    out, made = align(graph, [(0, 30), (30, 60), (60, 91)])
    assert out == [(0, 30), (30, 60), (60, 90), (90, 91)] and made == {89}
    assert align(graph, out) == (out, set())  # nothing left to cut
    # a neighbour that does not begin with a whole copy of the unit stays whole
    assert align(graph, [(0, 30), (30, 60), (60, 61), (61, 91)]) == ([(0, 30), (30, 60), (60, 61), (61, 91)], set())


def _summary(cuts):
    from einsat.partition.report import CutSummary, PartitionSummary
    return PartitionSummary([], [CutSummary(c.after, c.node, list(c.values), list(c.producers), c.bytes, None,
                                            c.forced, c.repeat) for c in cuts], "serial", 1, True)


def test_a_layer_larger_than_a_piece_is_cut_alike_in_every_copy():
    """A repeated layer of more nodes than `piece_nodes` (a legacy Llama export's 69-node layer at
    the default 64) is cut into the same pieces in every copy, so each is optimized once and
    reused (#39): before, the copies were grouped into 64-node pieces that never repeated."""
    graph = prenorm(layers=5)  # 30-node layers of atoms 1, 22, 1, 3, 3
    pieces, cuts = partition(graph, Partitioning(piece_nodes=20, min_unit=4))
    check_cover(graph, pieces)
    keys = [canonical(p.graph).key for p in pieces]
    assert all(len(p.graph.nodes) <= 20 for p in pieces if len(p.graph.nodes) > 1)
    per_layer = [keys[k:k + 2] for k in range(0, 8, 2)]  # the first four layers, two pieces each
    assert all(pair == per_layer[0] for pair in per_layer) and per_layer[0][0] != per_layer[0][1]
    assert [len(p.graph.nodes) for p in pieces[:8]] == [20, 10] * 4
    assert_same_function(graph, stitch(graph, pieces, [p.graph for p in pieces]))


def test_the_last_copy_of_a_layer_cut_in_two_is_cut_alike_before_the_final_norm():
    """A layer cut into two pieces (20 + 10 nodes): the last copy ran on into the final norm,
    one piece (140, 151) reused by nothing. `align` continues the repetition (#39): the piece
    that follows the first piece's other copies is cut off it, so all five layers are reused."""
    from einsat.partition.cut import align
    graph = prenorm(layers=5)
    pieces, cuts = partition(graph, Partitioning(piece_nodes=20, min_unit=4))
    check_cover(graph, pieces)
    keys = [canonical(p.graph).key for p in pieces]
    assert [(p.start, p.stop) for p in pieces][-3:] == [(120, 140), (140, 150), (150, 151)]
    assert keys[:10] == keys[:2] * 5 and keys[10] not in keys[:2]
    assert cuts[-1].repeat and not cuts[-1].forced
    assert_same_function(graph, stitch(graph, pieces, [p.graph for p in pieces]))
    # after a copy cut off a piece, the next copy runs on past the rest into a piece that is no
    # copy: the two are cut again
    ranges = [(0, 20), (20, 30), (30, 50), (50, 60), (60, 80), (80, 90), (90, 110), (110, 120), (120, 145), (145, 151)]
    out, made = align(graph, ranges)
    assert out[-3:] == [(120, 140), (140, 150), (150, 151)] and made == {139, 149}


def test_a_repeated_unit_is_cut_into_the_fewest_and_most_even_runs():
    from einsat.partition.cut import _chunks
    assert _chunks([1, 3, 1, 2, 1, 3, 42, 1, 3, 1, 2, 1, 1, 7], 64) == [(0, 7), (7, 14)]  # 53 + 16 nodes
    assert _chunks([10, 10, 10, 10], 64) == [(0, 4)]
    assert _chunks([30, 30, 30], 64) == [(0, 2), (2, 3)]
    assert _chunks([70, 5], 64) == [(0, 1), (1, 2)]  # an atom larger than a piece stays alone
