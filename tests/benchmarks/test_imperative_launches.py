"""The TensorSSA launch report: functionalizing (and optimizing) launches fewer kernels."""

import pytest

from benchmarks.imperative import KERNELS
from benchmarks.imperative.launches import measure


@pytest.mark.parametrize("name", list(KERNELS))
def test_functionalized_kernels_launch_fewer_kernels(name):
    row = measure(name)  # also checks every output against the eager NumPy run
    assert row["func_fused"] < row["naive"] and row["func_fused"] <= row["eager"]
    assert row["func_fused"] <= row["imp_fused"]      # in-place updates no longer block fusion
    assert row["chain_nodes"] <= row["func_nodes"]    # chain fusion only removes nodes
    assert isinstance(row["optimized"], int) and row["optimized"] < row["naive"]
