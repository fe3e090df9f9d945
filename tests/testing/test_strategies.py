import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import einsat
from einsat.ir import Op
from einsat.ir.registry import normalize_attrs, opdef
from einsat.ir.types import TensorType
from einsat.testing import strategies as es
from einsat.verify.field.table import exact_over_field


@given(es.programs(max_nodes=5))
def test_programs_are_valid_and_run(g):
    assert 1 <= len(g.nodes) <= 5 + 1 and g.outputs
    out = einsat.run(g, es.program_inputs(g))
    for o in g.outputs:
        assert out[o].shape == g.types[o].shape
    # every node feeds an output (dead steps are dropped)
    used = {i for n in g.nodes for i in n.inputs} | set(g.outputs)
    assert all(set(n.outputs) & used for n in g.nodes)


@given(es.programs(ops=[Op.CONV, Op.RELU], max_nodes=4, min_rank=4, max_rank=4))
def test_programs_draw_from_the_given_ops(g):
    assert {n.op for n in g.nodes} <= {Op.CONV, Op.RELU}


@given(es.multilinear_programs(max_nodes=4))
def test_multilinear_programs_have_field_semantics(g):
    assert all(exact_over_field(n) for n in g.nodes)


def test_a_failing_program_shrinks_to_its_essence():
    # the smallest program with a matmul feeding a transpose is just those two ops
    def has_chain(g):
        ops = {n.outputs[0]: n for n in g.nodes}
        return any(n.op is Op.TRANSPOSE and n.inputs[0] in ops and ops[n.inputs[0]].op is Op.MATMUL
                   for n in g.nodes)
    ops = [Op.RELU, Op.ADD, Op.MATMUL, Op.TRANSPOSE, Op.SUB]
    g = find(es.programs(ops=ops, max_nodes=6, min_rank=2), has_chain,
             settings=settings(max_examples=500, database=None, derandomize=True))
    assert [n.op for n in g.nodes] == [Op.MATMUL, Op.TRANSPOSE]
    assert all(d == 1 for n in g.inputs for d in g.types[n].shape)


OPS_WITH_ATTRS = [Op.AVGPOOL, Op.MAXPOOL, Op.TRANSPOSE, Op.RESHAPE, Op.FLATTEN, Op.UNSQUEEZE, Op.CONCAT,
                  Op.SOFTMAX, Op.SPLIT, Op.SLICE, Op.PAD, Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.GATHER, Op.GELU,
                  Op.LEAKY_RELU, Op.LAYERNORM]


@pytest.mark.parametrize("op", OPS_WITH_ATTRS, ids=lambda o: o.value)
@given(data=st.data())
def test_attrs_for_draws_attributes_the_registry_accepts(op, data):
    rank = 4 if op in (Op.AVGPOOL, Op.MAXPOOL) else data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(2 if op is Op.SPLIT else 1, 5), min_size=rank, max_size=rank)))
    x = TensorType(shape)
    attrs = data.draw(es.attrs_for(op, [x]))
    types = [x, TensorType((2,), np.int64)] if op is Op.GATHER else \
        [x, TensorType(shape[attrs["axis"]:])] if op is Op.LAYERNORM else [x, x] if op is Op.CONCAT else [x]
    norm = normalize_attrs(op, attrs, types)
    assert opdef(op).infer(types, norm)


@given(es.conv_cases(), es.seeds)
def test_the_registry_case_strategies_stay_available(case, seed):
    # the op-case strategies of the registry tests live in the same module
    x, w = es.arrays(seed, case["x"], case["w"])
    assert x.shape == case["x"] and w.shape == case["w"]


@given(es.mutant_pairs())
def test_mutant_pairs_name_regions_inside_the_original_outputs(pair):
    assert pair.family in ("sound", "output_region", "weight_element", "padding", "batch_to_width",
                           "dilated_seams", "fused_groups")
    assert pair.original.input_types() == pair.mutant.input_types()
    for o in pair.original.outputs:
        shape = pair.original.types[o].shape
        for r in pair.regions[o]:
            assert all(0 <= s < e <= n for s, e, n in zip(r.starts, r.ends, shape))
        assert pair.mask(o).shape == shape


def test_unknown_mutant_families_are_named():
    with pytest.raises(ValueError, match="nope"):
        es.mutant_pairs(families=("nope",))


@settings(max_examples=30)
@given(es.programs(max_nodes=3, constant_tails=True))
def test_constant_tails_are_zero_behind_a_commutative_op(g):
    last = g.producer(g.outputs[-1])
    out = einsat.run(g, es.program_inputs(g))[g.outputs[-1]]
    if last.op in (Op.MUL, Op.MINIMUM) and any(
            g.producer(i) is not None and g.producer(i).op is Op.RELU and g.producer(g.producer(i).inputs[0]).op
            is Op.SUB and len(set(g.producer(g.producer(i).inputs[0]).inputs)) == 1 for i in last.inputs):
        assert np.all(out == 0)


# -- the op lists follow the registry (#26: MULTILINEAR had drifted from the multilinear flag) ------

def _field_exact(op) -> bool:
    from einsat.ir.registry import REGISTRY
    from einsat.verify.field.table import AFFINE
    return REGISTRY[op].multilinear or op in AFFINE


@pytest.mark.parametrize("op", es.ALL_OPS, ids=lambda o: o.value)
def test_every_listed_op_is_drawn(op):
    g = find(es.programs(ops=[op], max_nodes=2, min_rank=1, max_rank=4),
             lambda g: any(n.op is op for n in g.nodes), settings=settings(max_examples=300, database=None))
    assert any(n.op is op for n in g.nodes)


def test_multilinear_lists_exactly_the_drawn_ops_exact_over_the_field():
    from einsat.ir.registry import REGISTRY
    from einsat.testing.programs import NOT_DRAWN
    assert all(_field_exact(op) for op in es.MULTILINEAR), "an op with no exact meaning over the field"
    missing = [op.value for op in REGISTRY if _field_exact(op) and op not in es.MULTILINEAR and op not in NOT_DRAWN]
    assert not missing, f"ops exact over the field that multilinear programs never draw: {missing}"
    assert not set(NOT_DRAWN) & set(es.ALL_OPS), "a reason for an op that is drawn"
    # the drift #26 found: neg and identity are multi-linear and drawable
    assert {Op.NEG, Op.IDENTITY} <= set(es.MULTILINEAR)


def test_elementwise_and_chain_lists_follow_the_registry():
    from einsat.ir.registry import REGISTRY
    assert es.ELEMENTWISE and all(REGISTRY[op].elementwise for op in es.ELEMENTWISE)
    assert es.ALL_OPS[:len(es.ELEMENTWISE)] == es.ELEMENTWISE  # element-wise ops are preferred
    from einsat.testing.programs import CHAIN_OPS
    assert CHAIN_OPS and all(REGISTRY[op].chain_fusable for op in CHAIN_OPS)


def test_every_derivable_op_has_expression_cases():
    from einsat.ir.groups import DERIVABLE
    from einsat.testing.expressions import CASES, OPS
    missing = sorted(op.value for op in DERIVABLE if op not in CASES)
    assert not missing, f"ops the derivation generator rewrites with no expression cases: {missing}"
    assert OPS == tuple(op.value for op in CASES)
