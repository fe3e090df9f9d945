import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.cost.devices import H100, H200
from einsat.cost.model import RooflineCost
from einsat.cost.models import COST_MODELS, DEFAULT_COST, cost_model, register_cost_model
from einsat.cost.profiled import MeasuredCost
from einsat.errors import EinsatError
from einsat.ir import GraphBuilder, Op, TensorType

MODELS = [RooflineCost("h100"), RooflineCost("h200"), RooflineCost("h100", tf32=True)]


def one_op(kind: str, dims: tuple[int, ...]):
    """A one-node program of `kind` whose tensors grow with every entry of `dims`."""
    a, b, c, d = dims
    g = GraphBuilder(seed=0)
    if kind == "matmul":
        y = g.matmul(g.input("x", (a, b)), g.input("w", (b, c)))
    elif kind == "conv":
        y = g.conv(g.input("x", (1, a, b + 2, c + 2)), g.input("w", (d, a, 3, 3)), padding=1)
    elif kind == "add":
        y = g.add(g.input("x", (a, b, c)), g.input("y", (a, b, c)))
    elif kind == "relu":
        y = g.relu(g.input("x", (a, b, d)))
    elif kind == "transpose":
        y = g.transpose(g.input("x", (a, b, c)), perm=(2, 0, 1))
    elif kind == "softmax":
        y = g.softmax(g.input("x", (a, b)), axis=-1)
    elif kind == "concat":
        y = g.concat(g.input("x", (a, b)), g.input("y", (c, b)), axis=0)
    else:
        y = g.reduce_sum(g.input("x", (a, b, c)), axes=(1,))
    return g.build(y)


KINDS = ["matmul", "conv", "add", "relu", "transpose", "softmax", "concat", "reduce_sum"]
KERNELS = [k for k in KINDS if k != "transpose"]  # a transpose is a view: no kernel
dims = st.tuples(*[st.integers(1, 300)] * 4)


@given(st.sampled_from(KINDS), dims, dims)
def test_roofline_is_monotone_in_tensor_sizes(kind, small, grow):
    big = tuple(s + g for s, g in zip(small, grow))
    for model in MODELS:
        lo, hi = model.graph_cost(one_op(kind, small)), model.graph_cost(one_op(kind, big))
        assert 0 < lo <= hi


@given(st.sampled_from(KERNELS), dims)
def test_every_kernel_pays_a_launch_and_h200_is_never_slower(kind, size):
    g = one_op(kind, size)
    h100, h200 = RooflineCost("h100").graph_cost(g), RooflineCost("h200").graph_cost(g)
    assert h100 >= H100.launch_us and h200 <= h100


def test_roofline_matches_hand_computed_times():
    g = one_op("matmul", (4096, 4096, 4096, 1))  # compute bound: 2*4096^3 FLOPs
    want = H100.launch_us + 2 * 4096 ** 3 / (H100.fp32_flops * H100.compute_efficiency) * 1e6
    assert RooflineCost("h100").graph_cost(g) == pytest.approx(want)
    tf32 = H100.launch_us + 2 * 4096 ** 3 / (H100.tf32_flops * H100.compute_efficiency) * 1e6
    assert RooflineCost("h100", tf32=True).graph_cost(g) == pytest.approx(tf32)
    r = one_op("relu", (1024, 1024, 1, 64))  # memory bound: read and write 256 MiB
    moved = 2 * 1024 * 1024 * 64 * 4
    assert RooflineCost("h200").graph_cost(r) == pytest.approx(H200.launch_us + moved / H200.bandwidth * 1e6)


def test_sources_are_free_and_views_cheap_but_not_free():
    model = RooflineCost("h100")
    t = TensorType((64, 1024))
    assert model.node_cost(Op.CONSTANT, {"value": np.zeros(3)}, [], [t]) == 0.0
    for op in (Op.RESHAPE, Op.SQUEEZE, Op.IDENTITY, Op.SPLIT, Op.TRANSPOSE):
        assert 0 < model.node_cost(op, {}, [t], [t]) == H100.view_us < H100.launch_us
    assert model.node_cost(Op.PAD, {}, [t], [t]) > H100.launch_us  # a layout op that is no view


class FakeProfile:
    def lookup(self, op, attrs, ins, outs):
        return 7.5 if op is Op.MATMUL else None


def test_measured_cost_uses_measurements_and_falls_back():
    model = MeasuredCost(FakeProfile(), RooflineCost("h100"))
    g = one_op("matmul", (8, 8, 8, 1))
    assert model.graph_cost(g) == 7.5
    r = one_op("relu", (8, 8, 1, 8))
    assert model.graph_cost(r) == RooflineCost("h100").graph_cost(r)


def test_cost_models_by_name():
    # a committed GPU profile replaces the roofline under the device's name
    assert cost_model("h100").name in ("h100", "measured-h100")
    assert cost_model("h200").name in ("h200", "measured-h200")
    assert cost_model("h200-tf32").tf32
    mine = RooflineCost("h100")
    assert cost_model(mine) is mine
    register_cost_model("test-measured", lambda: MeasuredCost(FakeProfile(), RooflineCost("h100")))
    try:
        assert isinstance(cost_model("test-measured"), MeasuredCost)
    finally:
        del COST_MODELS["test-measured"]
    with pytest.raises(EinsatError, match="unknown cost model 'a100'"):
        cost_model("a100")
    with pytest.raises(EinsatError, match="unknown device"):
        RooflineCost("tpu")


def test_one_default_cost_model_everywhere():
    import inspect

    import einsat
    from einsat.extract import extract

    assert DEFAULT_COST in COST_MODELS and cost_model().name == cost_model(DEFAULT_COST).name
    for fn in (einsat.optimize, extract):
        assert inspect.signature(fn).parameters["cost"].default is DEFAULT_COST, fn


def test_a_measured_model_of_a_custom_profile_needs_a_fallback():
    with pytest.raises(EinsatError, match="needs a fallback"):
        MeasuredCost(FakeProfile())


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_an_unfused_correct_costs_one_copy_of_its_region(model):
    """PET's correction writes the fix over the mutant in place: its cost follows the region,
    not the mutant (the fix's own ops are costed as nodes of their own)."""
    def cost(mutant_shape, fix_shape):
        starts = (0,) * len(fix_shape)
        region = {"region": starts + tuple(fix_shape)}
        return model.node_cost(Op.CORRECT, region, [TensorType(mutant_shape), TensorType(fix_shape)],
                               [TensorType(mutant_shape)])

    small = cost((64, 512, 56), (64, 512, 2))
    assert small == cost((64, 512, 112), (64, 512, 2))           # a larger mutant costs nothing more
    assert small < cost((64, 512, 112), (64, 512, 8))             # a larger region does
    # one read and one write of the region: what a memory-bound element-wise kernel over it costs
    copy = model.node_cost(Op.NEG, {}, [TensorType((64, 512, 2))], [TensorType((64, 512, 2))])
    assert small == pytest.approx(copy)
