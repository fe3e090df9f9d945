"""bfloat16 is a float wherever einsat asks "is this a float?" (#30): NumPy files ml_dtypes'
bfloat16 under kind 'V', so `np.issubdtype(bfloat16, np.floating)` is False, and each place that
asked it treated a bf16 program's floats as something else. `einsat.ir.types.is_float` counts it;
one test per place, each failing before its change."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

import einsat
from einsat.egraph import Limits, Schedule, Session
from einsat.ir.builder import GraphBuilder

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_the_attention_generator_reads_a_bf16_chain():
    """rewrites.algebra.attention: a bf16 chain (scale, scores, softmax, product) got no attention:
    its scores' type and its bf16 scale were 'not float'."""
    from einsat.rewrites.algebra.attention import attention_generator
    b = GraphBuilder("attn")
    q, k, v = b.input("q", (2, 4, 8), BF16), b.input("k", (2, 6, 8), BF16), b.input("v", (2, 6, 5), BF16)
    scores = b.mul(b.matmul(q, b.transpose(k, perm=(0, 2, 1))), b.const(0.125, BF16, name="s"))
    g = b.build(b.matmul(b.softmax(scores, axis=-1), v))
    s = Session(Limits(iterations=1, nodes=20_000, time_s=60))
    s.add_graph(g)
    report = s.run(Schedule((attention_generator(),)))
    assert report.rules["attention"].matches >= 1


def test_bf16_weights_are_fingerprinted_as_parameters():
    """partition.fingerprint: a bf16 weight was a constant (keyed by its values), so two layers
    differing only in their weights got different fingerprints and the second was not reused."""
    from einsat.partition.fingerprint import canonical, is_param

    def layer(seed):
        b = GraphBuilder("layer")
        w = np.random.default_rng(seed).standard_normal((8, 8)).astype(BF16)
        return b.build(b.relu(b.matmul(b.input("x", (2, 8), BF16), b.weight("w", w))))

    assert is_param(np.ones((2, 2), BF16))
    assert canonical(layer(0)).key == canonical(layer(1)).key


def test_the_corrector_takes_bf16_weights_as_variables():
    """verify.corrector: a bf16 weight was an exact constant (split by its values), not one of the
    pair's shared variables."""
    from einsat.verify.corrector import assign_sources
    b = GraphBuilder("g")
    w = np.random.default_rng(0).standard_normal((4, 4)).astype(BF16)
    g = b.build(b.matmul(b.input("x", (2, 4), BF16), b.weight("w", w)))
    env0, env1, _, _ = assign_sources(g, g)
    assert "w" in env0.sources and "w" in env1.sources


def test_a_bf16_constant_is_read_as_the_fraction_it_rounds():
    """verify.field.embed_constant: bf16(1/3) was embedded as its dyadic value, not 1/3, so it
    differed over the field from the exact division by 3 that fp32's float32(1/3) meets."""
    from einsat.verify.field import embed_constant
    third = embed_constant(np.array([1 / 3], np.float32))
    assert embed_constant(np.array([1 / 3], BF16)).tolist() == third.tolist()
    assert embed_constant(np.array([1 / 3], np.float16)).tolist() == third.tolist()


def test_a_random_bf16_weight_is_a_variable_of_the_mutation_search():
    """rewrites.mutate.subprograms: a bf16 weight was read as an exact constant, so two
    subprograms differing only in their bf16 weights had different keys."""
    from einsat.rewrites.mutate.subprograms import _constant
    assert not _constant(np.random.default_rng(0).standard_normal((3, 3)).astype(BF16))
    assert _constant(np.ones((3, 3), BF16))


def test_placeholder_bf16_weights_get_random_values():
    """ir.onnx.weights: --fill-weights random left a bf16 model's weights as they were."""
    from einsat.ir.onnx.weights import fill_random_weights
    w = helper.make_tensor("w", TensorProto.BFLOAT16, (4, 4), np.zeros(16, np.uint16).tolist(), raw=False)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, (2, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, (2, 4))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    filled = einsat.load_onnx(fill_random_weights(model, seed=0))
    values = np.asarray(filled.weights["w"]).astype(np.float32)
    assert filled.weights["w"].dtype == BF16 and np.unique(values).size > 4


def test_the_gpu_check_compares_bf16_outputs_within_a_tolerance():
    """gpu.check.rel_error: bf16 outputs were compared for equality, as integers are, so a
    bf16 program one rounding off its reference 'differed' (an infinite error)."""
    from einsat.gpu.check import rel_error
    want = np.array([1.0, 2.0, 4.0], BF16)
    got = np.array([1.0, 2.0, 4.03125], BF16)  # one bf16 ulp off at 4
    assert rel_error(got, want) == 0.03125 / 4
