"""weight_only: which e-classes are computable from weights alone, under each caller's limits."""

import numpy as np

from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.egraph.weights import weight_only
from einsat.ir.registry import Op
from einsat.ir.types import TensorType

SMALL, BIG = TensorType((4,), np.float64), TensorType((1024,), np.float64)  # 32 and 8192 bytes


def egraph() -> EGraphData:
    """0 = weight w [4], 1 = input x, 2 = relu(w), 3 = w + relu(w) (also x + w: one e-class),
    4 = expand(w) [1024], 5 = relu(expand(w)), 6 = opaque(w), 7 = relu(opaque(w))."""
    nodes = {
        0: [ENode(None, leaf=("weight", "w"))],
        1: [ENode(None, leaf=("input", "x"))],
        2: [ENode(Op.RELU, (0,))],
        3: [ENode(Op.ADD, (1, 0)), ENode(Op.ADD, (0, 2))],
        4: [ENode(Op.EXPAND, (0,), {"shape": (1024,)})],
        5: [ENode(Op.RELU, (4,))],
        6: [ENode(Op.OPAQUE, (0,), {"op_type": "RandomNormalLike", "output_types": (SMALL,)})],
        7: [ENode(Op.RELU, (6,))],
    }
    types = {c: BIG if c in (4, 5) else SMALL for c in nodes}
    return EGraphData({c: EClass(c, ns, types[c]) for c, ns in nodes.items()}, [3, 5, 7], ["a", "b", "c"],
                      {"x": SMALL}, {"w": np.arange(4.0)})


def test_without_limits_every_class_over_weights_through_foldable_ops():
    found = weight_only(egraph())
    # not the input, not the black box nor what it feeds, not a broadcast (`repeats_input`: folding
    # it would store the repetition) nor what it feeds
    assert set(found) == {0, 2, 3}
    assert found[3] == ENode(Op.ADD, (0, 2))  # the e-node that needs no input


def test_a_size_limit_keeps_large_values_and_their_users_out():
    assert set(weight_only(egraph(), max_bytes=1000)) == {0, 2, 3}


def test_a_work_limit_keeps_costly_ops_out():
    # relu of [4] is 4 FLOPs, add 4
    assert set(weight_only(egraph(), max_flops=4)) == {0, 2, 3}
    assert set(weight_only(egraph(), max_flops=3)) == {0}


def test_derivations_are_the_shallowest_and_acyclic():
    data = egraph()
    data.classes[2].nodes.insert(0, ENode(Op.RELU, (3,)))  # relu(w + relu(w)) = relu(w) would close a cycle
    found = weight_only(data)
    assert found[2] == ENode(Op.RELU, (0,)) and found[3] == ENode(Op.ADD, (0, 2))


def test_a_weight_recipe_derives_folded_weights_from_the_source_weights_alone():
    """8 = relu(w), also the weight fold_1 that saturation folded; 9 = fold_2 alone (no derivation)."""
    import pytest

    import einsat
    from einsat.egraph.weights import weight_recipe
    from einsat.errors import EinsatError

    data = egraph()
    data.classes[8] = EClass(8, [ENode(None, leaf=("weight", "fold_1")), ENode(Op.RELU, (0,))], SMALL)
    data.classes[9] = EClass(9, [ENode(None, leaf=("weight", "fold_2"))], SMALL)
    data.weights.update(fold_1=np.maximum(np.arange(4.0), 0), fold_2=np.ones(4))
    recipe = weight_recipe(data, {"fold_1": 8, "relu_w": 2}, {"w": SMALL})
    assert recipe.inputs == ("w",) and recipe.outputs == ("fold_1", "relu_w") and not recipe.weights
    w = np.array([-1.0, 2.0, -3.0, 4.0])
    out = einsat.run(recipe, {"w": w})
    np.testing.assert_array_equal(out["fold_1"], [0.0, 2.0, 0.0, 4.0])  # from the new w, not fold_1's array
    np.testing.assert_array_equal(out["relu_w"], [0.0, 2.0, 0.0, 4.0])
    with pytest.raises(EinsatError, match="no derivation from the source weights"):
        weight_recipe(data, {"fold_2": 9}, {"w": SMALL})
