"""Kernel-launch counts: the fusion model, and counts that follow loop trip counts."""

import numpy as np
import pytest

from benchmarks.imperative.paper import figure4
from einsat.frontend import functionalize, trace
from einsat.frontend.launches import count_graph, count_program, fusion_kernels
from einsat.runtime import graph_runs

F, N = True, False  # fusible, not


def test_fusion_groups_connected_fusible_nodes():
    # a -> b -> c element-wise chain: one kernel
    assert fusion_kernels([(F, 1, []), (F, 1, [0]), (F, 1, [1])]) == 1
    # two independent chains: two kernels
    assert fusion_kernels([(F, 1, []), (F, 1, [0]), (F, 1, []), (F, 1, [2])]) == 2


def test_fusion_never_merges_across_a_non_fusible_node():
    # a -> matmul -> c and a -> c: fusing a with c would make a cycle between kernels
    assert fusion_kernels([(F, 1, []), (N, 1, [0]), (F, 1, [0, 1])]) == 3
    # the loop/if nodes launch nothing themselves but still separate kernels
    assert fusion_kernels([(F, 1, []), (N, 0, [0]), (F, 1, [1])]) == 2


def test_free_nodes_are_not_kernels():
    assert fusion_kernels([(F, 0, []), (F, 0, [0])]) == 0


@pytest.mark.parametrize("n", [0, 1, 5])
def test_figure4_counts_follow_the_trip_count(n):
    b, trip = np.zeros((6, 3), np.float32), np.array(n, np.int64)
    feeds = {"b": b, "n": trip}
    p = trace(figure4, (b, trip))
    assert count_program(p, feeds, "eager") == 1 + 2 * n      # the copy; add and copy_ per step
    assert count_program(p, feeds, "naive") == 1 + 4 * n      # + the two views b[i]
    assert count_graph(graph_runs(functionalize(figure4, (b, trip), fuse=False), feeds), fused=False) == 5 * n
    runs = graph_runs(functionalize(figure4, (b, trip)), feeds)
    assert count_graph(runs, fused=False) == 3 * n   # access, add, assign
    assert count_graph(runs, fused=True) == n        # one kernel per iteration


def test_in_place_updates_stop_imperative_fusion_but_not_functional_fusion():
    def f(x):
        y = x * 2
        y[0] += 1          # a barrier for the imperative program
        return np.exp(y) + 1

    x = np.ones((3, 4), np.float32)
    # y*2 and y[0]+1 fuse; then the in-place add and Python's write-back of y[0] (two barriers);
    # then exp(y)+1
    assert count_program(trace(f, (x,)), {"x": x}, "fused") == 4
    assert count_graph(graph_runs(functionalize(f, (x,)), {"x": x}), fused=True) == 1
