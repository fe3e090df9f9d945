"""einsum (einsat/ir/ops/einsum.py): NumPy against onnxruntime, normalization, shape errors."""

import numpy as np
import pytest
from hypothesis import given

from einsat.errors import EinsatError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.ir.ops.einsum import normalize_equation
from einsat.testing.strategies import einsum_cases, seeds
from tests.ir.onnx_check import check_op


@given(case=einsum_cases(), seed=seeds)
def test_einsum(case, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = check_op(Op.EINSUM, xs, {"equation": eq})
    assert g.types[g.outputs[0]].shape == np.einsum(eq, *xs).shape


def test_equations_are_normalized_with_an_explicit_output():
    assert normalize_equation("ij, jk") == "ij,jk->ik"
    assert normalize_equation("ba") == "ba->ab"          # implicit: the labels used once, sorted
    assert normalize_equation("ii") == "ii->"            # a trace
    assert normalize_equation("...ij,...jk") == "...ij,...jk->...ik"


@pytest.mark.parametrize("eq, shapes, reason", [
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' is 3 in one place and 4"),
    ("ij->ij", [(2, 3, 4)], "does not fit an input of rank 3"),
    ("ij->iz", [(2, 3)], "names one no input has"),
    ("i1->i", [(2, 3)], "must be letters"),
    ("ij,jk->ik", [(2, 3)], "has 2 inputs, got 1"),
    ("...ij,...jk->...ik", [(2, 3), (5, 3, 4)], "same number of dims"),
])
def test_bad_equations_name_the_problem(eq, shapes, reason):
    types = {f"x{k}": TensorType(s) for k, s in enumerate(shapes)}
    with pytest.raises(EinsatError, match=reason):
        Graph([Node(Op.EINSUM, list(types), ["y"], {"equation": eq}, name="bad")], types, ["y"])
